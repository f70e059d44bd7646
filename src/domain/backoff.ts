/**
 * Exponential backoff with jitter, computed from the attempt count (graphile-worker's way), with
 * the randomness passed in so it stays pure and testable.
 *
 * delay = min(max, base · 2^(attempt-1)) · (1 - jitter + jitter · random)
 */
export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
  /** Fraction of the delay that is random, 0..1. Default 0.5. */
  jitter?: number;
}

export function backoffDelayMs(attempt: number, options: BackoffOptions, random: () => number): number {
  const n = Math.max(1, Math.floor(attempt));
  const jitter = Math.min(1, Math.max(0, options.jitter ?? 0.5));
  const exp = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(n - 1, 52));
  const r = Math.min(1, Math.max(0, random()));
  return Math.round(exp * (1 - jitter + jitter * r));
}
