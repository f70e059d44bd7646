import type { Logger } from 'pino';
import { isObject, parseJsonOrUndefined } from '../domain/json';
import { maskCpfsInText } from '../domain/privacy';
import type { Traces } from '../domain/tracing';
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
  /** Where bearer tokens come from; null when no credentials are configured. */
  tokens: TokenSource | null;
  apiKey: string | undefined;
  timeoutMs: number;
  retries: number;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  /**
   * Tracing (issue 35): a CLIENT span per call (its retries included), named in `traceparent`.
   * @default undefined (off)
   */
  traces?: Traces | undefined;
}

/** Where one call stands, across its attempts. */
interface CallProgress {
  /** The call's `traceparent`/`tracestate` when tracing is on. */
  trace?: Readonly<Record<string, string>>;
  attempts: number;
  /** Attempts answered by a network error, 429 or 5xx: what `retries` bounds. */
  failures: number;
  /** The token was refreshed once after a 401. */
  refreshed: boolean;
}

/** What one attempt ends in: the answer, or another attempt after `retryInMs` (null: at once). */
type AttemptResult = { response: ServiceResponse } | { retryInMs: number | null };

// Successors of deprecated paths (interface §9), named in the warning.
const SUCCESSORS: Readonly<Record<string, string>> = { 'POST /contract': 'POST /contract/averbacao' };

/** interface §7: the `{error, message}` body of a refusal, the message with any CPF in it masked. */
function errorBody(body: unknown): { error: string; message: string } | null {
  if (!isObject(body)) return null;
  const { error, message } = body;
  return typeof error === 'string' && typeof message === 'string'
    ? { error, message: maskCpfsInText(message) }
    : null;
}

function parseBody(text: string): unknown {
  return text.trim() === '' ? null : parseJsonOrUndefined(text);
}

function contextOf(spec: CallSpec, progress: CallProgress, status: number | null = null): CallContext {
  return { method: spec.method, path: spec.url.pathname, status, attempts: progress.attempts };
}

export class Transport {
  private readonly warned = new Set<string>();

  constructor(private readonly options: TransportOptions) {}

  async call(spec: CallSpec): Promise<ServiceResponse> {
    const { traces } = this.options;
    if (traces === undefined) return this.attempts(spec, { attempts: 0, failures: 0, refreshed: false });
    // The route, never the path: a path may hold an id, and the query is never named.
    const span = traces.outgoing(spec.route, {
      'http.request.method': spec.method,
      'server.address': spec.url.hostname,
      'consig.route': spec.route,
    });
    const progress: CallProgress = { attempts: 0, failures: 0, refreshed: false, trace: span.headers };
    try {
      const response = await this.attempts(spec, progress);
      span.end('ok', response.status, false, { 'consig.attempts': progress.attempts });
      return response;
    } catch (err) {
      const status = (err as { status?: number | null }).status ?? null;
      span.end(err instanceof Error ? err.name : 'error', status, true, {
        'consig.attempts': progress.attempts,
      });
      throw err;
    }
  }

  private async attempts(spec: CallSpec, progress: CallProgress): Promise<ServiceResponse> {
    for (;;) {
      progress.attempts += 1;
      const result = await this.attempt(spec, progress);
      if ('response' in result) return result.response;
      if (result.retryInMs !== null) await this.options.sleep(result.retryInMs);
    }
  }

  private async attempt(spec: CallSpec, progress: CallProgress): Promise<AttemptResult> {
    const token = spec.auth ? await this.token(contextOf(spec, progress)) : undefined;
    let res: Response;
    let text: string;
    try {
      res = await fetch(spec.url, {
        method: spec.method,
        headers: this.headers(spec, token, progress.trace),
        body: spec.form ?? (spec.body === undefined ? undefined : JSON.stringify(spec.body)),
        // Never follow a redirect: it could carry the api key elsewhere, and the interface shows none.
        redirect: 'manual',
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      // The same signal bounds reading the body.
      text = await res.text();
    } catch (err) {
      return this.afterNetworkFailure(spec, progress, err);
    }
    this.checkDeprecation(spec, res.headers);
    const response = { status: res.status, headers: res.headers, body: parseBody(text), text };
    if (res.status >= 200 && res.status < 300) return { response };
    return this.afterRefusal(spec, progress, response, token);
  }

  private afterNetworkFailure(spec: CallSpec, progress: CallProgress, err: unknown): AttemptResult {
    const failure = classifyNetworkFailure(err);
    if (spec.idempotent || failure.notSent) {
      const retry = this.retryLater(spec, progress, { reason: failure.reason });
      if (retry !== null) return retry;
    }
    throw new NetworkError(
      contextOf(spec, progress),
      {
        reason: failure.reason,
        timedOut: failure.timedOut,
        outcomeUnknown: !failure.notSent && !spec.idempotent,
      },
      { cause: err },
    );
  }

  /** A status other than 2xx: another attempt, or the error it means. */
  private afterRefusal(
    spec: CallSpec,
    progress: CallProgress,
    response: ServiceResponse,
    token: string | undefined,
  ): AttemptResult {
    const { status } = response;
    const context = contextOf(spec, progress, status);
    const refusal = errorBody(response.body);
    // interface §7: a business-rule failure is final whatever its status; never retried.
    if (refusal?.error === 'BUSINESS_RULE_VIOLATION') {
      throw new BusinessError(context, refusal.error, refusal.message);
    }
    if (status === 401 && spec.auth) return this.afterUnauthorized(spec, progress, token);
    if (status === 429 || status >= 500) {
      // Retry-After is honoured on 429 and, per RFC 9110 §10.2.3, on 503.
      const retryAfterMs =
        status === 429 || status === 503
          ? parseRetryAfter(response.headers.get('retry-after'), this.options.now())
          : null;
      const retry = this.retryLater(spec, progress, { status }, retryAfterMs);
      if (retry !== null) return retry;
      if (status === 429) throw new RateLimitedError(context, retryAfterMs);
      throw new ServiceUnavailableError(context);
    }
    throw clientError(spec, response, refusal, context);
  }

  /** One token refresh per call: a 401 may only mean the cached token was revoked early. */
  private afterUnauthorized(
    spec: CallSpec,
    progress: CallProgress,
    token: string | undefined,
  ): AttemptResult {
    const tokens = this.options.tokens;
    if (tokens?.refreshable && !progress.refreshed && token !== undefined) {
      progress.refreshed = true;
      tokens.invalidate(token);
      this.options.logger.info(
        { method: spec.method, path: spec.url.pathname },
        'service answered 401; refreshing the token once',
      );
      return { retryInMs: null };
    }
    throw new AuthError(
      contextOf(spec, progress, 401),
      progress.refreshed ? 'HTTP 401 again after a token refresh' : 'HTTP 401 (static token rejected)',
    );
  }

  /**
   * Another attempt after a pause, or null once `retries` are spent. The pause is the service's
   * `Retry-After` (capped) when it sent one, otherwise the backoff.
   */
  private retryLater(
    spec: CallSpec,
    progress: CallProgress,
    detail: { reason: string } | { status: number },
    retryAfterMs: number | null = null,
  ): AttemptResult | null {
    if (progress.failures >= this.options.retries) return null;
    progress.failures += 1;
    const delayMs =
      retryAfterMs === null ? retryDelayMs(progress.failures) : Math.min(retryAfterMs, MAX_RETRY_AFTER_MS);
    this.options.logger.warn(
      { method: spec.method, path: spec.url.pathname, attempt: progress.attempts, ...detail, delayMs },
      'service call failed; retrying',
    );
    return { retryInMs: delayMs };
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

  private headers(
    spec: CallSpec,
    token: string | undefined,
    trace: Readonly<Record<string, string>> | undefined,
  ): Record<string, string> {
    const headers: Record<string, string> = {
      accept: 'application/json',
      'user-agent': 'consig-receiver',
      ...trace,
    };
    if (spec.form !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    else if (spec.body !== undefined) headers['content-type'] = 'application/json';
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    // interface §4.3 shows x-api-key beside the bearer token; credentials go only to authenticated
    // endpoints.
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

/** A refusal that is neither retried nor a business-rule violation, as the error it means. */
function clientError(
  spec: CallSpec,
  response: ServiceResponse,
  refusal: { error: string; message: string } | null,
  context: CallContext,
): Error {
  const { status } = response;
  const mapped = status >= 400 ? spec.onClientError?.(status, response.body, context) : undefined;
  if (mapped !== undefined) return mapped;
  if (status === 401) return new AuthError(context, 'HTTP 401');
  if (status === 403) return new AuthError(context, 'HTTP 403 (forbidden)');
  if (status === 404) return new NotFoundError(context, refusal);
  if (status >= 400 && refusal !== null) return new BusinessError(context, refusal.error, refusal.message);
  return new ProtocolError(
    context,
    status >= 400 ? `HTTP ${status} without an {error, message} body` : `HTTP ${status}`,
  );
}
