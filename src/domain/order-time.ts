/**
 * Order time (issue 36, docs/cluster.md §10): the one time base cluster mode orders a proposal's
 * events on, PostgreSQL's clock, as each replica estimates it when it acknowledges a delivery.
 *
 * A replica reads PostgreSQL's clock (`statement_timestamp()`) at every relay heartbeat, between
 * two readings of its own **monotonic** clock. That round trip pins PostgreSQL's time at the
 * midpoint to within half the round trip: an *anchor*. Between heartbeats the replica extrapolates
 * from the anchor on its monotonic clock, which an NTP step, a wrong time zone or a wall clock set
 * by hand never moves; its wall clock is used for nothing but `received_at`, which operators read.
 * So a replica's wall clock off by any amount, or stepping, changes no event's order; what the
 * estimate cannot see is named here: the round trip's half (the uncertainty, bounded by
 * {@link ORDER_UNCERTAINTY_BOUND_MS}), the rate difference of two clocks between heartbeats
 * ({@link DRIFT_PER_MS}), and a jump of the monotonic clock against PostgreSQL's (a resumed VM whose
 * monotonic clock stood still, PostgreSQL's own clock stepped), found at the next heartbeat as a
 * *step*. Pure: every clock reading is passed in (ms).
 */

/** PostgreSQL's clock read once, between two readings of this replica's clocks (ms). */
export interface ClockReading {
  /** Monotonic clock before and after the round trip. */
  sentMono: number;
  receivedMono: number;
  /** Wall clock before and after it (for the wall offset, `consig_cluster_clock_offset_seconds`). */
  sentWall: number;
  receivedWall: number;
  /** PostgreSQL's clock, read in between. */
  pgMs: number;
}

/** PostgreSQL's time `pgMs` at this replica's monotonic instant `monoMs`, to within `uncertaintyMs`. */
export interface Anchor {
  pgMs: number;
  monoMs: number;
  uncertaintyMs: number;
}

/**
 * How far two clocks may run apart per ms between two readings: 1 000 ppm, twice the most a
 * kernel slews a clock (500 ppm), one clock each side. An anchor 100 ms old (one heartbeat) has
 * gained 0.1 ms of uncertainty.
 */
export const DRIFT_PER_MS = 0.001;

/**
 * The uncertainty the order across replicas is guaranteed within: 25 ms, half the shortest pause
 * measured between a proposal's answer and its next delivery (~50 ms). Two replicas' estimates then
 * disagree by less than that pause, and consecutive deliveries of a proposal keep their order. A
 * replica whose estimate is less certain (its round trips to PostgreSQL take more than 50 ms) logs
 * a warning and shows it (`consig_cluster_clock_uncertainty_seconds`, `ConsigClockUncertain`).
 */
export const ORDER_UNCERTAINTY_BOUND_MS = 25;

/**
 * The resolution of PostgreSQL's reading as the replica gets it: `statement_timestamp()` has
 * microseconds, and the driver gives a Date, whole milliseconds (truncated).
 */
export const PG_READING_RESOLUTION_MS = 1;

/**
 * The anchor one reading gives: PostgreSQL's time at the round trip's midpoint, ± half of it and
 * the reading's resolution.
 */
export function anchorOf(r: ClockReading): Anchor {
  const half = Math.max(0, r.receivedMono - r.sentMono) / 2;
  return { pgMs: r.pgMs, monoMs: r.sentMono + half, uncertaintyMs: half + PG_READING_RESOLUTION_MS };
}

/** This replica's wall clock minus PostgreSQL's (ms), ± half the round trip on the wall clock. */
export function wallOffsetOf(r: ClockReading): { offsetMs: number; uncertaintyMs: number } {
  return {
    offsetMs: (r.sentWall + r.receivedWall) / 2 - r.pgMs,
    uncertaintyMs: Math.abs(r.receivedWall - r.sentWall) / 2,
  };
}

/** PostgreSQL's time at monotonic instant `monoMs`, extrapolated from `a`. */
export function pgTimeAt(a: Anchor, monoMs: number): number {
  return a.pgMs + (monoMs - a.monoMs);
}

/** How uncertain `a` is at monotonic instant `monoMs`: its own, plus the drift since. */
export function uncertaintyAt(a: Anchor, monoMs: number): number {
  return a.uncertaintyMs + DRIFT_PER_MS * Math.abs(monoMs - a.monoMs);
}

export interface AnchorUpdate {
  anchor: Anchor;
  /**
   * How far the estimate of PostgreSQL's time moved at this reading (ms, + forwards) when the
   * reading cannot agree with the anchor it replaces within both uncertainties: the monotonic
   * clock jumped against PostgreSQL's since the last reading. null: no step.
   */
  stepMs: number | null;
}

/**
 * The anchor after a new reading `sample`: the more certain of the two (the old one aged by the
 * drift since), as NTP's clock filter keeps its shortest round trip; the new one whenever the two
 * disagree by more than both uncertainties together (a step, reported).
 */
export function nextAnchor(current: Anchor | null, sample: Anchor): AnchorUpdate {
  if (current === null) return { anchor: sample, stepMs: null };
  const aged = uncertaintyAt(current, sample.monoMs);
  const moved = sample.pgMs - pgTimeAt(current, sample.monoMs);
  if (Math.abs(moved) > aged + sample.uncertaintyMs) return { anchor: sample, stepMs: moved };
  return { anchor: sample.uncertaintyMs <= aged ? sample : current, stepMs: null };
}

/**
 * The order time of what this replica acknowledges at monotonic instant `monoMs`: PostgreSQL's
 * time as `anchor` estimates it, never below `floorMs` (the latest order time this replica gave or
 * published: a heartbeat's "everything I acknowledge from now on is at or after T" must hold across
 * a new anchor that moved the estimate back). null before the first reading (the caller falls back
 * to the replica's own clock: docs/cluster.md §10).
 */
export function orderTimeAt(anchor: Anchor | null, monoMs: number, floorMs: number): number | null {
  if (anchor === null) return null;
  return Math.max(pgTimeAt(anchor, monoMs), floorMs);
}

/** Date's resolution: two readings of the wall clock taken together may differ by this much. */
const WALL_RESOLUTION_MS = 1;

/**
 * How far the wall clock stepped between two readings (ms), or null when it did not: each reading
 * is this replica's wall clock minus its monotonic clock (`wallMinusMono`), which moves only when
 * the wall clock steps (or slews, by at most the drift over `elapsedMs`). Local, so a step is seen
 * whole however slow the round trips to PostgreSQL are. A step moves `received_at` (what operators
 * read) and `consig_cluster_clock_offset_seconds`, never the order.
 */
export function wallStepMs(previous: number | null, next: number, elapsedMs: number): number | null {
  if (previous === null) return null;
  const moved = next - previous;
  return Math.abs(moved) > WALL_RESOLUTION_MS + DRIFT_PER_MS * Math.abs(elapsedMs) ? moved : null;
}

/** Whether an estimate this uncertain still guarantees the order across replicas. */
export function withinOrderBound(uncertaintyMs: number): boolean {
  return uncertaintyMs <= ORDER_UNCERTAINTY_BOUND_MS;
}
