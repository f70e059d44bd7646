import { backoffDelayMs } from '../backoff';

/**
 * When to try a forwarded message again, and whether to: the outcome of one attempt, the delay
 * before the next, and the point where it goes to the dead letter. Pure: the randomness and the
 * clock are passed in.
 */

/** The longest we wait before an attempt, whatever a `Retry-After` asks. */
export const MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000;

/**
 * How a destination's attempts are spaced.
 *
 * - `exponential`: `baseMs · 2^(attempt-1)`, capped at `maxMs`, jittered (see
 *   {@link nextAttemptDelayMs}); `maxAttempts` counts the first attempt too.
 * - `schedule`: the delays after attempt 1, 2, … exactly as written (a destination file's
 *   `retry schedule`); that gives `scheduleMs.length + 1` attempts in all.
 */
export type RetryPolicy =
  | { kind: 'exponential'; baseMs: number; maxMs: number; maxAttempts: number }
  | { kind: 'schedule'; scheduleMs: readonly number[] };

export type AttemptResult = { status: number } | { error: 'timeout' | 'network' };

export type AttemptOutcome = 'delivered' | 'permanent' | 'temporary';

/** Attempts in all, the first one included. */
export function maxAttempts(policy: RetryPolicy): number {
  return policy.kind === 'schedule' ? policy.scheduleMs.length + 1 : policy.maxAttempts;
}

/**
 * What one attempt's answer means for the message.
 *
 * - 2xx: delivered.
 * - 4xx: permanent (the request itself is refused: sending the same bytes again gets the same
 *   answer), except those that say "not now": 408 Request Timeout, 409 Conflict (the receiver is
 *   busy with the same resource), 425 Too Early and 429 Too Many Requests, which are temporary.
 * - 5xx (and anything above), timeouts and network errors: temporary — the destination is down or
 *   overloaded, not the message wrong.
 * - 1xx, 3xx (and anything below 100): permanent. Redirects are not followed: a signed request is
 *   not replayed to a URL nobody configured, and a destination that redirects has a wrong URL,
 *   which retrying does not fix.
 */
export function classifyAttempt(result: AttemptResult): AttemptOutcome {
  if ('error' in result) return 'temporary';
  const { status } = result;
  if (status >= 200 && status <= 299) return 'delivered';
  if (status >= 500) return 'temporary';
  if (status === 408 || status === 409 || status === 425 || status === 429) return 'temporary';
  return 'permanent';
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY_NAME = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const LONG_DAY_NAME = '(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)';
const MONTH = `(?<month>${MONTHS.join('|')})`;
const TIME = '(?<hours>\\d{2}):(?<minutes>\\d{2}):(?<seconds>\\d{2})';
/** The three forms of an HTTP-date (RFC 9110 §5.6.7); a recipient must accept all three. */
const HTTP_DATES = [
  new RegExp(`^${DAY_NAME}, (?<day>\\d{2}) ${MONTH} (?<year>\\d{4}) ${TIME} GMT$`), // IMF-fixdate
  new RegExp(`^${LONG_DAY_NAME}, (?<day>\\d{2})-${MONTH}-(?<yy>\\d{2}) ${TIME} GMT$`), // RFC 850
  new RegExp(`^${DAY_NAME} ${MONTH} (?<day>[ \\d]\\d) ${TIME} (?<year>\\d{4})$`), // asctime
];
/** What each form captures: all of these, and one of `year` (four digits) and `yy` (two). */
interface HttpDateGroups {
  day: string;
  month: string;
  year?: string;
  yy?: string;
  hours: string;
  minutes: string;
  seconds: string;
}

/**
 * RFC 850's two-digit year: the most recent year with those digits that is not more than 50 years
 * in the future (RFC 9110 §5.6.7).
 */
function fullYear(twoDigits: number, nowMs: number): number {
  const nowYear = new Date(nowMs).getUTCFullYear();
  const year = Math.floor(nowYear / 100) * 100 + twoDigits;
  return year > nowYear + 50 ? year - 100 : year;
}

/**
 * An HTTP-date in ms since the epoch, or null (also for a time that does not exist: 31 Feb, 25:00).
 * Parsed by hand rather than with `Date.parse`, which reads asctime dates in local time and accepts
 * almost anything ("2" is a date in 2001). The day name is not checked against the date.
 */
function parseHttpDate(value: string, nowMs: number): number | null {
  const g = HTTP_DATES.map((pattern) => pattern.exec(value)?.groups as HttpDateGroups | undefined).find(
    (groups) => groups !== undefined,
  );
  if (!g) return null;
  const year = g.year !== undefined ? Number(g.year) : fullYear(Number(g.yy), nowMs);
  const day = Number(g.day);
  const hours = Number(g.hours);
  const minutes = Number(g.minutes);
  const seconds = Number(g.seconds);
  // A second of 60 is a leap second ("00:00:00 - 23:59:60").
  if (hours > 23 || minutes > 59 || seconds > 60) return null;
  const midnight = Date.UTC(year, MONTHS.indexOf(g.month), day);
  if (new Date(midnight).getUTCDate() !== day) return null;
  return midnight + ((hours * 60 + minutes) * 60 + seconds) * 1000;
}

/**
 * A `Retry-After` header (RFC 9110 §10.2.3) as a delay in ms from `nowMs`: either delay-seconds
 * (a non-negative integer) or an HTTP-date (a date in the past is 0). Null when absent or not one
 * of those. Capped at {@link MAX_RETRY_AFTER_MS}: a destination cannot park a message for a year.
 */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | null {
  if (value === undefined) return null;
  // An empty or blank value fails both forms below.
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Math.min(MAX_RETRY_AFTER_MS, Number(trimmed) * 1000);
  const at = parseHttpDate(trimmed, nowMs);
  return at === null ? null : Math.min(MAX_RETRY_AFTER_MS, Math.max(0, at - nowMs));
}

/**
 * The delay before the next attempt, or null when `attempt` (the one that just failed, 1-based)
 * was the last: the message goes to the dead letter.
 *
 * - `exponential`: a random delay between 50% and 100% of `min(maxMs, baseMs · 2^(attempt-1))`
 *   (the "equal jitter" of the AWS architecture blog: destinations that failed together do not
 *   all retry at the same instant, yet the delay still grows), computed by `backoffDelayMs`.
 * - `schedule`: `scheduleMs[attempt-1]`, exactly.
 *
 * A `Retry-After` (`retryAfterMs`, from {@link parseRetryAfter}) raises the delay to at least what
 * it asks, never lowers it, and never raises it above {@link MAX_RETRY_AFTER_MS}.
 */
export function nextAttemptDelayMs(
  attempt: number,
  policy: RetryPolicy,
  random: () => number,
  retryAfterMs: number | null,
): number | null {
  const n = Math.max(1, Math.floor(attempt));
  if (n >= maxAttempts(policy)) return null;
  const delay =
    policy.kind === 'schedule'
      ? (policy.scheduleMs[n - 1] ?? 0)
      : backoffDelayMs(n, { baseMs: policy.baseMs, maxMs: policy.maxMs, jitter: 0.5 }, random);
  if (retryAfterMs === null || !Number.isFinite(retryAfterMs)) return delay;
  return Math.max(delay, Math.min(MAX_RETRY_AFTER_MS, retryAfterMs));
}
