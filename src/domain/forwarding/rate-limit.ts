/**
 * A destination's rate limit (`rateLimitPerSecond`) as a token bucket: `rate` requests a second on
 * average, and after a quiet spell a burst of at most `rate` at once. So one second may hold the
 * burst plus that second's refill, up to 2 × `rate` (rate-limit.test.ts checks both bounds). Pure:
 * the caller keeps the state and passes the clock in.
 */

export interface TokenBucket {
  /** Tokens available at `atMs` (fractional). */
  tokens: number;
  atMs: number;
}

/** A full bucket at `nowMs`. */
export function fullBucket(rate: number, nowMs: number): TokenBucket {
  return { tokens: Math.max(1, rate), atMs: nowMs };
}

/**
 * Takes one token if there is one. Otherwise `waitMs` says when the next one will be there; the
 * bucket is returned refilled up to `nowMs` either way. A clock that steps back refills nothing
 * until it is past the bucket's time again: the time it gave back is not paid out twice.
 */
export function takeToken(
  bucket: TokenBucket,
  rate: number,
  nowMs: number,
): { taken: true; bucket: TokenBucket } | { taken: false; bucket: TokenBucket; waitMs: number } {
  const capacity = Math.max(1, rate);
  const atMs = Math.max(bucket.atMs, nowMs);
  const tokens = Math.min(capacity, bucket.tokens + ((atMs - bucket.atMs) * rate) / 1000);
  if (tokens >= 1) return { taken: true, bucket: { tokens: tokens - 1, atMs } };
  const waitMs = atMs - nowMs + Math.ceil(((1 - tokens) * 1000) / rate);
  return { taken: false, bucket: { tokens, atMs }, waitMs };
}
