import { fixed, median, medianBy, metric, metricTotal, percentile } from '../../rigs/harness';

/**
 * The statistics and /metrics readers the bench and the tests share (rigs/harness.ts): every
 * figure of docs/benchmark.md goes through them.
 */

describe('percentile: nearest rank of ascending samples', () => {
  const ten = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
  it.each([
    ['p50 of 1..10', ten, 0.5, 5],
    ['p99 of 1..10 is the largest', ten, 0.99, 10],
    ['p90 of 1..10', ten, 0.9, 9],
    ['p91 of 1..10 rounds the rank up', ten, 0.91, 10],
    ['p0 is the smallest', ten, 0, 1],
    ['p100 is the largest', ten, 1, 10],
    ['one sample is every percentile', [7], 0.5, 7],
    ['p50 of two is the lower', [3, 8], 0.5, 3],
  ])('%s', (_name, samples, p, expected) => {
    expect(percentile(samples, p)).toBe(expected);
  });

  it('reads a Float64Array as well', () => {
    expect(percentile(Float64Array.from([0.5, 1.5, 2.5, 3.5]), 0.75)).toBe(2.5);
  });

  it('is NaN without samples', () => {
    expect(percentile([], 0.5)).toBeNaN();
  });
});

describe('median and medianBy: the middle one, the lower of an even count', () => {
  it.each([
    ['odd count', [5, 1, 3], 3],
    ['even count takes the lower middle', [4, 1, 3, 2], 2],
    ['one value', [9], 9],
    ['unsorted with repeats', [2, 2, 9, 1, 2], 2],
  ])('%s', (_name, xs, expected) => {
    expect(median(xs)).toBe(expected);
  });

  it('is NaN without values, and leaves its input as it was', () => {
    expect(median([])).toBeNaN();
    const xs = [3, 1, 2];
    median(xs);
    expect(xs).toEqual([3, 1, 2]);
  });

  it('medianBy returns the item whose key is the median (a round, not a number)', () => {
    const rounds = [
      { round: 1, rps: 900 },
      { round: 2, rps: 1100 },
      { round: 3, rps: 1000 },
      { round: 4, rps: 950 },
    ];
    expect(medianBy(rounds, (r) => r.rps)).toEqual({ round: 4, rps: 950 });
    expect(medianBy([], (r: { rps: number }) => r.rps)).toBeUndefined();
  });
});

describe('metric and metricTotal: a value of a /metrics text', () => {
  const text = [
    '# HELP consig_relay_backlog deliveries not relayed',
    'consig_relay_backlog 12',
    'consig_relay_lag_seconds{replica="r1"} 0.25',
    'consig_relay_lag_seconds{replica="r2"} 0.5',
    'consig_relay_backlog_total 99',
  ].join('\n');

  it.each([
    ['a plain gauge', 'consig_relay_backlog', 12],
    ['the first label set', 'consig_relay_lag_seconds', 0.25],
    ['absent', 'consig_missing', null],
  ])('metric: %s', (_name, name, expected) => {
    expect(metric(text, name)).toBe(expected);
  });

  it.each([
    ['summed over label sets', 'consig_relay_lag_seconds', 0.75],
    ['a name that prefixes another is only itself', 'consig_relay_backlog', 12],
    ['absent', 'consig_missing', null],
  ])('metricTotal: %s', (_name, name, expected) => {
    expect(metricTotal(text, name)).toBe(expected);
  });
});

describe('fixed', () => {
  it.each([
    [1.234, 2, '1.23'],
    [null, 1, '-'],
    [Number.NaN, 0, '-'],
  ])('fixed(%p, %p) = %p', (n, digits, expected) => {
    expect(fixed(n, digits)).toBe(expected);
  });
});
