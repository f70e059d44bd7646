import { isObject, own } from '../domain/json';
import type { SimulatorCore } from './core';
import { errorReply, type Reply, reply } from './http-util';
import { validateProposal } from './proposal-rules';
import { type AnsweredRoute, type Context, heldRoute, type Route, route } from './simulator-router';
import { type Evento, isEvento } from './service-flow';
import { sameCredential } from './signing';
import { tokenEndpoint } from './tokens';

/**
 * The service's own API (interface §4), as the partner calls it. Where the interface shows no
 * answer, the guess is noted where it is made and listed in simulator.ts.
 */

const invalid = (field: string, message: string) => errorReply(400, 'VALIDATION_ERROR', message, { field });

/** The callback URL of a registration: http or https, or null. */
function callbackUrl(value: unknown): string | null {
  if (typeof value !== 'string' || !URL.canParse(value)) return null;
  const { protocol } = new URL(value);
  return protocol === 'http:' || protocol === 'https:' ? value : null;
}

/** `POST /api/v1/webhooks` (interface §2.4, §4.5). */
function registerWebhook(core: SimulatorCore) {
  return (ctx: Context): Reply => {
    const body = ctx.body;
    if (!isObject(body)) return invalid('body', 'O corpo da requisição deve ser um objeto JSON');
    const url = callbackUrl(own(body, 'url'));
    if (url === null) return invalid('url', 'url deve ser uma URL http ou https válida');
    const eventos = own(body, 'eventos');
    if (!Array.isArray(eventos) || eventos.length === 0)
      return invalid('eventos', 'eventos deve ser uma lista não vazia de eventos do catálogo');
    const unknown = eventos.filter((e) => !isEvento(e));
    if (unknown.length > 0)
      return invalid('eventos', `eventos desconhecidos: ${unknown.map((e) => JSON.stringify(e)).join(', ')}`);
    const secret = own(body, 'secret');
    if (typeof secret !== 'string' || secret === '')
      return invalid('secret', 'secret é obrigatório e não pode ser vazio');
    const registration = core.deliverer.register(url, [...new Set(eventos as Evento[])], secret);
    // Answer "not shown" (interface §4.5): 201 with the registration, the secret left out.
    const { id, eventos: subscribed, active } = registration;
    return reply(201, { id, url: registration.url, eventos: subscribed, active });
  };
}

/** `POST /api/v1/propostas` (interface §4.1): 201, then `proposta.criada` and the analysis result. */
function createProposal(core: SimulatorCore) {
  const { opts, proposals, timers } = core;
  return (ctx: Context): Reply => {
    const result = validateProposal(ctx.body, opts.isUnknownCpf);
    if (!result.ok) {
      const { ok: _ok, status, ...body } = result;
      opts.logger.info(
        { error: body.error, field: 'field' in body ? body.field : undefined },
        'proposal refused',
      );
      return reply(status, body);
    }
    const proposal = proposals.create(result.value);
    const denied = proposal.vl_emprestimo > opts.denyAboveAmount;
    const { nu_proposta, dt_criacao, uuid } = proposal;
    return {
      ...reply(201, { nu_proposta, status: 'em_analise', dt_criacao, uuid }),
      // After the answer is written, so that `proposta.criada` never overtakes the 201.
      after: () => {
        void proposals.emit(nu_proposta, 'proposta.criada');
        timers.after(opts.analysisDelayMs, () => {
          // The control API may have moved it meanwhile; then the analysis has nothing to say.
          if (proposal.position !== 0 || proposal.final) return;
          void proposals.emit(nu_proposta, denied ? 'proposta.negada' : 'proposta.pre_aprovada');
        });
      },
    };
  };
}

/** `POST /contract/averbacao` (interface §4.2), and the deprecated `POST /contract` (interface §9). */
function startAverbacao(core: SimulatorCore, path: '/contract/averbacao' | '/contract') {
  const headers: Record<string, string> =
    path === '/contract'
      ? { deprecation: 'true', link: '</contract/averbacao>; rel="successor-version"' }
      : {};
  return (ctx: Context): Reply => {
    const body = ctx.body === undefined ? {} : ctx.body;
    if (!isObject(body)) return invalid('body', 'O corpo da requisição deve ser um objeto JSON');
    const { requestId } = core.averbacoes.start(body, path);
    // interface §4.2: the link the service gives, to a route that never answers.
    return reply(
      202,
      { requestId, status: 'queued', _links: { result: { href: `/result/${requestId}` } } },
      headers,
    );
  };
}

/** `GET /request/:requestId` (interface §4.3), with `x-api-key` when the simulator has one. */
function requestStatus(core: SimulatorCore) {
  const { apiKey } = core.opts;
  return (ctx: Context): Reply => {
    if (apiKey !== undefined) {
      const given = ctx.req.headers['x-api-key'];
      if (typeof given !== 'string' || !sameCredential(given, apiKey))
        return errorReply(401, 'UNAUTHORIZED', 'Cabeçalho x-api-key ausente ou inválido');
    }
    const id = ctx.params.requestId ?? '';
    const found = core.averbacoes.status(id);
    // Unknown ids: "not shown" (interface §4.3).
    if (found === undefined) return errorReply(404, 'NOT_FOUND', `Requisição ${id} não encontrada`);
    const { requestId, correlationId } = found.record;
    return reply(200, { requestId, correlationId, status: found.status });
  };
}

/** The token endpoint and the proposal, webhook and averbação routes. */
export function serviceRoutes(core: SimulatorCore): Route[] {
  const { opts } = core;
  const token: AnsweredRoute['handle'] = tokenEndpoint({
    tokens: core.tokens,
    clientId: opts.clientId,
    clientSecret: opts.clientSecret,
    tokenTtlSeconds: opts.tokenTtlSeconds,
    logger: opts.logger,
  });
  return [
    route('POST', '/oauth/token', 'token', token),
    route('POST', '/api/v1/webhooks', 'api', registerWebhook(core)),
    route('POST', '/api/v1/propostas', 'api', createProposal(core)),
    route('POST', '/contract/averbacao', 'api', startAverbacao(core, '/contract/averbacao')),
    route('POST', '/contract', 'api', startAverbacao(core, '/contract')),
    route('GET', '/request/:requestId', 'api', requestStatus(core)),
    // interface §4.2: `_links.result` points here, and this route does not answer.
    heldRoute('GET', '/result/:requestId'),
  ];
}
