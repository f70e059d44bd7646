import type { Logger } from 'pino';
import type { Config } from '../config';
import { cachedToken, type IssuedToken, staticToken, type TokenSource } from './auth';
import { AuthError, type CallContext, InvalidRequestError, ProtocolError } from './errors';
import { type Query, type ServiceResponse, Transport } from './transport';
import {
  type ProposalRequest,
  validateProposal,
  validateRequestId,
  validateWebhookRegistration,
  type WebhookRegistration,
} from './validate';

/**
 * The outbound client for the service's API (seed §4, §5). Endpoint knowledge lives here; the
 * transport does timeouts, retries, auth and error mapping.
 */

export interface ServiceClientOptions {
  /** `{base_url}` of the service; a path prefix is kept (`https://host/consig` → `https://host/consig/request/…`). */
  baseUrl: string;
  /** Static bearer token. Ignored when `tokenUrl` is set. */
  accessToken?: string;
  /** OAuth2 token endpoint (client credentials grant); needs `clientId` and `clientSecret`. */
  tokenUrl?: string;
  clientId?: string;
  clientSecret?: string;
  /** Sent as `x-api-key` on every authenticated call (§4.3). */
  apiKey?: string;
  logger: Logger;
  /** Per attempt, body included. @default 10000 */
  timeoutMs?: number;
  /** Retries after the first attempt, for network errors, 429 and 5xx only. @default 3 */
  retries?: number;
  /** Wall-clock milliseconds (token expiry, `Retry-After` dates). @default Date.now */
  now?: () => number;
  /** Waits between retries. @default a real setTimeout */
  sleep?: (ms: number) => Promise<void>;
  /** Called each time a token is obtained from the token endpoint (metrics). */
  onTokenRefresh?: () => void;
}

/** §2.2. */
export interface ProposalCreated {
  nu_proposta: number | string;
  status: string | null;
  dt_criacao: string | null;
  uuid: string | null;
  raw: unknown;
}

/** §2.3, §4.2. `_links.result` is in `raw` and is never followed: it points at a dead route. */
export interface AverbacaoAccepted {
  requestId: string;
  status: string | null;
  correlationId: string | null;
  httpStatus: number;
  raw: unknown;
}

/** §4.3. `status` is passed through as sent: queued, processing, completed, error, or a new value. */
export interface RequestStatus {
  requestId: string;
  correlationId: string | null;
  status: string;
  raw: unknown;
}

/** §4.5: the response is not shown, so it is returned as it came. */
export interface WebhookRegistered {
  httpStatus: number;
  raw: unknown;
}

/** §4.6. */
export const REPORT_PATHS = {
  'new-relationships': '/workers/new-relationships',
  'relationship-ended': '/contracts/relationship-ended',
  'accounting-and-remuneration': '/contracts/accounting-and-remuneration',
  'repasse-pagamentos': '/emprestimos/consultar-repasse-pagamentos',
} as const;

export type ReportName = keyof typeof REPORT_PATHS;

export interface OffersResult {
  /** Items of every array in `_embedded`, page after page. */
  items: unknown[];
  pages: number;
  /** `total` of the first page, when the service sent it. */
  total: number | null;
  /** False when `maxPages` stopped the walk before the last page. */
  complete: boolean;
}

export interface ServiceClient {
  createProposal(body: ProposalRequest): Promise<ProposalCreated>;
  startAverbacao(
    body: Record<string, unknown>,
    options?: { deprecatedPath?: boolean },
  ): Promise<AverbacaoAccepted>;
  requestStatus(requestId: string): Promise<RequestStatus>;
  registerWebhook(registration: WebhookRegistration): Promise<WebhookRegistered>;
  report(name: ReportName, query?: Query): Promise<unknown>;
  searchOffers(body: Record<string, unknown>, options?: { maxPages?: number }): Promise<OffersResult>;
}

/** Tokens from such services live minutes; one that comes without `expires_in` is kept this long. */
const DEFAULT_TOKEN_LIFETIME_S = 300;
const DEFAULT_MAX_PAGES = 10;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function text(v: unknown): string | null {
  return typeof v === 'string' && v !== '' ? v : null;
}

function finite(v: unknown): number | null {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  return typeof n === 'number' && Number.isFinite(n) ? n : null;
}

function httpUrl(value: string, name: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`${name}: expected an http(s) URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new TypeError(`${name}: expected an http(s) URL`);
  return url;
}

function appendQuery(url: URL, query: Query | undefined): void {
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === null || value === undefined) continue;
    const values: readonly (string | number | boolean)[] = Array.isArray(value) ? value : [value];
    for (const v of values) url.searchParams.append(key, String(v));
  }
}

function tokenSource(options: ServiceClientOptions, transport: () => Transport): TokenSource | null {
  const { tokenUrl, clientId, clientSecret } = options;
  if (tokenUrl === undefined)
    return options.accessToken === undefined ? null : staticToken(options.accessToken);
  if (clientId === undefined || clientSecret === undefined) {
    throw new TypeError('tokenUrl needs clientId and clientSecret');
  }
  const credentials = { client_id: clientId, client_secret: clientSecret };
  const url = httpUrl(tokenUrl, 'tokenUrl');

  // §5: the token endpoint is not shown. This is the standard OAuth2 client credentials grant
  // (RFC 6749 §4.4): a form POST with grant_type, client_id and client_secret in the body (§2.3.1
  // allows them there; a server that insists on HTTP Basic would answer 401 → AuthError), answered
  // by JSON with access_token and expires_in (seconds).
  async function fetchToken(): Promise<IssuedToken> {
    const res = await transport().call({
      method: 'POST',
      url,
      route: `POST ${url.pathname}`,
      form: new URLSearchParams({ grant_type: 'client_credentials', ...credentials }),
      auth: false,
      idempotent: true, // asking for a token twice has no effect on the service
      onClientError: (status, body, context) => {
        const oauthError = isObject(body) ? text(body.error) : null;
        return new AuthError(
          context,
          `token endpoint refused the client credentials (HTTP ${status}${oauthError ? `, ${oauthError}` : ''})`,
          oauthError,
        );
      },
    });
    const context: CallContext = { method: 'POST', path: url.pathname, status: res.status };
    const accessToken = isObject(res.body) ? text(res.body.access_token) : null;
    if (accessToken === null) throw new ProtocolError(context, 'token response without access_token');
    const expiresIn = isObject(res.body) ? finite(res.body.expires_in) : null;
    return {
      accessToken,
      expiresInS: expiresIn !== null && expiresIn > 0 ? expiresIn : DEFAULT_TOKEN_LIFETIME_S,
    };
  }

  return cachedToken({
    fetchToken,
    now: options.now ?? Date.now,
    ...(options.onTokenRefresh ? { onTokenRefresh: options.onTokenRefresh } : {}),
  });
}

/** Builds the client. Throws TypeError for unusable options (not a URL, OAuth without credentials). */
export function createServiceClient(options: ServiceClientOptions): ServiceClient {
  const base = httpUrl(options.baseUrl, 'baseUrl');
  const prefix = base.pathname.replace(/\/+$/, '');
  const logger = options.logger.child({ component: 'service-client' });
  const tokens = tokenSource(options, () => transport);
  const transport: Transport = new Transport({
    logger,
    tokens,
    apiKey: options.apiKey,
    timeoutMs: options.timeoutMs ?? 10_000,
    retries: options.retries ?? 3,
    now: options.now ?? Date.now,
    sleep: options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms))),
  });

  /** `path` must already be encoded. */
  function endpoint(path: string, query?: Query): URL {
    const url = new URL(base.origin);
    url.pathname = prefix + path;
    appendQuery(url, query);
    return url;
  }

  function context(method: string, url: URL, res: ServiceResponse): CallContext {
    return { method, path: url.pathname, status: res.status };
  }

  function objectBody(method: string, url: URL, res: ServiceResponse): Record<string, unknown> {
    if (!isObject(res.body)) throw new ProtocolError(context(method, url, res), 'expected a JSON object');
    return res.body;
  }

  function jsonBody(method: string, url: URL, res: ServiceResponse): unknown {
    if (res.body === undefined) throw new ProtocolError(context(method, url, res), 'expected JSON');
    return res.body;
  }

  return {
    async createProposal(body) {
      const payload = validateProposal(body);
      const url = endpoint('/api/v1/propostas');
      // Not idempotent: a timeout is not retried (the proposal may exist); the seed shows no idempotency key.
      const res = await transport.call({
        method: 'POST',
        url,
        route: 'POST /api/v1/propostas',
        body: payload,
        auth: true,
        idempotent: false,
      });
      const raw = objectBody('POST', url, res);
      const nu = raw.nu_proposta;
      const nuProposta = typeof nu === 'number' && Number.isSafeInteger(nu) ? nu : text(nu);
      if (nuProposta === null) throw new ProtocolError(context('POST', url, res), 'no nu_proposta');
      return {
        nu_proposta: nuProposta,
        status: text(raw.status),
        dt_criacao: text(raw.dt_criacao),
        uuid: text(raw.uuid),
        raw,
      };
    },

    async startAverbacao(body, opts = {}) {
      if (!isObject(body)) {
        throw new InvalidRequestError('averbação', [{ field: 'body', problem: 'expected an object' }]);
      }
      // §4.2/§9: /contract still answers (deprecated, Deprecation: true); /contract/averbacao replaces it.
      const path = opts.deprecatedPath ? '/contract' : '/contract/averbacao';
      const url = endpoint(path);
      const res = await transport.call({
        method: 'POST',
        url,
        route: `POST ${path}`,
        body,
        auth: true,
        idempotent: false,
      });
      // 202 is documented; 200/201 are accepted too. `_links.result` (→ /result/:id, a route that
      // does not answer) is deliberately ignored: the status lives at GET /request/:requestId.
      const raw = objectBody('POST', url, res);
      const requestId = text(raw.requestId);
      if (requestId === null) throw new ProtocolError(context('POST', url, res), 'no requestId');
      return {
        requestId,
        status: text(raw.status),
        correlationId: text(raw.correlationId),
        httpStatus: res.status,
        raw,
      };
    },

    async requestStatus(requestId) {
      const id = validateRequestId(requestId);
      const url = endpoint(`/request/${encodeURIComponent(id)}`);
      const res = await transport.call({
        method: 'GET',
        url,
        route: 'GET /request/:requestId',
        auth: true,
        idempotent: true,
      });
      const raw = objectBody('GET', url, res);
      const status = text(raw.status);
      if (status === null) throw new ProtocolError(context('GET', url, res), 'no status');
      const answered = text(raw.requestId);
      if (answered !== null && answered !== id) {
        throw new ProtocolError(context('GET', url, res), 'the answer is about another requestId');
      }
      return { requestId: id, correlationId: text(raw.correlationId), status, raw };
    },

    async registerWebhook(registration) {
      const payload = validateWebhookRegistration(registration);
      const url = endpoint('/api/v1/webhooks');
      const res = await transport.call({
        method: 'POST',
        url,
        route: 'POST /api/v1/webhooks',
        body: { url: payload.url, eventos: payload.eventos, secret: payload.secret },
        auth: true,
        idempotent: false,
      });
      return { httpStatus: res.status, raw: res.body === undefined ? res.text : res.body };
    },

    async report(name, query) {
      if (!Object.hasOwn(REPORT_PATHS, name)) {
        throw new InvalidRequestError('report', [
          { field: 'name', problem: `expected one of ${Object.keys(REPORT_PATHS).join(', ')}` },
        ]);
      }
      const path = REPORT_PATHS[name];
      // §4.6: query parameters are not shown; they are passed through as given.
      const url = endpoint(path, query);
      const res = await transport.call({
        method: 'GET',
        url,
        route: `GET ${path}`,
        auth: true,
        idempotent: true,
      });
      return jsonBody('GET', url, res);
    },

    async searchOffers(body, opts = {}) {
      const maxPages = opts.maxPages ?? DEFAULT_MAX_PAGES;
      if (!Number.isSafeInteger(maxPages) || maxPages < 1) {
        throw new InvalidRequestError('offers search', [
          { field: 'maxPages', problem: 'expected a positive integer' },
        ]);
      }
      if (!isObject(body)) {
        throw new InvalidRequestError('offers search', [{ field: 'body', problem: 'expected an object' }]);
      }
      const items: unknown[] = [];
      const visited = new Set<string>();
      let url = endpoint('/offers/search');
      let pages = 0;
      let total: number | null = null;
      for (;;) {
        visited.add(url.href);
        // §4.7: public; no credentials are sent. A search changes nothing, so it is retried freely.
        const res = await transport.call({
          method: 'POST',
          url,
          route: 'POST /offers/search',
          body,
          auth: false,
          idempotent: true,
        });
        pages += 1;
        const page = objectBody('POST', url, res);
        const embedded = page._embedded;
        if (isObject(embedded)) {
          for (const value of Object.values(embedded))
            if (Array.isArray(value)) items.push(...(value as unknown[]));
        }
        if (pages === 1) total = finite(page.total);
        const next = nextPage(url, page, res);
        if (next === null || visited.has(next.href)) return { items, pages, total, complete: true };
        if (pages >= maxPages) return { items, pages, total, complete: false };
        url = next;
      }

      function nextPage(current: URL, page: Record<string, unknown>, res: ServiceResponse): URL | null {
        const links = page._links;
        const href = isObject(links) && isObject(links.next) ? text(links.next.href) : null;
        if (href !== null) {
          const next = new URL(href, current);
          // A link elsewhere would take the request (and the search) to another host.
          if (next.origin !== base.origin) {
            throw new ProtocolError(context('POST', current, res), '_links.next points at another origin');
          }
          return next;
        }
        // No link: pageStart is taken as the offset of the page's first item (the seed does not say
        // whether it counts items or pages), sent back with pageSize as query parameters.
        const pageStart = finite(page.pageStart);
        const pageSize = finite(page.pageSize);
        const totalPages = finite(page.totalPages);
        const totalItems = finite(page.total);
        if (pageStart === null || pageSize === null || pageSize <= 0) return null;
        if (totalPages !== null && pages >= totalPages) return null;
        const nextStart = pageStart + pageSize;
        if (totalItems !== null && nextStart >= totalItems) return null;
        if (totalPages === null && totalItems === null) return null;
        const next = new URL(current);
        next.searchParams.set('pageStart', String(nextStart));
        next.searchParams.set('pageSize', String(pageSize));
        return next;
      }
    },
  };
}

/** The client for `config.service`, or null when SERVICE_BASE_URL is unset (no outbound calls). */
export function serviceClientFromConfig(
  config: Config,
  logger: Logger,
  hooks: Pick<ServiceClientOptions, 'onTokenRefresh'> = {},
): ServiceClient | null {
  const s = config.service;
  if (s.baseUrl === undefined) return null;
  const options: ServiceClientOptions = { baseUrl: s.baseUrl, logger, ...hooks };
  if (s.accessToken !== undefined) options.accessToken = s.accessToken;
  if (s.tokenUrl !== undefined) options.tokenUrl = s.tokenUrl;
  if (s.clientId !== undefined) options.clientId = s.clientId;
  if (s.clientSecret !== undefined) options.clientSecret = s.clientSecret;
  if (s.apiKey !== undefined) options.apiKey = s.apiKey;
  return createServiceClient(options);
}
