import { ConsigError } from '../domain/errors';

/**
 * The errors of the service client. Each has its own `code` (the HTTP layer and the commands map
 * codes, not classes). Messages name the method and path (never the query string, which may carry
 * personal data) and never contain tokens, secrets, bodies or a full CPF.
 */

/** Where a failed call went and how many attempts it made. */
export interface CallContext {
  method: string;
  /** Path without the query string, e.g. `/request/3f2c…`. */
  path: string;
  /** HTTP status of the last response, or null when none came (network error, local check). */
  status?: number | null;
  /** Requests sent for this call, retries included. */
  attempts?: number;
}

/** Base class of everything a call to the service throws, except local validation. */
export class ServiceError extends ConsigError {
  readonly method: string;
  readonly path: string;
  readonly status: number | null;
  readonly attempts: number;

  constructor(code: string, context: CallContext, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.method = context.method;
    this.path = context.path;
    this.status = context.status ?? null;
    this.attempts = context.attempts ?? 1;
  }
}

function where(c: CallContext): string {
  return `${c.method} ${c.path}`;
}

/**
 * interface §7: the service refused the request for a business reason, with a body `{error, message}` (e.g.
 * `BUSINESS_RULE_VIOLATION` and a Portuguese text). Never retried. `message` is the service's text
 * (with any CPF in it masked); `error` its code.
 */
export class BusinessError extends ServiceError {
  /** The service's error code, e.g. `BUSINESS_RULE_VIOLATION`. */
  readonly error: string;

  constructor(context: CallContext, error: string, message: string) {
    super('SERVICE_BUSINESS_ERROR', context, message);
    this.error = error;
  }
}

/** 404: unknown resource (e.g. an unknown requestId on `GET /request/:requestId`). */
export class NotFoundError extends ServiceError {
  /** `error`/`message` of the body when the service sent them. */
  readonly error: string | null;
  readonly serviceMessage: string | null;

  constructor(context: CallContext, body?: { error: string; message: string } | null) {
    super(
      'SERVICE_NOT_FOUND',
      context,
      `${where(context)}: not found (HTTP 404)${body ? `: ${body.error}: ${body.message}` : ''}`,
    );
    this.error = body?.error ?? null;
    this.serviceMessage = body?.message ?? null;
  }
}

/**
 * 401 after the one token refresh, 403, no credentials configured, or the token endpoint refusing
 * the client credentials (`oauthError` is then its RFC 6749 `error`, e.g. `invalid_client`).
 */
export class AuthError extends ServiceError {
  readonly oauthError: string | null;

  constructor(context: CallContext, reason: string, oauthError: string | null = null) {
    super('SERVICE_AUTH_FAILED', context, `${where(context)}: ${reason}`);
    this.oauthError = oauthError;
  }
}

/** 429 still after the retries. `retryAfterMs` is the service's last `Retry-After`, uncapped. */
export class RateLimitedError extends ServiceError {
  readonly retryAfterMs: number | null;

  constructor(context: CallContext, retryAfterMs: number | null) {
    super(
      'SERVICE_RATE_LIMITED',
      context,
      `${where(context)}: rate limited (HTTP 429) after ${context.attempts ?? 1} attempt(s)` +
        (retryAfterMs === null ? '' : `; Retry-After ${Math.ceil(retryAfterMs / 1000)} s`),
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** 5xx still after the retries. */
export class ServiceUnavailableError extends ServiceError {
  constructor(context: CallContext) {
    super(
      'SERVICE_UNAVAILABLE',
      context,
      `${where(context)}: HTTP ${context.status ?? '5xx'} after ${context.attempts ?? 1} attempt(s)`,
    );
  }
}

/**
 * No response: connection refused or reset, DNS, or the timeout, still after the retries.
 * `outcomeUnknown` is true when a request that is not safe to repeat (creating a proposal,
 * starting an averbação, registering a webhook) may have reached the service: it was not retried,
 * and the caller must find out whether it took effect before sending it again.
 */
export class NetworkError extends ServiceError {
  readonly timedOut: boolean;
  readonly outcomeUnknown: boolean;
  /** errno-style code of the cause (`ECONNREFUSED`, `UND_ERR_SOCKET`…), or `TIMEOUT`. */
  readonly reason: string;

  constructor(
    context: CallContext,
    details: { reason: string; timedOut: boolean; outcomeUnknown: boolean },
    options?: { cause?: unknown },
  ) {
    super(
      'SERVICE_NETWORK_ERROR',
      context,
      `${where(context)}: ${details.timedOut ? 'timed out' : `network error (${details.reason})`} after ` +
        `${context.attempts ?? 1} attempt(s)` +
        (details.outcomeUnknown ? '; not retried: the service may have received it' : ''),
      options,
    );
    this.timedOut = details.timedOut;
    this.outcomeUnknown = details.outcomeUnknown;
    this.reason = details.reason;
  }
}

/** The response does not have the shape the call needs (or a status the interface never shows). */
export class ProtocolError extends ServiceError {
  constructor(context: CallContext, problem: string) {
    super('SERVICE_PROTOCOL_ERROR', context, `${where(context)}: unexpected response: ${problem}`);
  }
}

/** One field that failed local validation, and why (the value itself is never repeated). */
export interface FieldIssue {
  field: string;
  problem: string;
}

/** Local validation failed: nothing was sent. `field` is the first bad field, `issues` all of them. */
export class InvalidRequestError extends ConsigError {
  readonly field: string;
  readonly issues: readonly FieldIssue[];

  constructor(what: string, issues: readonly FieldIssue[]) {
    super('INVALID_REQUEST', `invalid ${what}: ${issues.map((i) => `${i.field}: ${i.problem}`).join('; ')}`);
    this.field = issues[0]?.field ?? '';
    this.issues = issues;
  }
}
