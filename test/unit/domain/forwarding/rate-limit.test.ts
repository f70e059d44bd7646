import { fullBucket, takeToken, type TokenBucket } from '../../../../src/domain/forwarding/rate-limit';

/** Offers one request every `everyMs` from 0 to `untilMs` (exclusive); returns when each was allowed. */
function simulate(rate: number, everyMs: number, untilMs: number, start = fullBucket(rate, 0)): number[] {
  let bucket = start;
  const taken: number[] = [];
  for (let t = 0; t < untilMs; t += everyMs) {
    const result = takeToken(bucket, rate, t);
    bucket = result.bucket;
    if (result.taken) taken.push(t);
  }
  return taken;
}

/** The most requests any window [t, t + 1000) holds. */
function busiestSecond(times: readonly number[]): number {
  return Math.max(0, ...times.map((t) => times.filter((u) => u >= t && u < t + 1000).length));
}

describe('fullBucket', () => {
  it.each<[string, number, number]>([
    ['one a second', 1, 1],
    ['five a second: a burst of five', 5, 5],
    ['a fractional rate keeps its fraction', 2.5, 2.5],
    ['under one a second: still one request at once', 0.5, 1],
    ['the smallest rate the file accepts', 0.1, 1],
    ['the largest rate the file accepts', 10_000, 10_000],
  ])('%s (rate %p → %p tokens)', (_name, rate, tokens) => {
    expect(fullBucket(rate, 1234)).toEqual({ tokens, atMs: 1234 });
  });
});

describe('takeToken', () => {
  it.each<[string, TokenBucket, number, number, ReturnType<typeof takeToken>]>([
    [
      'a full bucket gives one at once',
      { tokens: 5, atMs: 0 },
      5,
      0,
      { taken: true, bucket: { tokens: 4, atMs: 0 } },
    ],
    ['the last whole token', { tokens: 1, atMs: 0 }, 5, 0, { taken: true, bucket: { tokens: 0, atMs: 0 } }],
    [
      'empty: wait for one token (1000 / rate)',
      { tokens: 0, atMs: 0 },
      5,
      0,
      { taken: false, bucket: { tokens: 0, atMs: 0 }, waitMs: 200 },
    ],
    [
      'half refilled: wait for the other half',
      { tokens: 0, atMs: 0 },
      5,
      100,
      { taken: false, bucket: { tokens: 0.5, atMs: 100 }, waitMs: 100 },
    ],
    [
      'refilled to one exactly when the wait said',
      { tokens: 0, atMs: 0 },
      5,
      200,
      { taken: true, bucket: { tokens: 0, atMs: 200 } },
    ],
    [
      'a quiet spell refills up to the capacity, not beyond',
      { tokens: 0, atMs: 0 },
      5,
      3_600_000,
      { taken: true, bucket: { tokens: 4, atMs: 3_600_000 } },
    ],
    [
      'under one a second: capacity one, refilled slowly',
      { tokens: 0, atMs: 0 },
      0.5,
      1000,
      { taken: false, bucket: { tokens: 0.5, atMs: 1000 }, waitMs: 1000 },
    ],
    [
      'under one a second: never more than one at once',
      { tokens: 0, atMs: 0 },
      0.5,
      60_000,
      { taken: true, bucket: { tokens: 0, atMs: 60_000 } },
    ],
    [
      'a rate that does not divide 1000: the wait rounds up',
      { tokens: 0, atMs: 0 },
      3,
      0,
      { taken: false, bucket: { tokens: 0, atMs: 0 }, waitMs: 334 },
    ],
    [
      'a high rate waits at least 1 ms',
      { tokens: 0.99, atMs: 0 },
      10_000,
      0,
      { taken: false, bucket: { tokens: 0.99, atMs: 0 }, waitMs: 1 },
    ],
    [
      'a clock that stepped back refills nothing',
      { tokens: 0, atMs: 10_000 },
      5,
      9_000,
      { taken: false, bucket: { tokens: 0, atMs: 10_000 }, waitMs: 1200 },
    ],
  ])('%s', (_name, bucket, rate, nowMs, expected) => {
    const result = takeToken(bucket, rate, nowMs);
    if ('waitMs' in expected) {
      expect(result).toMatchObject({ taken: false, waitMs: expected.waitMs });
    } else {
      expect(result.taken).toBe(true);
    }
    expect(result.bucket.atMs).toBe(expected.bucket.atMs);
    expect(result.bucket.tokens).toBeCloseTo(expected.bucket.tokens, 9);
  });

  it.each([0.1, 0.5, 1, 3, 5, 7, 50, 333, 10_000])(
    'rate %p: after a refusal, a token is there exactly at waitMs and not 1 ms before',
    (rate) => {
      for (const tokens of [0, 0.25, 0.5, 0.9]) {
        const refused = takeToken({ tokens, atMs: 0 }, rate, 0);
        if (refused.taken) throw new Error('expected a refusal');
        expect(takeToken(refused.bucket, rate, refused.waitMs).taken).toBe(true);
        if (refused.waitMs > 1) expect(takeToken(refused.bucket, rate, refused.waitMs - 1).taken).toBe(false);
      }
    },
  );

  it('a clock that stepped back does not hand out the time it gave back again', () => {
    // Empty at 10 s; the clock steps back to 9 s and then runs on to 10.2 s: one token (10 s →
    // 10.2 s), not the six that counting from 9 s would give.
    let bucket: TokenBucket = { tokens: 0, atMs: 10_000 };
    bucket = takeToken(bucket, 5, 9_000).bucket;
    const taken = [10_200, 10_200, 10_200].map((t) => {
      const result = takeToken(bucket, 5, t);
      bucket = result.bucket;
      return result.taken;
    });
    expect(taken).toEqual([true, false, false]);
  });
});

describe('the bucket over time (requests offered every 10 ms)', () => {
  it.each<[number, number]>([
    [1, 1],
    [5, 5],
    [20, 20],
    [0.5, 1],
  ])('rate %p: a burst of %p at first, then the rate', (rate, burst) => {
    const taken = simulate(rate, 10, 10_000);
    expect(taken.slice(0, burst)).toEqual(Array.from({ length: burst }, (_, i) => i * 10));
    // Over 10 s: the burst plus 10 s of refill (the last token may be a tick late).
    const expected = burst + rate * 10;
    expect(taken.length).toBeGreaterThanOrEqual(Math.floor(expected) - 1);
    expect(taken.length).toBeLessThanOrEqual(Math.ceil(expected));
    // No one-second window holds more than the burst plus one second's refill.
    expect(busiestSecond(taken)).toBeLessThanOrEqual(burst + rate);
  });

  it('after the burst, requests are spaced 1000 / rate apart (to the 10 ms the offers come at)', () => {
    const taken = simulate(5, 10, 5000);
    const gaps = taken.slice(6).map((t, i) => t - (taken[i + 5] as number));
    for (const gap of gaps) expect(Math.abs(gap - 200)).toBeLessThanOrEqual(10);
    expect(taken.at(-1)).toBe(4800);
  });

  it('from an empty bucket, at most the rate in any one second', () => {
    const taken = simulate(5, 10, 10_000, { tokens: 0, atMs: 0 });
    expect(busiestSecond(taken)).toBe(5);
  });
});
