import { backoffDelayMs } from '../../../src/domain/backoff';

const opts = { baseMs: 1000, maxMs: 60_000 };

describe('backoffDelayMs', () => {
  it.each([
    [1, 1, 1000],
    [2, 1, 2000],
    [3, 1, 4000],
    [7, 1, 60_000], // capped
    [100, 1, 60_000],
    [0, 1, 1000], // attempt counts start at 1
  ])('attempt %i with random %p → %i ms', (attempt, random, expected) => {
    expect(backoffDelayMs(attempt, opts, () => random)).toBe(expected);
  });

  it('jitter takes off at most its fraction', () => {
    expect(backoffDelayMs(3, opts, () => 0)).toBe(2000); // 4000 · (1 - 0.5)
    expect(backoffDelayMs(3, { ...opts, jitter: 0 }, () => 0)).toBe(4000);
    expect(backoffDelayMs(3, { ...opts, jitter: 1 }, () => 0)).toBe(0);
  });

  it('for any one draw, never shorter than the attempt before, and between half its ceiling and the ceiling', () => {
    for (const r of [0, 0.3, 0.99, 1]) {
      let previous = 0;
      for (let attempt = 1; attempt < 30; attempt++) {
        const d = backoffDelayMs(attempt, opts, () => r);
        const ceiling = Math.min(opts.maxMs, opts.baseMs * 2 ** (attempt - 1));
        expect(d).toBeGreaterThanOrEqual(previous);
        expect(d).toBeGreaterThanOrEqual(ceiling / 2); // the default jitter takes off half at most
        expect(d).toBeLessThanOrEqual(ceiling);
        previous = d;
      }
    }
  });
});
