import { join } from 'node:path';

import * as Registry from '../../../src/domain/registry';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against RANK too (fresh-module.ts).
loadAgainInEachTest(Registry, join(__dirname, '../../../src/domain/registry'));
const { firstPollAt, isFinalRegistryStatus, isStale, mergeRegistryStatus, nextPollAt } = Registry;

describe('mergeRegistryStatus', () => {
  it.each([
    [null, 'queued', true, 'queued', 'forward'],
    [null, 'completed', true, 'completed', 'forward'],
    ['queued', 'processing', true, 'processing', 'forward'],
    ['queued', 'completed', true, 'completed', 'forward'],
    ['processing', 'error', true, 'error', 'forward'],
    ['processing', 'queued', false, 'processing', 'older'],
    ['processing', 'processing', false, 'processing', 'same'],
    ['completed', 'error', false, 'completed', 'after_final'],
    ['completed', 'processing', false, 'completed', 'after_final'],
    ['error', 'completed', false, 'error', 'after_final'],
    ['completed', 'completed', false, 'completed', 'after_final'],
    ['queued', 'done', false, 'queued', 'unknown_status'],
    ['queued', null, false, 'queued', 'unknown_status'],
    [null, 42, false, null, 'unknown_status'],
  ] as const)('%s + %s → apply %s, %s (%s)', (current, reported, apply, status, reason) => {
    expect(mergeRegistryStatus(current, reported)).toEqual({ apply, status, reason });
  });

  it('final statuses are completed and error only', () => {
    expect(
      ['queued', 'processing', 'completed', 'error'].map((s) => isFinalRegistryStatus(s as never)),
    ).toEqual([false, false, true, true]);
  });
});

describe('poll schedule', () => {
  const o = { graceMs: 120_000, intervalMs: 30_000, maxIntervalMs: 900_000, maxAgeMs: 172_800_000 };
  const fixed = () => 1; // no jitter taken off

  it('first poll after the webhook grace period', () => {
    expect(firstPollAt(1_000, o)).toBe(121_000);
  });

  it('grows exponentially to the cap', () => {
    const delays = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => (nextPollAt(0, 0, n, o, fixed) as number) - 0);
    expect(delays).toEqual([30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000]);
  });

  it('jitter takes off at most 20 %', () => {
    expect(nextPollAt(0, 0, 1, o, () => 0)).toBe(24_000);
  });

  it('honours a longer Retry-After', () => {
    expect(nextPollAt(0, 0, 1, o, fixed, 300_000)).toBe(300_000);
  });

  it('polls once more at the deadline, then none (stale)', () => {
    expect(nextPollAt(0, o.maxAgeMs - 1000, 20, o, fixed)).toBe(o.maxAgeMs);
    expect(nextPollAt(0, o.maxAgeMs, 21, o, fixed)).toBeNull();
    expect(isStale(0, o.maxAgeMs + 1, o)).toBe(true);
    expect(isStale(0, o.maxAgeMs, o)).toBe(false);
  });
});
