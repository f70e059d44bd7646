import { backoffDelayMs } from './backoff';
import { REGISTRY_STATUSES, type RegistryStatus } from './catalogue';

/**
 * Rules of a registration (averbação) request, interface §3.2: queued → processing → completed | error.
 * Pure: no clock, no I/O.
 */

const RANK: Record<RegistryStatus, number> = { queued: 0, processing: 1, completed: 2, error: 2 };

export function isRegistryStatus(value: unknown): value is RegistryStatus {
  return typeof value === 'string' && (REGISTRY_STATUSES as readonly string[]).includes(value);
}

export function isFinalRegistryStatus(status: RegistryStatus): boolean {
  return status === 'completed' || status === 'error';
}

export type MergeReason = 'forward' | 'same' | 'older' | 'after_final' | 'unknown_status';

/**
 * What a reported status (from the webhook or a poll) does to the tracked one. A final status is
 * never overwritten — whichever of webhook and poll brings it first wins, the other is a no-op —
 * and a non-final one only moves forward (a late `queued` after `processing` changes nothing).
 */
export function mergeRegistryStatus(
  current: RegistryStatus | null,
  reported: unknown,
): { apply: boolean; status: RegistryStatus | null; reason: MergeReason } {
  if (!isRegistryStatus(reported)) return { apply: false, status: current, reason: 'unknown_status' };
  if (current === null) return { apply: true, status: reported, reason: 'forward' };
  if (isFinalRegistryStatus(current)) return { apply: false, status: current, reason: 'after_final' };
  // Below a final status, an equal rank is the same status.
  if (RANK[reported] <= RANK[current]) {
    return { apply: false, status: current, reason: reported === current ? 'same' : 'older' };
  }
  return { apply: true, status: reported, reason: 'forward' };
}

export interface PollScheduleOptions {
  /** How long a registration may wait for its webhook before polling starts. */
  graceMs: number;
  /** First poll interval, growing exponentially (with jitter) up to `maxIntervalMs`. */
  intervalMs: number;
  maxIntervalMs: number;
  /** After this (since tracking began) a registration still not final is stale: polling stops. */
  maxAgeMs: number;
}

/** When a freshly tracked registration is first polled: after the webhook's grace period. */
export function firstPollAt(trackedAt: number, o: Pick<PollScheduleOptions, 'graceMs'>): number {
  return trackedAt + o.graceMs;
}

/**
 * When to poll again after `attempts` polls (≥ 1), or null when the registration is stale by then.
 * A `retryAfterMs` from a 429 is honoured when it asks for more.
 */
export function nextPollAt(
  trackedAt: number,
  now: number,
  attempts: number,
  o: PollScheduleOptions,
  random: () => number,
  retryAfterMs = 0,
): number | null {
  const deadline = trackedAt + o.maxAgeMs;
  if (now >= deadline) return null;
  const delay = Math.max(
    retryAfterMs,
    backoffDelayMs(attempts, { baseMs: o.intervalMs, maxMs: o.maxIntervalMs, jitter: 0.2 }, random),
  );
  // One last poll at the deadline, then the registration is stale.
  return Math.min(now + delay, deadline);
}

/** Stale: tracked longer than `maxAgeMs` and still not final. */
export function isStale(trackedAt: number, now: number, o: PollScheduleOptions): boolean {
  return now - trackedAt > o.maxAgeMs;
}

export type PollOutcome =
  'ok' | 'not_found' | 'unauthorized' | 'rate_limited' | 'unavailable' | 'error' | 'stale';

/**
 * What a failed status query means for the schedule (interface §4.3), from the service client's
 * error `code`:
 * - 404 (unknown requestId): the service may not know it yet; keep polling with backoff until stale.
 * - 401/403 after the client's one token refresh: credentials; keep polling with backoff.
 * - 429: wait at least its Retry-After.
 * - 5xx and network errors (after the client's own retries): backoff.
 * - anything else (unexpected answer): backoff.
 */
export function classifyPollError(err: unknown): {
  outcome: PollOutcome;
  retryAfterMs: number;
  message: string;
} {
  const e = err as { code?: string; retryAfterMs?: number; message?: string } | null | undefined;
  const message = e?.message ?? String(err);
  switch (e?.code) {
    case 'SERVICE_NOT_FOUND':
      return { outcome: 'not_found', retryAfterMs: 0, message };
    case 'SERVICE_AUTH_FAILED':
      return { outcome: 'unauthorized', retryAfterMs: 0, message };
    case 'SERVICE_RATE_LIMITED':
      return { outcome: 'rate_limited', retryAfterMs: e.retryAfterMs ?? 0, message };
    case 'SERVICE_UNAVAILABLE':
    case 'SERVICE_NETWORK_ERROR':
      return { outcome: 'unavailable', retryAfterMs: 0, message };
    default:
      return { outcome: 'error', retryAfterMs: 0, message };
  }
}
