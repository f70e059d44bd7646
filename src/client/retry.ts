import { backoffDelayMs } from '../domain/backoff';

/** Backoff between attempts: 250 ms, 500 ms, 1 s… up to 8 s, each with up to half of it random. */
export const RETRY_BACKOFF = { baseMs: 250, maxMs: 8000, jitter: 0.5 } as const;

/** The longest this client waits on a `Retry-After` before trying again. */
export const MAX_RETRY_AFTER_MS = 30_000;

export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  return backoffDelayMs(attempt, RETRY_BACKOFF, random);
}

/**
 * `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Milliseconds from `nowMs`,
 * never negative; null when absent or unreadable.
 */
export function parseRetryAfter(value: string | null, nowMs: number): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/[a-z]/i.test(v)) return null; // a bare or negative number is not a date
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}

/** What a failed `fetch` tells about whether the request could have reached the service. */
export interface NetworkFailure {
  reason: string;
  timedOut: boolean;
  /** True when the connection was never made, so even a non-idempotent request is safe to repeat. */
  notSent: boolean;
}

// Failures of name resolution or of the connection itself: the request never left.
const CONNECT_FAILURES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function errnoCode(err: unknown): string | null {
  let e: unknown = err;
  // undici wraps the socket error: TypeError('fetch failed', { cause: Error{ code } }), sometimes twice.
  for (let depth = 0; depth < 4 && typeof e === 'object' && e !== null; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

/** Classifies an exception thrown by `fetch` or by reading the body. */
export function classifyNetworkFailure(err: unknown): NetworkFailure {
  const name = typeof err === 'object' && err !== null ? (err as { name?: unknown }).name : undefined;
  if (name === 'TimeoutError') return { reason: 'TIMEOUT', timedOut: true, notSent: false };
  const code = errnoCode(err);
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return { reason: code, timedOut: true, notSent: true };
  return {
    reason: code ?? 'FETCH_FAILED',
    timedOut: false,
    notSent: code !== null && CONNECT_FAILURES.has(code),
  };
}
