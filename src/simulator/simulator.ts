import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Evento, EVENTOS, isKnownEvento, type RegistryStatus } from '../domain/catalogue';
import { constantTimeEqual } from '../domain/signature';
import { AverbacaoBook, type SimAverbacao } from './averbacoes';
import { type AttemptRecord, Deliverer, type DeliveryRecord, type Registration } from './deliverer';
import { OFFERS, paginate, REPORTS } from './fixtures';
import {
  BodyTooLarge,
  errorReply,
  isObject,
  matchPath,
  parseBody,
  readBody,
  type Reply,
  reply,
  send,
} from './http-util';
import {
  type ChaosOptions,
  type RegistryOptions,
  type ResolvedChaos,
  type ResolvedRegistry,
  resolveChaos,
  resolveOptions,
  resolveRegistry,
  type SimulatorOptions,
} from './options';
import { planAdvance, ProposalBook, type SimProposal, validateProposal } from './proposals';
import { Timers } from './timers';

/**
 * A stand-in for the consignado service (SPEC §7), over real HTTP: what tests, the demo and
 * partners' sandboxes talk to instead of the real thing.
 *
 * Service routes (JSON; all but the token endpoint, `POST /offers/search` and `/result/:id` need
 * `Authorization: Bearer <token from POST /oauth/token>`, else 401 `{error: 'UNAUTHORIZED'}`):
 *
 *   POST /oauth/token                    client credentials → {access_token, token_type, expires_in}
 *   POST /api/v1/webhooks                {url, eventos, secret} → 201 {id, url, eventos, active}
 *   POST /api/v1/propostas               §2.1 → 201 §2.2, then proposta.criada and the analysis result
 *   POST /contract/averbacao             any JSON object → 202 {requestId, status, _links.result}
 *   POST /contract                       the same, deprecated: `Deprecation: true`
 *   GET  /request/:requestId             {requestId, correlationId, status} (+ x-api-key when set)
 *   GET  /result/:requestId              never answers (§4.2: the broken `_links.result`)
 *   GET  /workers/new-relationships, /contracts/relationship-ended,
 *        /contracts/accounting-and-remuneration, /emprestimos/consultar-repasse-pagamentos
 *   POST /offers/search                  public; pages of 25 fixed offers (`pageStart`, `pageSize`)
 *
 * Control API (the sandbox's own: no auth, never subject to chaos):
 *
 *   GET  /_sim                                  this list
 *   GET  /_sim/state                            registrations, proposals and their events,
 *                                               averbações, deliveries, every attempt, settings
 *   POST /_sim/proposals/:nu/events  {evento}   send that catalogue event for the proposal, as is
 *   POST /_sim/proposals/:nu/advance {to?}      send the next happy-path events up to `to` (one step
 *                                               when omitted); a detour (proposta.negada,
 *                                               proposta.cancelada, averbacao.negada, pagamento.falha)
 *                                               goes after the happy-path event it follows
 *   POST /_sim/chaos    {duplicateRate?, outOfOrder?, outOfOrderMaxHoldMs?, apiErrorRate?, rateLimitRate?}
 *   POST /_sim/registry {processingAfterMs?, completeAfterMs?, webhook?, webhookDelayMs?, payloadShape?}
 *                                               for averbações created from now on
 *   POST /_sim/registrations/:id/reactivate     a deactivated callback receives again
 *
 * Guesses where the seed shows nothing (documented for the README):
 * - the token endpoint and its answers follow OAuth 2.0 client credentials (RFC 6749 §4.4, §5);
 * - `POST /api/v1/webhooks` answers 201 `{id, url, eventos, active: true}`; errors 400 VALIDATION_ERROR;
 * - `POST /api/v1/propostas` answers 201; validation errors 400 `{error: 'VALIDATION_ERROR', message,
 *   field}`; the business rule 422; an employee is "not found" for `unknownCpfs`;
 *   `vl_emprestimo` above `denyAboveAmount` is denied (`proposta.negada`);
 * - dados of every event: nu_proposta, nu_cpf, st_proposta (SPEC §6 names), vl_emprestimo,
 *   no_conveniada, uuid, and requestId on `averbacao.*` events when there is one;
 * - an averbação body naming a known `nu_proposta` sends `averbacao.solicitada` at once and
 *   `averbacao.aprovada` / `averbacao.negada` on completion; `forceError: true` makes it end in error;
 * - the registry webhook goes to each active registration's URL + `/registry`, signed like
 *   deliveries, with `{requestId, correlationId, status, nu_proposta}` at the top level (or under
 *   `dados`), retried like deliveries, its failures counting against that registration;
 * - `GET /request/:id` of an unknown id answers 404 `{error: 'NOT_FOUND'}`;
 * - reports and offers are hypermedia pages where `pageStart` is the offset of the first item.
 */

export interface Simulator {
  /** Base URL, e.g. `http://127.0.0.1:4010` (no trailing slash). */
  readonly url: string;
  readonly port: number;
  /** `<url>/oauth/token`. */
  readonly tokenUrl: string;
  /** Issues a token as the token endpoint would (for tests and the demo). */
  issueToken(): string;
  /** A snapshot (deep copy) of everything the simulator did; `GET /_sim/state` serves the same. */
  state(): SimulatorState;
  /** `POST /_sim/proposals/:nu/events`. Throws for an unknown proposal. */
  sendEvent(nuProposta: number, evento: Evento): Promise<void>;
  /** `POST /_sim/proposals/:nu/advance`: the events it sends, or an error message. */
  advance(nuProposta: number, to?: string): { ok: true; eventos: Evento[] } | { ok: false; message: string };
  /** `POST /_sim/chaos`: merges and returns the settings (TypeError for invalid ones). */
  setChaos(chaos: ChaosOptions): ResolvedChaos;
  /** `POST /_sim/registry`, for averbações created from now on. */
  setRegistry(registry: RegistryOptions): Omit<ResolvedRegistry, 'outcome'>;
  /** `POST /_sim/registrations/:id/reactivate`. */
  reactivate(registrationId: string): boolean;
  /** Stops everything promptly: the server, held sockets, timers and in-flight deliveries. */
  close(): Promise<void>;
}

export interface SimulatorState {
  registrations: Omit<Registration, 'secret'>[];
  proposals: SimProposal[];
  averbacoes: (SimAverbacao & { status: RegistryStatus })[];
  deliveries: DeliveryRecord[];
  attempts: AttemptRecord[];
  chaos: ResolvedChaos;
  registry: Omit<ResolvedRegistry, 'outcome'>;
  /** `GET /result/:id` requests being held open right now (clients caught by §4.2's trap). */
  heldResultRequests: number;
}

type Access = 'api' | 'public' | 'token' | 'control' | 'trap';

interface Context {
  req: IncomingMessage;
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
}

interface Route {
  method: 'GET' | 'POST';
  pattern: string;
  segments: string[];
  access: Access;
  handle: (ctx: Context) => Reply | Promise<Reply>;
}

const CONTROL_HELP = [
  'GET  /_sim/state',
  'POST /_sim/proposals/:nu/events   {"evento": "<catalogue event>"}',
  'POST /_sim/proposals/:nu/advance  {"to": "<catalogue event>"}  (omit "to" for one step)',
  'POST /_sim/chaos                  {"duplicateRate", "outOfOrder", "apiErrorRate", "rateLimitRate"}',
  'POST /_sim/registry               {"webhook": "send|delay|drop", "webhookDelayMs", "payloadShape"}',
  'POST /_sim/registrations/:id/reactivate',
];

/** The control API in one line per route, for `GET /_sim` and the `simulate` command. */
export function controlApiHelp(): string[] {
  return [...CONTROL_HELP];
}

function baseUrl(host: string, port: number): string {
  const shown = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  return `http://${shown.includes(':') ? `[${shown}]` : shown}:${port}`;
}

/** Starts the simulator and resolves once it listens. Options: see `SimulatorOptions`. */
export async function startSimulator(options: SimulatorOptions = {}): Promise<Simulator> {
  const opts = resolveOptions(options);
  const { logger, clock } = opts;
  const timers = new Timers();
  let chaos = opts.chaos;
  let registry = opts.registry;
  const deliverer = new Deliverer({
    delivery: opts.delivery,
    signatureHeader: opts.signatureHeader,
    chaos: () => chaos,
    random: opts.random,
    clock,
    logger,
    timers,
  });
  const proposals = new ProposalBook({ deliverer, chaos: () => chaos, clock, logger, timers });
  const averbacoes = new AverbacaoBook({
    deliverer,
    proposals,
    registry: () => registry,
    clock,
    logger,
    timers,
  });
  /** token → expiry (ms since the epoch, by the simulator's clock). */
  const tokens = new Map<string, number>();
  /** `GET /result/:id` requests, held open until the client leaves or close(). */
  const held = new Set<ServerResponse>();

  function issueToken(): string {
    const token = randomBytes(24).toString('base64url');
    const now = clock.now().getTime();
    if (tokens.size >= 1000) for (const [t, expiresAt] of tokens) if (now >= expiresAt) tokens.delete(t);
    tokens.set(token, now + opts.tokenTtlSeconds * 1000);
    return token;
  }

  function tokenProblem(req: IncomingMessage): string | null {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!match?.[1]) return 'Cabeçalho Authorization: Bearer <token> ausente';
    const expiresAt = tokens.get(match[1]);
    if (expiresAt === undefined) return 'Token inválido';
    if (clock.now().getTime() >= expiresAt) {
      tokens.delete(match[1]);
      return 'Token expirado';
    }
    return null;
  }

  function registrySettings(): Omit<ResolvedRegistry, 'outcome'> {
    const { outcome: _outcome, ...rest } = registry;
    return rest;
  }

  function state(): SimulatorState {
    return structuredClone({
      registrations: [...deliverer.registrations.values()].map(({ secret: _secret, ...r }) => r),
      proposals: proposals.all(),
      averbacoes: averbacoes.all(),
      deliveries: deliverer.deliveries,
      attempts: deliverer.attempts,
      chaos,
      registry: registrySettings(),
      heldResultRequests: held.size,
    });
  }

  function advance(
    nu: number,
    to?: string,
  ): { ok: true; eventos: Evento[] } | { ok: false; message: string } {
    const proposal = proposals.get(nu);
    if (proposal === undefined) return { ok: false, message: `unknown proposal ${nu}` };
    const plan = planAdvance(proposal, to);
    if (plan.ok) for (const evento of plan.eventos) void proposals.emit(nu, evento);
    return plan;
  }

  // --- service routes -------------------------------------------------------------------------

  // The seed does not show the token endpoint (§5: "How credentials are obtained, and the token
  // endpoint: not shown"). This is the RFC 6749 guess: client credentials grant (§4.4) with the
  // credentials in the body (form or JSON) or HTTP Basic (§2.3.1), errors as in §5.2.
  function tokenEndpoint(ctx: Context): Reply {
    const noStore = { 'cache-control': 'no-store', pragma: 'no-cache' };
    const oauthError = (
      status: number,
      error: string,
      description: string,
      extra: Record<string, string> = {},
    ) => reply(status, { error, error_description: description }, { ...noStore, ...extra });
    const body = ctx.body === undefined ? {} : ctx.body;
    if (!isObject(body)) return oauthError(400, 'invalid_request', 'expected form or JSON parameters');
    let clientId = typeof body.client_id === 'string' ? body.client_id : '';
    let clientSecret = typeof body.client_secret === 'string' ? body.client_secret : '';
    const basic = /^Basic\s+(\S+)$/i.exec(ctx.req.headers.authorization ?? '');
    if (basic?.[1]) {
      const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon > 0) {
        clientId = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '));
        clientSecret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' '));
      }
    }
    if (body.grant_type === undefined) return oauthError(400, 'invalid_request', 'grant_type is required');
    if (body.grant_type !== 'client_credentials')
      return oauthError(400, 'unsupported_grant_type', 'only client_credentials is supported');
    const accepted =
      clientId !== '' &&
      clientSecret !== '' &&
      (opts.clientId === undefined || constantTimeEqual(clientId, opts.clientId)) &&
      (opts.clientSecret === undefined || constantTimeEqual(clientSecret, opts.clientSecret));
    if (!accepted) {
      logger.warn({ client_id: clientId || undefined }, 'token refused: bad client credentials');
      return oauthError(
        401,
        'invalid_client',
        'client authentication failed',
        basic ? { 'www-authenticate': 'Basic realm="consig-simulator"' } : {},
      );
    }
    logger.debug({ client_id: clientId }, 'token issued');
    return reply(
      200,
      {
        access_token: issueToken(),
        token_type: 'Bearer',
        expires_in: Math.max(1, Math.round(opts.tokenTtlSeconds)),
      },
      noStore,
    );
  }

  function registerWebhook(ctx: Context): Reply {
    const invalid = (field: string, message: string) =>
      errorReply(400, 'VALIDATION_ERROR', message, { field });
    const body = ctx.body;
    if (!isObject(body)) return invalid('body', 'O corpo da requisição deve ser um objeto JSON');
    let url: URL | null = null;
    try {
      url = typeof body.url === 'string' ? new URL(body.url) : null;
    } catch {
      url = null;
    }
    if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:'))
      return invalid('url', 'url deve ser uma URL http ou https válida');
    const eventos = body.eventos;
    if (!Array.isArray(eventos) || eventos.length === 0)
      return invalid('eventos', 'eventos deve ser uma lista não vazia de eventos do catálogo');
    const unknown = eventos.filter((e) => typeof e !== 'string' || !isKnownEvento(e));
    if (unknown.length > 0)
      return invalid('eventos', `eventos desconhecidos: ${unknown.map((e) => JSON.stringify(e)).join(', ')}`);
    if (typeof body.secret !== 'string' || body.secret === '')
      return invalid('secret', 'secret é obrigatório e não pode ser vazio');
    const subscribed = [...new Set(eventos as Evento[])];
    const registration = deliverer.register(body.url as string, subscribed, body.secret);
    // Response "not shown" in the seed (§4.5): 201 with the registration, secret left out.
    return reply(201, {
      id: registration.id,
      url: registration.url,
      eventos: registration.eventos,
      active: registration.active,
    });
  }

  function createProposal(ctx: Context): Reply {
    const result = validateProposal(ctx.body, opts.isUnknownCpf);
    if (!result.ok) {
      logger.info(
        { error: result.error, field: 'field' in result ? result.field : undefined },
        'proposal refused',
      );
      const { ok: _ok, status, ...body } = result;
      return reply(status, body);
    }
    const proposal = proposals.create(result.value);
    const denied = proposal.vl_emprestimo > opts.denyAboveAmount;
    return {
      status: 201,
      json: {
        nu_proposta: proposal.nu_proposta,
        status: 'em_analise',
        dt_criacao: proposal.dt_criacao,
        uuid: proposal.uuid,
      },
      after: () => {
        void proposals.emit(proposal.nu_proposta, 'proposta.criada');
        timers.after(opts.analysisDelayMs, () => {
          // The control API may have moved it meanwhile; then the analysis has nothing to say.
          if (proposal.position !== 0 || proposal.final) return;
          void proposals.emit(proposal.nu_proposta, denied ? 'proposta.negada' : 'proposta.pre_aprovada');
        });
      },
    };
  }

  function startAverbacao(path: '/contract/averbacao' | '/contract') {
    return (ctx: Context): Reply => {
      const body = ctx.body === undefined ? {} : ctx.body;
      if (!isObject(body))
        return errorReply(400, 'VALIDATION_ERROR', 'O corpo da requisição deve ser um objeto JSON', {
          field: 'body',
        });
      const record = averbacoes.start(body, path);
      const headers: Record<string, string> =
        path === '/contract'
          ? { deprecation: 'true', link: '</contract/averbacao>; rel="successor-version"' }
          : {};
      return reply(
        202,
        {
          requestId: record.requestId,
          status: 'queued',
          // §4.2: the link the service gives, to a route that never answers.
          _links: { result: { href: `/result/${record.requestId}` } },
        },
        headers,
      );
    };
  }

  function requestStatus(ctx: Context): Reply {
    if (opts.apiKey !== undefined) {
      const given = ctx.req.headers['x-api-key'];
      if (typeof given !== 'string' || !constantTimeEqual(given, opts.apiKey))
        return errorReply(401, 'UNAUTHORIZED', 'Cabeçalho x-api-key ausente ou inválido');
    }
    const id = ctx.params.requestId ?? '';
    const found = averbacoes.status(id);
    if (found === undefined) return errorReply(404, 'NOT_FOUND', `Requisição ${id} não encontrada`);
    return reply(200, {
      requestId: found.record.requestId,
      correlationId: found.record.correlationId,
      status: found.status,
    });
  }

  function pageParams(ctx: Context): { ok: true; start: number; size: number } | { ok: false; reply: Reply } {
    const body = isObject(ctx.body) ? ctx.body : {};
    const pick = (name: string, fallback: number): number | null => {
      const raw = ctx.query.get(name) ?? body[name];
      if (raw === undefined || raw === null || raw === '') return fallback;
      const n = typeof raw === 'string' ? Number(raw) : raw;
      return typeof n === 'number' && Number.isSafeInteger(n) ? n : null;
    };
    const start = pick('pageStart', 0);
    const size = pick('pageSize', 10);
    if (start === null || start < 0)
      return {
        ok: false,
        reply: errorReply(400, 'VALIDATION_ERROR', 'pageStart deve ser um inteiro ≥ 0', {
          field: 'pageStart',
        }),
      };
    if (size === null || size < 1 || size > 100)
      return {
        ok: false,
        reply: errorReply(400, 'VALIDATION_ERROR', 'pageSize deve ser um inteiro entre 1 e 100', {
          field: 'pageSize',
        }),
      };
    return { ok: true, start, size };
  }

  function searchOffers(ctx: Context): Reply {
    if (ctx.body !== undefined && !isObject(ctx.body))
      return errorReply(400, 'VALIDATION_ERROR', 'O corpo da requisição deve ser um objeto JSON', {
        field: 'body',
      });
    const page = pageParams(ctx);
    if (!page.ok) return page.reply;
    return reply(200, paginate('/offers/search', 'offers', OFFERS, page.start, page.size));
  }

  function report(path: string) {
    return (ctx: Context): Reply => {
      const page = pageParams(ctx);
      if (!page.ok) return page.reply;
      const r = REPORTS[path] as { name: string; items: readonly unknown[] };
      return reply(200, paginate(path, r.name, r.items, page.start, page.size));
    };
  }

  // --- control API ----------------------------------------------------------------------------

  function proposalParam(ctx: Context): number | null {
    const raw = ctx.params.nu ?? '';
    return /^\d+$/.test(raw) ? Number(raw) : null;
  }

  function controlSendEvent(ctx: Context): Reply {
    const nu = proposalParam(ctx);
    if (nu === null || proposals.get(nu) === undefined)
      return errorReply(404, 'NOT_FOUND', `unknown proposal ${ctx.params.nu ?? ''}`);
    const evento = isObject(ctx.body) ? ctx.body.evento : undefined;
    if (typeof evento !== 'string' || !isKnownEvento(evento))
      return errorReply(400, 'VALIDATION_ERROR', `evento must be one of ${EVENTOS.join(', ')}`, {
        field: 'evento',
      });
    void proposals.emit(nu, evento);
    return reply(202, { nu_proposta: nu, eventos: [evento] });
  }

  function controlAdvance(ctx: Context): Reply {
    const nu = proposalParam(ctx);
    if (nu === null || proposals.get(nu) === undefined)
      return errorReply(404, 'NOT_FOUND', `unknown proposal ${ctx.params.nu ?? ''}`);
    if (ctx.body !== undefined && !isObject(ctx.body))
      return errorReply(400, 'VALIDATION_ERROR', 'expected a JSON object {to?}');
    const to = isObject(ctx.body) ? ctx.body.to : undefined;
    if (to !== undefined && (typeof to !== 'string' || !isKnownEvento(to)))
      return errorReply(400, 'VALIDATION_ERROR', `to must be one of ${EVENTOS.join(', ')}`, { field: 'to' });
    const result = advance(nu, to);
    if (!result.ok) return errorReply(409, 'CONFLICT', result.message);
    return reply(202, { nu_proposta: nu, eventos: result.eventos });
  }

  function settingsUpdate<T>(ctx: Context, apply: (input: Record<string, unknown>) => T): Reply {
    if (!isObject(ctx.body)) return errorReply(400, 'VALIDATION_ERROR', 'expected a JSON object');
    try {
      return reply(200, apply(ctx.body));
    } catch (err) {
      return errorReply(400, 'VALIDATION_ERROR', err instanceof Error ? err.message : String(err));
    }
  }

  function setChaos(input: ChaosOptions): ResolvedChaos {
    chaos = resolveChaos(input, chaos);
    logger.info({ chaos }, 'chaos settings changed');
    return chaos;
  }

  function setRegistry(input: RegistryOptions): Omit<ResolvedRegistry, 'outcome'> {
    const { outcome: _ignored, ...rest } = input;
    registry = resolveRegistry(rest, registry);
    logger.info({ registry: registrySettings() }, 'registry settings changed');
    return registrySettings();
  }

  function reactivate(id: string): boolean {
    return deliverer.reactivate(id) !== undefined;
  }

  const routes: Route[] = [];
  const route = (method: Route['method'], pattern: string, access: Access, handle: Route['handle']) =>
    routes.push({ method, pattern, segments: pattern.split('/'), access, handle });

  route('POST', '/oauth/token', 'token', tokenEndpoint);
  route('POST', '/api/v1/webhooks', 'api', registerWebhook);
  route('POST', '/api/v1/propostas', 'api', createProposal);
  route('POST', '/contract/averbacao', 'api', startAverbacao('/contract/averbacao'));
  route('POST', '/contract', 'api', startAverbacao('/contract'));
  route('GET', '/request/:requestId', 'api', requestStatus);
  route('GET', '/result/:requestId', 'trap', () => reply(500)); // never called: see 'trap' below
  for (const path of Object.keys(REPORTS)) route('GET', path, 'api', report(path));
  route('POST', '/offers/search', 'public', searchOffers);
  route('GET', '/_sim', 'control', () => reply(200, { routes: controlApiHelp() }));
  route('GET', '/_sim/state', 'control', () => reply(200, state()));
  route('POST', '/_sim/proposals/:nu/events', 'control', controlSendEvent);
  route('POST', '/_sim/proposals/:nu/advance', 'control', controlAdvance);
  route('POST', '/_sim/chaos', 'control', (ctx) => settingsUpdate(ctx, (b) => setChaos(b as ChaosOptions)));
  route('POST', '/_sim/registry', 'control', (ctx) =>
    settingsUpdate(ctx, (b) => setRegistry(b as RegistryOptions)),
  );
  route('POST', '/_sim/registrations/:id/reactivate', 'control', (ctx) => {
    const id = ctx.params.id ?? '';
    if (!reactivate(id)) return errorReply(404, 'NOT_FOUND', `unknown registration ${id}`);
    return reply(200, { id, active: true, consecutiveFailures: 0 });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = new URL(req.url ?? '/', 'http://simulator');
    const path = target.pathname.length > 1 ? target.pathname.replace(/\/+$/, '') : target.pathname;
    let found: { route: Route; params: Record<string, string> } | undefined;
    let pathKnown = false;
    for (const r of routes) {
      const params = matchPath(r.segments, path);
      if (params === null) continue;
      pathKnown = true;
      if (r.method === req.method) {
        found = { route: r, params };
        break;
      }
    }
    const answer = (r: Reply) => {
      send(res, r);
      logger.debug({ method: req.method, path, status: r.status }, 'request');
      r.after?.();
    };
    if (found === undefined) {
      req.resume();
      answer(
        pathKnown
          ? errorReply(405, 'METHOD_NOT_ALLOWED', `${req.method ?? ''} não é aceito em ${path}`)
          : errorReply(404, 'NOT_FOUND', `Rota ${path} não encontrada`),
      );
      return;
    }
    const { route: r, params } = found;
    if (r.access === 'trap') {
      // §4.2: `_links.result` points here, and this route does not answer. Hold the socket open
      // until the client gives up or the simulator closes.
      req.resume();
      held.add(res);
      res.on('close', () => held.delete(res));
      logger.info({ path }, 'GET /result/:id held open: this route never answers (§4.2)');
      return;
    }
    let raw: Buffer;
    try {
      raw = await readBody(req);
    } catch (err) {
      if (err instanceof BodyTooLarge) {
        answer(errorReply(413, 'PAYLOAD_TOO_LARGE', 'Corpo da requisição grande demais'));
        req.resume();
      } else res.destroy();
      return;
    }
    if (r.access === 'api' || r.access === 'public') {
      const roll = opts.random();
      if (roll < chaos.apiErrorRate) {
        answer(errorReply(503, 'SERVICE_UNAVAILABLE', 'Serviço temporariamente indisponível'));
        return;
      }
      if (roll < chaos.apiErrorRate + chaos.rateLimitRate) {
        answer({
          ...errorReply(429, 'TOO_MANY_REQUESTS', 'Limite de requisições excedido'),
          headers: { 'retry-after': '1' },
        });
        return;
      }
    }
    if (r.access === 'api') {
      const problem = tokenProblem(req);
      if (problem !== null) {
        answer({ ...errorReply(401, 'UNAUTHORIZED', problem), headers: { 'www-authenticate': 'Bearer' } });
        return;
      }
    }
    const parsed = parseBody(raw, req.headers['content-type']);
    if (!parsed.ok) {
      answer(
        r.access === 'token'
          ? reply(400, { error: 'invalid_request', error_description: 'body is neither form nor JSON' })
          : errorReply(400, 'VALIDATION_ERROR', 'Corpo da requisição não é JSON válido', { field: 'body' }),
      );
      return;
    }
    answer(await r.handle({ req, params, query: target.searchParams, body: parsed.value }));
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      logger.error(
        { err: err instanceof Error ? err.message : String(err), path: req.url },
        'simulator route failed',
      );
      if (!res.headersSent) send(res, errorReply(500, 'INTERNAL_ERROR', 'Erro interno do simulador'));
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const url = baseUrl(opts.host, port);
  logger.info({ url }, 'simulator listening');

  let closing: Promise<void> | null = null;
  return {
    url,
    port,
    tokenUrl: `${url}/oauth/token`,
    issueToken,
    state,
    sendEvent(nu, evento) {
      if (proposals.get(nu) === undefined) throw new Error(`unknown proposal ${nu}`);
      return proposals.emit(nu, evento);
    },
    advance,
    setChaos,
    setRegistry,
    reactivate,
    close() {
      closing ??= (async () => {
        // Timers first: nothing new starts, pending waits end and in-flight fetches are aborted.
        timers.close();
        for (const res of held) res.destroy();
        held.clear();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        await deliverer.settled();
        logger.info({ url }, 'simulator closed');
      })();
      return closing;
    },
  };
}
