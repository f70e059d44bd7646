import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger';
import {
  BodyTooLarge,
  type Context,
  errorReply,
  matchPath,
  parseBody,
  readBody,
  type Reply,
  reply,
  send,
} from './http-util';
import type { ResolvedChaos } from './options';
import type { TokenBook } from './tokens';

export type { Context } from './http-util';

/**
 * From an HTTP request to a route's answer: find the route, hold the trap open, read the body, then
 * the gates every service route has (chaos, the bearer token), then the route itself. Routes only
 * see a parsed body and answer a `Reply`.
 */

/**
 * What stands in front of a route:
 * - `api`: the bearer token (interface §5), and chaos;
 * - `public`: chaos only (`POST /offers/search`, interface §5);
 * - `token`: the token endpoint, never subject to chaos, errors in the OAuth form;
 * - `control`: the sandbox's own API, no auth, never subject to chaos.
 */
export type Access = 'api' | 'public' | 'token' | 'control';

interface RouteBase {
  method: 'GET' | 'POST';
  /** The pattern split on `/`, for `matchPath`. */
  segments: string[];
}

export interface AnsweredRoute extends RouteBase {
  access: Access;
  handle: (ctx: Context) => Reply | Promise<Reply>;
}

/** A route that takes requests and never answers them (interface §4.2: `_links.result`). */
export interface HeldRoute extends RouteBase {
  access: 'held';
}

export type Route = AnsweredRoute | HeldRoute;

export function route(
  method: Route['method'],
  pattern: string,
  access: Access,
  handle: AnsweredRoute['handle'],
): AnsweredRoute {
  return { method, segments: pattern.split('/'), access, handle };
}

export function heldRoute(method: Route['method'], pattern: string): HeldRoute {
  return { method, segments: pattern.split('/'), access: 'held' };
}

export interface RouterDeps {
  routes: readonly Route[];
  tokens: TokenBook;
  chaos: () => ResolvedChaos;
  random: () => number;
  logger: Logger;
  /** Requests to held routes, open until the client leaves; `close()` destroys what is left. */
  held: Set<ServerResponse>;
}

type Match = { route: Route; params: Record<string, string> } | { route: null; pathKnown: boolean };

function findRoute(routes: readonly Route[], method: string | undefined, path: string): Match {
  let pathKnown = false;
  for (const r of routes) {
    const params = matchPath(r.segments, path);
    if (params === null) continue;
    pathKnown = true;
    if (r.method === method) return { route: r, params };
  }
  return { route: null, pathKnown };
}

/** The answer of the chaos and token gates, or null to let the request through. */
function gate(deps: RouterDeps, access: Access, req: IncomingMessage): Reply | null {
  if (access === 'api' || access === 'public') {
    const chaos = deps.chaos();
    const roll = deps.random();
    if (roll < chaos.apiErrorRate)
      return errorReply(503, 'SERVICE_UNAVAILABLE', 'Serviço temporariamente indisponível');
    if (roll < chaos.apiErrorRate + chaos.rateLimitRate)
      return {
        ...errorReply(429, 'TOO_MANY_REQUESTS', 'Limite de requisições excedido'),
        headers: { 'retry-after': '1' },
      };
  }
  if (access !== 'api') return null;
  const problem = deps.tokens.problem(req.headers.authorization);
  if (problem === null) return null;
  return { ...errorReply(401, 'UNAUTHORIZED', problem), headers: { 'www-authenticate': 'Bearer' } };
}

function holdOpen(deps: RouterDeps, req: IncomingMessage, res: ServerResponse, path: string): void {
  req.resume();
  deps.held.add(res);
  res.on('close', () => deps.held.delete(res));
  deps.logger.info({ path }, 'GET /result/:id held open: this route never answers (interface §4.2)');
}

async function dispatch(deps: RouterDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const target = new URL(req.url ?? '/', 'http://simulator');
  const path = target.pathname.length > 1 ? target.pathname.replace(/\/+$/, '') : target.pathname;
  const answer = (r: Reply) => {
    send(res, r);
    deps.logger.debug({ method: req.method, path, status: r.status }, 'request');
    r.after?.();
  };
  const found = findRoute(deps.routes, req.method, path);
  if (found.route === null) {
    req.resume();
    return answer(
      found.pathKnown
        ? errorReply(405, 'METHOD_NOT_ALLOWED', `${req.method ?? ''} não é aceito em ${path}`)
        : errorReply(404, 'NOT_FOUND', `Rota ${path} não encontrada`),
    );
  }
  const { route: r, params } = found;
  if (r.access === 'held') return holdOpen(deps, req, res, path);
  let raw: Buffer;
  try {
    raw = await readBody(req);
  } catch (err) {
    if (!(err instanceof BodyTooLarge)) return void res.destroy();
    answer(errorReply(413, 'PAYLOAD_TOO_LARGE', 'Corpo da requisição grande demais'));
    return void req.resume();
  }
  const refused = gate(deps, r.access, req);
  if (refused !== null) return answer(refused);
  const parsed = parseBody(raw, req.headers['content-type']);
  if (!parsed.ok)
    return answer(
      r.access === 'token'
        ? reply(400, { error: 'invalid_request', error_description: 'body is neither form nor JSON' })
        : errorReply(400, 'VALIDATION_ERROR', 'Corpo da requisição não é JSON válido', { field: 'body' }),
    );
  answer(await r.handle({ req, params, query: target.searchParams, body: parsed.value }));
}

/** The `node:http` request listener: every request dispatched, a route that throws answered 500. */
export function requestListener(deps: RouterDeps): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    dispatch(deps, req, res).catch((err: unknown) => {
      deps.logger.error(
        { err: err instanceof Error ? err.message : String(err), path: req.url },
        'simulator route failed',
      );
      if (!res.headersSent) send(res, errorReply(500, 'INTERNAL_ERROR', 'Erro interno do simulador'));
      else res.destroy();
    });
  };
}
