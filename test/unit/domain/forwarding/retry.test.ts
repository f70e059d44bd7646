import { join } from 'node:path';

import * as Retry from '../../../../src/domain/forwarding/retry';
import {
  MAX_RETRY_AFTER_MS,
  type AttemptResult,
  type RetryPolicy,
} from '../../../../src/domain/forwarding/retry';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against the HTTP-date patterns too
// (fresh-module.ts).
loadAgainInEachTest(Retry, join(__dirname, '../../../../src/domain/forwarding/retry'));
const { classifyAttempt, maxAttempts, nextAttemptDelayMs, parseRetryAfter } = Retry;

const DAY_MS = 24 * 60 * 60 * 1000;
const ALMOST_ONE = 0.9999999;

describe('classifyAttempt', () => {
  it.each<[string, AttemptResult, string]>([
    ['200', { status: 200 }, 'delivered'],
    ['202', { status: 202 }, 'delivered'],
    ['204', { status: 204 }, 'delivered'],
    ['299', { status: 299 }, 'delivered'],
    ['400', { status: 400 }, 'permanent'],
    ['401', { status: 401 }, 'permanent'],
    ['403', { status: 403 }, 'permanent'],
    ['404', { status: 404 }, 'permanent'],
    ['410', { status: 410 }, 'permanent'],
    ['413', { status: 413 }, 'permanent'],
    ['422', { status: 422 }, 'permanent'],
    ['408 Request Timeout', { status: 408 }, 'temporary'],
    ['409 Conflict', { status: 409 }, 'temporary'],
    ['425 Too Early', { status: 425 }, 'temporary'],
    ['429 Too Many Requests', { status: 429 }, 'temporary'],
    ['500', { status: 500 }, 'temporary'],
    ['502', { status: 502 }, 'temporary'],
    ['503', { status: 503 }, 'temporary'],
    ['504', { status: 504 }, 'temporary'],
    ['599', { status: 599 }, 'temporary'],
    ['a timeout', { error: 'timeout' }, 'temporary'],
    ['a network error', { error: 'network' }, 'temporary'],
    ['100', { status: 100 }, 'permanent'],
    ['101', { status: 101 }, 'permanent'],
    ['301 (redirects are not followed)', { status: 301 }, 'permanent'],
    ['302', { status: 302 }, 'permanent'],
    ['304', { status: 304 }, 'permanent'],
    ['307', { status: 307 }, 'permanent'],
    ['308', { status: 308 }, 'permanent'],
  ])('%s → %s', (_name, result, outcome) => {
    expect(classifyAttempt(result)).toBe(outcome);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.UTC(2025, 0, 15, 12, 0, 0); // Wed, 15 Jan 2025 12:00:00 GMT

  it.each<[string, string | undefined, number | null]>([
    ['absent', undefined, null],
    ['empty', '', null],
    ['blank', '   ', null],
    ['0 seconds', '0', 0],
    ['120 seconds', '120', 120_000],
    ['seconds with spaces around', ' 120 ', 120_000],
    ['24 h in seconds', '86400', DAY_MS],
    ['a second more than 24 h (capped)', '86401', MAX_RETRY_AFTER_MS],
    ['a huge number (capped)', '99999999999999999999999', MAX_RETRY_AFTER_MS],
    ['negative seconds', '-1', null],
    ['fractional seconds', '1.5', null],
    ['exponent notation', '1e3', null],
    ['a word', 'soon', null],
    ['IMF-fixdate, 2 min ahead', 'Wed, 15 Jan 2025 12:02:00 GMT', 120_000],
    ['IMF-fixdate, now', 'Wed, 15 Jan 2025 12:00:00 GMT', 0],
    ['IMF-fixdate, an hour ago', 'Wed, 15 Jan 2025 11:00:00 GMT', 0],
    ['IMF-fixdate, a year ahead (capped)', 'Thu, 15 Jan 2026 12:00:00 GMT', MAX_RETRY_AFTER_MS],
    ['IMF-fixdate, a leap second', 'Wed, 15 Jan 2025 12:00:60 GMT', 60_000],
    ['RFC 850 date, 30 s ahead', 'Wednesday, 15-Jan-25 12:00:30 GMT', 30_000],
    ['RFC 850 date, -70 is 2070, not 1970 (capped)', 'Thursday, 15-Jan-70 12:00:00 GMT', MAX_RETRY_AFTER_MS],
    ['RFC 850 date, -99 is 1999, not 2099', 'Friday, 15-Jan-99 12:00:00 GMT', 0],
    ['asctime date, 1 min ahead (UTC, not local time)', 'Wed Jan 15 12:01:00 2025', 60_000],
    ['asctime date, one-digit day', 'Sun Jan  5 12:00:00 2025', 0],
    ['31 February', 'Mon, 31 Feb 2025 12:00:00 GMT', null],
    ['hour 25', 'Wed, 15 Jan 2025 25:00:00 GMT', null],
    // Each field at its bound and one past it.
    ['hour 23', 'Wed, 15 Jan 2025 23:00:00 GMT', 11 * 3_600_000],
    ['hour 24', 'Wed, 15 Jan 2025 24:00:00 GMT', null],
    ['minute 59', 'Wed, 15 Jan 2025 12:59:00 GMT', 59 * 60_000],
    ['minute 60', 'Wed, 15 Jan 2025 12:60:00 GMT', null],
    ['second 61', 'Wed, 15 Jan 2025 12:00:61 GMT', null],
    [
      'RFC 850 date, -75 is 2075, exactly 50 years ahead (capped)',
      'Tuesday, 15-Jan-75 12:00:00 GMT',
      MAX_RETRY_AFTER_MS,
    ],
    ['RFC 850 date, -76 is 1976, more than 50 years ahead as 2076', 'Thursday, 15-Jan-76 12:00:00 GMT', 0],
    ['lower-case names', 'wed, 15 jan 2025 12:02:00 gmt', null],
    ['a zone other than GMT', 'Wed, 15 Jan 2025 12:02:00 +0000', null],
    ['ISO 8601', '2025-01-15T12:02:00Z', null],
    ['a date with trailing text', 'Wed, 15 Jan 2025 12:02:00 GMT; later', null],
  ])('%s', (_name, value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });

  // Every month's name, read as that month (a date one minute after a `now` in that month).
  it.each(
    ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'].map((m, i) => [
      m,
      i,
    ]),
  )('%s is month %i', (month, index) => {
    const inMonth = Date.UTC(2025, index as number, 10, 12, 0, 0);
    expect(parseRetryAfter(`Mon, 10 ${month} 2025 12:01:00 GMT`, inMonth)).toBe(60_000);
    expect(parseRetryAfter(`Monday, 10-${month}-25 12:01:00 GMT`, inMonth)).toBe(60_000);
    expect(parseRetryAfter(`Mon ${month} 10 12:01:00 2025`, inMonth)).toBe(60_000);
  });
});

const exponential: RetryPolicy = { kind: 'exponential', baseMs: 1000, maxMs: 60_000, maxAttempts: 5 };
const capped: RetryPolicy = { kind: 'exponential', baseMs: 1000, maxMs: 5000, maxAttempts: 10 };
const schedule: RetryPolicy = { kind: 'schedule', scheduleMs: [1000, 5000, 60_000] };

describe('maxAttempts', () => {
  it.each<[string, RetryPolicy, number]>([
    ['exponential', exponential, 5],
    ['a schedule of 3 delays', schedule, 4],
    ['an empty schedule', { kind: 'schedule', scheduleMs: [] }, 1],
  ])('%s → %i', (_name, policy, expected) => {
    expect(maxAttempts(policy)).toBe(expected);
  });
});

describe('nextAttemptDelayMs', () => {
  it.each<[string, number, RetryPolicy, number, number | null]>([
    ['1st failed, random 0: 50% of 1 s', 1, exponential, 0, 500],
    ['1st failed, random 0.5: 75% of 1 s', 1, exponential, 0.5, 750],
    ['1st failed, random ~1: 100% of 1 s', 1, exponential, ALMOST_ONE, 1000],
    ['3rd failed, random 0: 50% of 4 s', 3, exponential, 0, 2000],
    ['3rd failed, random 0.5', 3, exponential, 0.5, 3000],
    ['4th failed, random ~1: 8 s', 4, exponential, ALMOST_ONE, 8000],
    ['5th (last) failed: dead letter', 5, exponential, 0.5, null],
    ['beyond the last: dead letter', 9, exponential, 0.5, null],
    ['attempt 0 counts as the first', 0, exponential, 0, 500],
    ['4th failed, capped at maxMs, random 0', 4, capped, 0, 2500],
    ['4th failed, capped at maxMs, random ~1', 4, capped, ALMOST_ONE, 5000],
    ['9th failed, capped at maxMs, random 0.5', 9, capped, 0.5, 3750],
    ['10th (last) failed: dead letter', 10, capped, 0.5, null],
    ['schedule, 1st failed', 1, schedule, ALMOST_ONE, 1000],
    ['schedule, 2nd failed', 2, schedule, 0, 5000],
    ['schedule, 3rd failed', 3, schedule, 0.5, 60_000],
    ['schedule, 4th (last) failed: dead letter', 4, schedule, 0, null],
    ['empty schedule: the first attempt was the only one', 1, { kind: 'schedule', scheduleMs: [] }, 0, null],
  ])('%s', (_name, attempt, policy, random, expected) => {
    expect(nextAttemptDelayMs(attempt, policy, () => random, null)).toBe(expected);
  });

  it.each<[string, number, RetryPolicy, number | null, number | null]>([
    ['raises a schedule delay', 1, schedule, 30_000, 30_000],
    ['never lowers it', 2, schedule, 500, 5000],
    ['0 changes nothing', 1, schedule, 0, 1000],
    ['a negative value changes nothing', 1, schedule, -5000, 1000],
    ['NaN is ignored', 1, schedule, Number.NaN, 1000],
    ['never raises above 24 h', 1, schedule, 2 * DAY_MS, DAY_MS],
    [
      'leaves a schedule delay above 24 h as written',
      1,
      { kind: 'schedule', scheduleMs: [2 * DAY_MS] },
      1000,
      2 * DAY_MS,
    ],
    ['raises a jittered delay (random 0: 500 ms)', 1, exponential, 10_000, 10_000],
    ['does not keep a message past its last attempt', 4, schedule, 1000, null],
  ])('Retry-After %s', (_name, attempt, policy, retryAfterMs, expected) => {
    expect(nextAttemptDelayMs(attempt, policy, () => 0, retryAfterMs)).toBe(expected);
  });

  it('a schedule never reads the randomness', () => {
    const random = jest.fn(() => 0.5);
    nextAttemptDelayMs(1, schedule, random, null);
    expect(random).not.toHaveBeenCalled();
  });

  it('an exponential delay stays between 50% and 100% of its cap for every attempt', () => {
    for (let attempt = 1; attempt < capped.maxAttempts; attempt++) {
      const cap = Math.min(5000, 1000 * 2 ** (attempt - 1));
      for (const r of [0, 0.1, 0.5, 0.9, ALMOST_ONE]) {
        const delay = nextAttemptDelayMs(attempt, capped, () => r, null);
        expect(delay).toBeGreaterThanOrEqual(cap / 2);
        expect(delay).toBeLessThanOrEqual(cap);
      }
    }
  });
});
