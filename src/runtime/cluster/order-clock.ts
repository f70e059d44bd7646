import {
  type Anchor,
  anchorOf,
  nextAnchor,
  ORDER_UNCERTAINTY_BOUND_MS,
  orderTimeAt,
  uncertaintyAt,
  wallOffsetOf,
  wallStepMs,
  withinOrderBound,
} from '../../domain/order-time';
import type { ClusterLogger } from '../../postgres/pg-sql';

/**
 * A replica's estimate of PostgreSQL's clock (issue 36; the rules: src/domain/order-time.ts): the
 * time base every replica orders what it acknowledges on. The relay feeds it a reading of
 * PostgreSQL's clock at every heartbeat (`begin`, then `read`); the webhook route stamps each
 * request it receives with {@link OrderClock.stamp} (the spool's `deliveries.order_at`), and the
 * relay's heartbeat says what it covers on the same base ({@link OrderClock.now}).
 */

/** This replica's clocks at the start of a round trip to PostgreSQL. */
export interface ClockMark {
  wallMs: number;
  monoMs: number;
}

/** What a reading of PostgreSQL's clock found (relay.ts passes it on with its heartbeat). */
export interface OrderReading {
  /** This replica's wall clock minus PostgreSQL's (ms): `consig_cluster_clock_offset_seconds`. */
  wallOffsetMs: number;
  /** How uncertain the order time now is (ms): half the best round trip, plus the drift since. */
  uncertaintyMs: number;
  /** The wall clock stepped since the last reading by this much (ms); null: it did not. */
  wallStepMs: number | null;
  /**
   * The estimate of PostgreSQL's time moved by this much at this reading (ms): the monotonic
   * clock jumped against PostgreSQL's (a resumed VM, PostgreSQL's clock stepped). null: no step.
   */
  orderStepMs: number | null;
  /**
   * On a step: the requests this replica stamped since the last reading, on the estimate the step
   * proved wrong (their order against other replicas' deliveries of the same moment may be off by
   * up to the step). 0 without a step.
   */
  stampedOnStep: number;
}

/** The clocks an OrderClock reads: the receiver's Clock (src/clock.ts). */
export interface ClockSource {
  now(): Date;
  monotonic(): number;
}

export class OrderClock {
  private anchor: Anchor | null = null;
  private floorMs = Number.NEGATIVE_INFINITY;
  private stamped = 0;
  /** At the last reading: the wall clock minus the monotonic one, and the monotonic time. */
  private wall: { minusMono: number; monoMs: number } | null = null;

  constructor(private readonly clock: ClockSource) {}

  /** The start of a round trip to PostgreSQL. */
  begin(): ClockMark {
    return { wallMs: this.clock.now().getTime(), monoMs: this.clock.monotonic() };
  }

  /** Its end: `pgNow`, PostgreSQL's clock read during it. */
  read(mark: ClockMark, pgNow: Date): OrderReading {
    const reading = {
      sentMono: mark.monoMs,
      receivedMono: this.clock.monotonic(),
      sentWall: mark.wallMs,
      receivedWall: this.clock.now().getTime(),
      pgMs: pgNow.getTime(),
    };
    const update = nextAnchor(this.anchor, anchorOf(reading));
    this.anchor = update.anchor;
    const wall = { minusMono: reading.receivedWall - reading.receivedMono, monoMs: reading.receivedMono };
    const stepped = wallStepMs(
      this.wall?.minusMono ?? null,
      wall.minusMono,
      wall.monoMs - (this.wall?.monoMs ?? 0),
    );
    this.wall = wall;
    const stampedOnStep = update.stepMs === null ? 0 : this.stamped;
    this.stamped = 0;
    return {
      wallOffsetMs: wallOffsetOf(reading).offsetMs,
      uncertaintyMs: uncertaintyAt(update.anchor, reading.receivedMono),
      wallStepMs: stepped,
      orderStepMs: update.stepMs,
      stampedOnStep,
    };
  }

  /**
   * The order time of a request arriving now (never earlier than one given before); null before
   * the first reading: the caller then orders on the replica's own clock, as before issue 36.
   */
  stamp(): Date | null {
    const at = this.now();
    if (at !== null) this.stamped += 1;
    return at;
  }

  /** PostgreSQL's time now, as this replica estimates it; null before the first reading. */
  now(): Date | null {
    const ms = orderTimeAt(this.anchor, this.clock.monotonic(), this.floorMs);
    if (ms === null) return null;
    this.floorMs = ms;
    return new Date(ms);
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;

/**
 * The log lines of the readings (node.ts, after each heartbeat): every step, and the uncertainty
 * crossing {@link ORDER_UNCERTAINTY_BOUND_MS} (a warning when it goes above, a line when it is back
 * within: once per episode, not at every heartbeat).
 */
export class ReadingLog {
  private uncertain = false;

  constructor(private readonly logger: Pick<ClusterLogger, 'info' | 'warn'>) {}

  report(r: OrderReading): void {
    if (r.wallStepMs !== null)
      this.logger.warn(
        { step_ms: round(r.wallStepMs), offset_ms: round(r.wallOffsetMs) },
        "cluster clock: this replica's wall clock stepped; received_at jumps with it, the order of what it acknowledges does not (it is on PostgreSQL's clock)",
      );
    if (r.orderStepMs !== null)
      this.logger.warn(
        { step_ms: round(r.orderStepMs), requests: r.stampedOnStep },
        "cluster clock: this replica's estimate of PostgreSQL's clock stepped (its monotonic clock jumped against PostgreSQL's: a resumed VM, or PostgreSQL's clock stepped); the requests it stamped since the last heartbeat may be ordered off by up to the step against other replicas' of that moment",
      );
    const within = withinOrderBound(r.uncertaintyMs);
    if (!within && !this.uncertain)
      this.logger.warn(
        { uncertainty_ms: round(r.uncertaintyMs), bound_ms: ORDER_UNCERTAINTY_BOUND_MS },
        "cluster clock: this replica's round trips to PostgreSQL are too slow to bound its clock offset within the order bound; deliveries of one proposal it and another replica take less than twice the uncertainty apart may be processed out of order (docs/alert-runbook.md#consigclockuncertain)",
      );
    if (within && this.uncertain)
      this.logger.info(
        { uncertainty_ms: round(r.uncertaintyMs), bound_ms: ORDER_UNCERTAINTY_BOUND_MS },
        "cluster clock: this replica's clock offset is within the order bound again",
      );
    this.uncertain = !within;
  }
}
