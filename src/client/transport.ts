import type { Logger } from 'pino';
import type { TokenSource } from './auth';
import {
  AuthError,
  BusinessError,
  type CallContext,
  NetworkError,
  NotFoundError,
  ProtocolError,
  RateLimitedError,
  ServiceUnavailableError,
} from './errors';
import { classifyNetworkFailure, MAX_RETRY_AFTER_MS, parseRetryAfter, retryDelayMs } from './retry';

/**
 * One HTTP exchange with the service on Node's fetch (undici): per-attempt timeout, retries with
 * backoff for network errors, 429 and 5xx only, one token refresh on a 401, the mapping of statuses
 * to typed errors, and the `Deprecation` warning. Knows nothing of the endpoints.
 */

export type QueryValue =
  string | number | boolean | null | undefined | readonly (string | number | boolean)[];
export type Query = Readonly<Record<string, QueryValue>>;

export interface CallSpec {
  method: 'GET' | 'POST';
  /** Absolute URL. Its path (without query) is what errors and logs show. */
  url: URL;
  /** Key of the once-per-path deprecation warning, e.g. `POST /contract`. */
  route: string;
  body?: unknown;
  /** Form-encoded body instead of JSON (the token request). */
  form?: URLSearchParams;
  /** Send `Authorization: Bearer` (and `x-api-key`). False for public endpoints and the token request. */
  auth: boolean;
  /**
   * Safe to send twice. A non-idempotent call is not repeated after a timeout or a broken connection,
   * where the service may have acted on it; only when it surely never left, or on 429/5xx.
   */
  idempotent: boolean;
  /** Maps a 4xx (other than 429) before the default mapping; the token request uses it. */
  onClientError?: (status: number, body: unknown, context: CallContext) => Error | undefined;
}

export interface ServiceResponse {
  status: number;
  headers: Headers;
  /** Parsed JSON; null for an empty body; undefined when the body is not JSON (see `text`). */
  body: unknown;
  text: string;
}

export interface TransportOptions {
  logger: Logger;
  tokens: TokenSource | null;
  apiKey: string | undefined;
  timeoutMs: number;
  retries: number;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
}

// Successors of deprecated paths (§9), named in the warning.
const SUCCESSORS: Readonly<Record<string, string>> = { 'POST /contract': 'POST /contract/averbacao' };

export function businessBody(body: unknown): { error: string; message: string } | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return null;
  const { error, message } = body as Record<string, unknown>;
  return typeof error === 'string' && typeof message === 'string' ? { error, message } : null;
}

/** The service's text may quote the employee's CPF; only its middle digits may appear (LGPD). */
export function maskCpfs(text: string): string {
  return text.replace(/(?<!\d)(?:\d{3}\.\d{3}\.\d{3}-\d{2}|\d{11})(?!\d)/g, (match) => {
    const d = match.replace(/\D/g, '');
    return `***.${d.slice(3, 6)}.${d.slice(6, 9)}-**`;
  });
}

function parseBody(text: string): unknown {
  if (text.trim() === '') return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

export class Transport {
  private readonly warned = new Set<string>();

  constructor(private readonly options: TransportOptions) {}

  async call(spec: CallSpec): Promise<ServiceResponse> {
    const { logger, retries, sleep, now } = this.options;
    const path = spec.url.pathname;
    let attempts = 0;
    let failures = 0;
    let refreshed = false;
    for (;;) {
      attempts += 1;
      const context = (status: number | null = null): CallContext => ({
        method: spec.method,
        path,
        status,
        attempts,
      });
      const token = spec.auth ? await this.token(context()) : undefined;

      let res: Response;
      let text: string;
      try {
        res = await fetch(spec.url, {
          method: spec.method,
          headers: this.headers(spec, token),
          body: spec.form ?? (spec.body === undefined ? undefined : JSON.stringify(spec.body)),
          // Never follow a redirect: it could carry the api key elsewhere, and the interface shows none.
          redirect: 'manual',
          signal: AbortSignal.timeout(this.options.timeoutMs),
        });
        // The same signal bounds reading the body.
        text = await res.text();
      } catch (err) {
        const failure = classifyNetworkFailure(err);
        const retryable = spec.idempotent || failure.notSent;
        if (retryable && failures < retries) {
          failures += 1;
          const delayMs = retryDelayMs(failures);
          logger.warn(
            { method: spec.method, path, attempt: attempts, delayMs, reason: failure.reason },
            'service call failed; retrying',
          );
          await sleep(delayMs);
          continue;
        }
        throw new NetworkError(
          context(),
          {
            reason: failure.reason,
            timedOut: failure.timedOut,
            outcomeUnknown: !failure.notSent && !spec.idempotent,
          },
          { cause: err },
        );
      }

      this.checkDeprecation(spec, res.headers);
      const status = res.status;
      const body = parseBody(text);
      if (status >= 200 && status < 300) return { status, headers: res.headers, body, text };

      const business = businessBody(body);
      // §7: a business-rule failure is final whatever its status; never retried.
      if (business?.error === 'BUSINESS_RULE_VIOLATION') {
        throw new BusinessError(context(status), business.error, maskCpfs(business.message));
      }
      if (status === 401 && spec.auth) {
        const tokens = this.options.tokens;
        if (tokens?.refreshable && !refreshed && token !== undefined) {
          refreshed = true;
          tokens.invalidate(token);
          logger.info({ method: spec.method, path }, 'service answered 401; refreshing the token once');
          continue;
        }
        throw new AuthError(
          context(status),
          refreshed ? 'HTTP 401 again after a token refresh' : 'HTTP 401 (static token rejected)',
        );
      }
      if (status === 429 || status >= 500) {
        // Retry-After is honoured on 429 and, per RFC 9110 §10.2.3, on 503.
        const retryAfterMs =
          status === 429 || status === 503 ? parseRetryAfter(res.headers.get('retry-after'), now()) : null;
        if (failures < retries) {
          failures += 1;
          const delayMs =
            retryAfterMs === null ? retryDelayMs(failures) : Math.min(retryAfterMs, MAX_RETRY_AFTER_MS);
          logger.warn(
            { method: spec.method, path, attempt: attempts, status, delayMs },
            'service call failed; retrying',
          );
          await sleep(delayMs);
          continue;
        }
        if (status === 429) throw new RateLimitedError(context(status), retryAfterMs);
        throw new ServiceUnavailableError(context(status));
      }
      if (status >= 400) {
        const mapped = spec.onClientError?.(status, body, context(status));
        if (mapped !== undefined) throw mapped;
      }
      if (status === 401) throw new AuthError(context(status), 'HTTP 401');
      if (status === 403) throw new AuthError(context(status), 'HTTP 403 (forbidden)');
      if (status === 404) {
        throw new NotFoundError(
          context(status),
          business && { error: business.error, message: maskCpfs(business.message) },
        );
      }
      if (status >= 400 && business !== null) {
        throw new BusinessError(context(status), business.error, maskCpfs(business.message));
      }
      throw new ProtocolError(
        context(status),
        status >= 400 ? `HTTP ${status} without an {error, message} body` : `HTTP ${status}`,
      );
    }
  }

  private async token(context: CallContext): Promise<string> {
    const tokens = this.options.tokens;
    if (tokens === null) {
      throw new AuthError(
        context,
        'no credentials configured (SERVICE_ACCESS_TOKEN, or SERVICE_TOKEN_URL with client id and secret)',
      );
    }
    return tokens.get();
  }

  private headers(spec: CallSpec, token: string | undefined): Record<string, string> {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'consig-receiver' };
    if (spec.form !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    else if (spec.body !== undefined) headers['content-type'] = 'application/json';
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    // §4.3 shows x-api-key beside the bearer token; credentials go only to authenticated endpoints.
    if (spec.auth && this.options.apiKey !== undefined) headers['x-api-key'] = this.options.apiKey;
    return headers;
  }

  private checkDeprecation(spec: CallSpec, headers: Headers): void {
    const value = headers.get('deprecation');
    if (value === null || value.trim().toLowerCase() === 'false' || this.warned.has(spec.route)) return;
    this.warned.add(spec.route);
    const successor = SUCCESSORS[spec.route];
    this.options.logger.warn(
      {
        route: spec.route,
        deprecation: value,
        sunset: headers.get('sunset') ?? undefined,
        link: headers.get('link') ?? undefined,
      },
      `${spec.route} is deprecated (Deprecation: ${value})${successor === undefined ? '' : `: use ${successor}`}`,
    );
  }
}
