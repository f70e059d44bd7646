import {
  type Anchor,
  anchorOf,
  DRIFT_PER_MS,
  nextAnchor,
  ORDER_UNCERTAINTY_BOUND_MS,
  orderTimeAt,
  pgTimeAt,
  uncertaintyAt,
  wallOffsetOf,
  wallStepMs,
  withinOrderBound,
} from '../../../src/domain/order-time';

/** PostgreSQL's clock, ms from an arbitrary instant; the replica's monotonic clock starts elsewhere. */
const PG = 1_764_000_000_000;
const MONO = 5_000;

/** A round trip that left at monotonic `sent`, came back `rtt` later, PostgreSQL reading `pg` in between. */
function reading(o: { sent: number; rtt: number; pg: number; wallAhead?: number }) {
  const wall = (mono: number) => PG + (mono - MONO) + (o.wallAhead ?? 0);
  return {
    sentMono: o.sent,
    receivedMono: o.sent + o.rtt,
    sentWall: wall(o.sent),
    receivedWall: wall(o.sent + o.rtt),
    pgMs: o.pg,
  };
}

const anchor = (monoMs: number, pgMs: number, uncertaintyMs: number): Anchor => ({
  pgMs,
  monoMs,
  uncertaintyMs,
});

describe('anchorOf: PostgreSQL’s time at the round trip’s midpoint, ± half of it and 1 ms (a Date’s resolution)', () => {
  it.each<[string, { sent: number; rtt: number; pg: number }, Anchor]>([
    ['a 4 ms round trip', { sent: MONO, rtt: 4, pg: PG + 2 }, anchor(MONO + 2, PG + 2, 3)],
    [
      'PostgreSQL read early in a slow round trip',
      { sent: MONO, rtt: 80, pg: PG + 1 },
      anchor(MONO + 40, PG + 1, 41),
    ],
    ['a round trip of 0', { sent: MONO, rtt: 0, pg: PG }, anchor(MONO, PG, 1)],
  ])('%s', (_name, r, expected) => {
    expect(anchorOf(reading(r))).toEqual(expected);
  });
});

describe('wallOffsetOf: the wall clock minus PostgreSQL’s (consig_cluster_clock_offset_seconds)', () => {
  it.each<[string, number, number, { offsetMs: number; uncertaintyMs: number }]>([
    ['in sync', 0, 4, { offsetMs: 0, uncertaintyMs: 2 }],
    ['100 ms ahead', 100, 4, { offsetMs: 100, uncertaintyMs: 2 }],
    ['1 s behind, 10 ms round trip', -1000, 10, { offsetMs: -1000, uncertaintyMs: 5 }],
  ])('%s', (_name, wallAhead, rtt, expected) => {
    // PostgreSQL read exactly at the midpoint: the estimate is exact.
    expect(wallOffsetOf(reading({ sent: MONO, rtt, pg: PG + rtt / 2, wallAhead }))).toEqual(expected);
  });
});

describe('pgTimeAt and uncertaintyAt: extrapolated on the monotonic clock', () => {
  const a = anchor(MONO, PG, 2);
  it.each<[string, number, number, number]>([
    ['at the anchor', MONO, PG, 2],
    ['one heartbeat (100 ms) later', MONO + 100, PG + 100, 2 + 100 * DRIFT_PER_MS],
    ['a minute later', MONO + 60_000, PG + 60_000, 2 + 60_000 * DRIFT_PER_MS],
  ])('%s', (_name, mono, pg, uncertainty) => {
    expect(pgTimeAt(a, mono)).toBe(pg);
    expect(uncertaintyAt(a, mono)).toBeCloseTo(uncertainty, 9);
  });
});

describe('nextAnchor: the more certain reading, or the new one on a step', () => {
  const current = anchor(MONO, PG, 2);
  it.each<[string, Anchor | null, Anchor, Anchor, number | null]>([
    ['the first reading', null, anchor(MONO, PG, 30), anchor(MONO, PG, 30), null],
    [
      'a tighter reading replaces it',
      current,
      anchor(MONO + 100, PG + 100.5, 1),
      anchor(MONO + 100, PG + 100.5, 1),
      null,
    ],
    ['a looser reading that agrees keeps it', current, anchor(MONO + 100, PG + 110, 20), current, null],
    [
      'an equally tight one that agrees replaces it (the old one aged)',
      current,
      anchor(MONO + 100, PG + 101, 2),
      anchor(MONO + 100, PG + 101, 2),
      null,
    ],
    [
      'a reading 1 s ahead of the extrapolation: the monotonic clock stood still (a paused VM)',
      current,
      anchor(MONO + 100, PG + 1100, 3),
      anchor(MONO + 100, PG + 1100, 3),
      1000,
    ],
    [
      'a reading 200 ms behind it: PostgreSQL’s clock stepped back',
      current,
      anchor(MONO + 100, PG - 100, 3),
      anchor(MONO + 100, PG - 100, 3),
      -200,
    ],
    [
      'as uncertain as the old one has grown: replaces it',
      current,
      anchor(MONO + 1000, PG + 1000, 3),
      anchor(MONO + 1000, PG + 1000, 3),
      null,
    ],
    [
      'a disagreement of exactly both uncertainties is no step',
      current,
      anchor(MONO + 1000, PG + 1006, 3),
      anchor(MONO + 1000, PG + 1006, 3),
      null,
    ],
    [
      'a disagreement within both uncertainties is no step',
      current,
      anchor(MONO + 100, PG + 104.9, 3),
      current,
      null,
    ],
  ])('%s', (_name, before, sample, expected, step) => {
    expect(nextAnchor(before, sample)).toEqual({ anchor: expected, stepMs: step });
  });
});

describe('orderTimeAt: PostgreSQL’s time as estimated, never below the floor', () => {
  const a = anchor(MONO, PG, 1);
  it.each<[string, Anchor | null, number, number, number | null]>([
    ['no reading yet: none (the caller uses received_at)', null, MONO, Number.NEGATIVE_INFINITY, null],
    ['50 ms after the reading', a, MONO + 50, Number.NEGATIVE_INFINITY, PG + 50],
    [
      'a new reading moved the estimate back below what was published: held at it',
      a,
      MONO + 50,
      PG + 80,
      PG + 80,
    ],
  ])('%s', (_name, anchorNow, mono, floor, expected) => {
    expect(orderTimeAt(anchorNow, mono, floor)).toBe(expected);
  });
});

describe('wallStepMs: the wall clock minus the monotonic one moved between two readings', () => {
  it.each<[string, number | null, number, number, number | null]>([
    ['the first reading', null, 100, 100, null],
    ['unchanged', 100, 100, 100, null],
    ['within Date’s 1 ms resolution', 100, 101, 100, null],
    ['exactly the resolution and the drift over 1 s is no step', 0, 2, 1000, null],
    ['slewed by NTP (500 ppm over 10 s) is no step', 0, 5, 10_000, null],
    ['an NTP step of −1 s', 1000, 0, 100, -1000],
    ['a step of 5 ms', 0, 5, 100, 5],
  ])('%s', (_name, previous, next, elapsed, expected) => {
    expect(wallStepMs(previous, next, elapsed)).toBe(expected);
  });
});

describe('withinOrderBound', () => {
  it.each<[number, boolean]>([
    [0, true],
    [ORDER_UNCERTAINTY_BOUND_MS, true],
    [ORDER_UNCERTAINTY_BOUND_MS + 0.001, false],
    [500, false],
  ])('%s ms: %s', (uncertainty, expected) => {
    expect(withinOrderBound(uncertainty)).toBe(expected);
  });
});
