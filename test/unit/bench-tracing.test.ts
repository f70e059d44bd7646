import { tracingLines } from '../../bench/tracing';

/**
 * The tracing row's report (bench/tracing.ts, docs/benchmark.md "Tracing"): the ratio against its
 * target, tracing's CPU per delivery, and how many spans the bounded queue dropped, without which
 * a ratio measured while the queue shed most spans would read as the cost of exporting them all.
 */

const row = (target: string, rps: number, cpuUsPerReq: number | null, spansDropped: number | null) => ({
  target,
  concurrency: 50,
  rps,
  cpuUsPerReq,
  ok200Total: 10_000,
  spansDropped,
});

describe('tracingLines', () => {
  it('says nothing when either row did not run', () => {
    expect(tracingLines([row('receiver', 5000, 100, null)])).toEqual([]);
    expect(tracingLines([row('receiver-traced', 5000, 100, 0)])).toEqual([]);
  });

  it('gives the ratio against 0.85×, the CPU tracing adds and the spans dropped per delivery', () => {
    const [target, note] = tracingLines([
      row('receiver', 5000, 100, null),
      row('receiver-traced', 4000, 125, 20_000),
    ]);
    expect(target).toContain('MISSED (0.80×)');
    expect(note).toContain('25 µs (100 → 125)');
    expect(note).toContain('spans dropped by the queue in the median round: 20000 (2.00 per delivery of 3)');
  });

  it('meets the target at 0.85× and says when the figures are missing', () => {
    const [target, note] = tracingLines([
      row('receiver', 1000, null, null),
      row('receiver-traced', 850, 90, null),
    ]);
    expect(target).toContain('MET (0.85×)');
    expect(note).toContain('n/a');
    expect(note).toContain('median round: n/a');
  });
});
