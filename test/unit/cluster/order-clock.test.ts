import { OrderClock, ReadingLog } from '../../../src/runtime/cluster/order-clock';

/**
 * The replica's estimate of PostgreSQL's clock (issue 36) driven by a clock source whose wall and
 * monotonic readings the test sets, as src/clock.ts's Clock is passed to the receiver.
 */

const PG = Date.parse('2026-11-27T12:00:00.000Z');

/** A replica's clocks: `wallAheadMs` off PostgreSQL's, the monotonic one starting at 1 000. */
function replicaClock(wallAheadMs: number) {
  const c = { mono: 1000, wallAhead: wallAheadMs };
  const source = {
    monotonic: () => c.mono,
    now: () => new Date(PG + (c.mono - 1000) + c.wallAhead),
  };
  return { c, source };
}

/** One heartbeat: a round trip of `rtt` ms, PostgreSQL read at its midpoint (its true time then). */
function beat(clock: OrderClock, c: { mono: number }, rtt = 2, pgLate = 0) {
  const mark = clock.begin();
  c.mono += rtt / 2;
  const pgNow = new Date(PG + (c.mono - 1000) + pgLate);
  c.mono += rtt / 2;
  return clock.read(mark, pgNow);
}

describe('OrderClock', () => {
  it.each([[-1000], [-100], [0], [100], [20]])(
    'a replica whose wall clock is %d ms off stamps PostgreSQL’s time, not its own',
    (ahead) => {
      const { c, source } = replicaClock(ahead);
      const clock = new OrderClock(source);
      expect(clock.stamp()).toBeNull(); // before the first reading: received_at stands for it
      const r = beat(clock, c);
      // ± half the round trip and 1 ms (a Date), plus the drift from its midpoint to its end.
      expect(r).toEqual({
        wallOffsetMs: ahead,
        uncertaintyMs: 2.001,
        wallStepMs: null,
        orderStepMs: null,
        stampedOnStep: 0,
      });
      c.mono += 50;
      expect(clock.stamp()?.getTime()).toBe(PG + (c.mono - 1000));
    },
  );

  it('a wall clock that steps moves the offset at the next heartbeat, and no order time', () => {
    const { c, source } = replicaClock(0);
    const clock = new OrderClock(source);
    beat(clock, c);
    c.mono += 30;
    const before = clock.stamp()?.getTime();
    c.wallAhead = -1000; // an NTP step of −1 s between heartbeats
    c.mono += 30;
    expect(clock.stamp()?.getTime()).toBe((before as number) + 30);
    const r = beat(clock, c);
    expect(r.wallStepMs).toBe(-1000);
    expect(r.wallOffsetMs).toBe(-1000);
    expect(r.orderStepMs).toBeNull();
  });

  it('a monotonic clock that stood still (a paused VM) is a step at the next heartbeat, with the requests stamped on it counted', () => {
    const { c, source } = replicaClock(0);
    const clock = new OrderClock(source);
    beat(clock, c);
    clock.stamp();
    clock.stamp();
    // PostgreSQL's clock went on 800 ms that this replica's monotonic clock never saw.
    const r = beat(clock, c, 2, 800);
    expect(r.orderStepMs).toBe(800);
    expect(r.stampedOnStep).toBe(2);
    expect(clock.stamp()?.getTime()).toBe(PG + (c.mono - 1000) + 800);
    expect(beat(clock, c, 2, 800).stampedOnStep).toBe(0);
  });

  it('never gives an order time below one it gave, even when a reading moves the estimate back', () => {
    const { c, source } = replicaClock(0);
    const clock = new OrderClock(source);
    beat(clock, c, 2, 300); // read 300 ms ahead (PostgreSQL's clock then stepped back)
    const published = clock.now()?.getTime() as number;
    const r = beat(clock, c, 2, 0);
    expect(r.orderStepMs).toBe(-300);
    expect(clock.stamp()?.getTime()).toBe(published);
    c.mono += 400;
    expect(clock.stamp()?.getTime()).toBe(PG + (c.mono - 1000));
  });

  it('keeps its tightest reading: a slow round trip does not widen the uncertainty', () => {
    const { c, source } = replicaClock(0);
    const clock = new OrderClock(source);
    expect(beat(clock, c, 4).uncertaintyMs).toBeCloseTo(3.002, 9);
    // The first reading's midpoint was at 1 002; the slow one ends at 1 124.
    const slow = beat(clock, c, 120);
    expect(slow.uncertaintyMs).toBeCloseTo(3 + 0.001 * 122, 9);
    expect(slow.orderStepMs).toBeNull();
  });
});

describe('ReadingLog', () => {
  it('logs each step, and the uncertainty beyond the bound once per episode', () => {
    const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
    const logger = {
      info: (fields: Record<string, unknown>, message: string) =>
        lines.push({ level: 'info', fields, message }),
      warn: (fields: Record<string, unknown>, message: string) =>
        lines.push({ level: 'warn', fields, message }),
    };
    const log = new ReadingLog(logger);
    const reading = {
      wallOffsetMs: 0,
      uncertaintyMs: 1,
      wallStepMs: null,
      orderStepMs: null,
      stampedOnStep: 0,
    };
    log.report(reading);
    log.report({ ...reading, uncertaintyMs: 40 });
    log.report({ ...reading, uncertaintyMs: 60 });
    log.report({ ...reading, wallStepMs: -1000, orderStepMs: 5, stampedOnStep: 3 });
    expect(lines.map((l) => [l.level, l.fields])).toEqual([
      ['warn', { uncertainty_ms: 40, bound_ms: 25 }],
      ['warn', { step_ms: -1000, offset_ms: 0 }],
      ['warn', { step_ms: 5, requests: 3 }],
      ['info', { uncertainty_ms: 1, bound_ms: 25 }],
    ]);
  });
});
