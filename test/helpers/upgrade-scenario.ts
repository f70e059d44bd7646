import { readFileSync, statSync } from 'node:fs';
import { sleep } from '../../rigs/harness';
import { startLoad } from './failover-load';
import { SECRET } from './payloads';
import { withClient } from './postgres';
import { previousDefects, type Release } from './release';
import { UpgradeBed } from './upgrade-bed';
import { badColumns, checkUpgrade, TABLE_HEADER, tableRow, type UpgradeFigures } from './upgrade-checks';

/**
 * One run of the upgrade tier (issue 46 item 5): the previous release in every slot behind HAProxy,
 * ~40 signed deliveries/s through the balancer (failover-load.ts: each proposal's events in order,
 * a failed request retried with backoff, as the service does), the scenario's steps under that load,
 * then the drain and the checks of the issue's table.
 */

export const PER_SECOND = 40;
/** The load runs at least this long, and until the steps are done plus {@link TAIL_MS}. */
const MIN_LOAD_MS = 20_000;
const TAIL_MS = 3000;
/** The steps start once the previous release has had this much of the load. */
const STEPS_AFTER_MS = 3000;

/** What a scenario's steps get: the bed, and two ways to say what they saw. */
export interface StepContext {
  bed: UpgradeBed;
  /** A line of the report (a duration, what was seen). */
  note(key: string, value: string): void;
  /**
   * An expectation of the scenario (the replica refused, the migration ran): recorded, not thrown,
   * so that the run goes on to its end and its row is measured (a release from before issue 46
   * fails some; UPGRADE_FROM). {@link expectClean} fails the test on any unmet one.
   */
  check(what: string, ok: boolean, detail?: string): boolean;
}

export interface Scenario {
  /** The row's name in the table. */
  run: string;
  seed: number;
  previous: Release;
  /** What happens under the load. */
  steps(ctx: StepContext): Promise<void>;
  /**
   * Replicas of the previous release meet a breaking migration while they run. Two things of that
   * moment are not counted against the run, each bounded:
   * - with the defect `acknowledges-during-breaking-landing` (previous-release.json), as many
   *   transitions not applied, and as many proposals out of order, as deliveries relayed after the
   *   watermark (consig_relay_late_total, summed); an ordering fault with no late relay to account
   *   for it still fails;
   * - up to {@link SWITCH_NON200} deliveries answered 503: those in flight in the instant the old
   *   replicas start refusing while the new one is not yet in rotation, before HAProxy takes each
   *   refusing replica out at the first delivery it fails (deploy/compose/haproxy.cfg; 1 to 3 seen).
   *   The harness sends each again, as the service does: none is lost (acked lost stays 0).
   */
  breakingUnderPrevious?: boolean;
}

export interface Outcome {
  run: string;
  figures: UpgradeFigures;
  notes: Record<string, string>;
  /** The scenario's expectations that did not hold (StepContext.check). */
  unmet: string[];
  drained: boolean;
  /** SIGTERM's exit code of every replica the run stopped, as `slot release: code`. */
  exits: string[];
  bed: UpgradeBed;
  /** Ordering faults not counted against the run ({@link Scenario.breakingUnderPrevious}): the late relays. */
  tolerated: number;
  /** Non-200 answers not counted against the run ({@link Scenario.breakingUnderPrevious}): up to {@link SWITCH_NON200}. */
  toleratedNon200: number;
}

/** {@link Scenario.breakingUnderPrevious}: the 503s of a breaking migration's landing not counted, at most. */
export const SWITCH_NON200 = 4;

/** Runs a scenario; the bed is closed, its files kept until {@link expectClean} passes. */
export async function runScenario(s: Scenario): Promise<Outcome> {
  const began = Date.now();
  const bed = await UpgradeBed.create();
  const notes: Record<string, string> = {};
  const unmet: string[] = [];
  const ctx: StepContext = {
    bed,
    note: (k, v) => (notes[k] = v),
    check: (what, ok, detail) => {
      if (!ok) unmet.push(detail === undefined ? what : `${what}: ${detail.slice(0, 600)}`);
      return ok;
    },
  };
  try {
    await startFleet(bed, s.previous);
    const haproxyLogFrom = statSync(bed.lb.logPath).size;
    const steps = (async () => {
      await sleep(STEPS_AFTER_MS);
      await s.steps(ctx);
    })();
    const load = startLoad({
      ports: [bed.lb.port],
      secret: SECRET,
      seed: s.seed,
      perSecond: PER_SECOND,
      durationMs: MIN_LOAD_MS,
      until: steps.then(() => sleep(TAIL_MS)),
    });
    let failure: unknown = null;
    await steps.catch((err: unknown) => (failure = err));
    await load.done;
    if (failure !== null) throw failure;
    const drained = await bed.waitDrained();
    const figures = await withClient(bed.url, (c) => checkUpgrade(c, load));
    notes['slowest answer through HAProxy'] = `${figures.worstAnswerMs} ms`;
    Object.assign(notes, observed(bed, haproxyLogFrom));
    await bed.close();
    // A run that exited by itself is named so once a step saw it (and checked it); one nobody saw
    // has no code here, and fails expectClean.
    const exits = bed.slots.flatMap((slot) =>
      slot.runs.map(
        (r) => `${slot.name} ${r.release.name}: ${r.exitedByItself ? `exited by itself, ${r.exit}` : r.exit}`,
      ),
    );
    notes['wall time of the run'] = `${((Date.now() - began) / 1000).toFixed(1)} s`;
    const tolerated =
      s.breakingUnderPrevious === true && previousDefects().includes('acknowledges-during-breaking-landing')
        ? bed.relayTotals().late
        : 0;
    if (tolerated > 0)
      notes['not counted: ordering faults up to the deliveries relayed late, the previous release’s'] =
        String(tolerated);
    const toleratedNon200 = s.breakingUnderPrevious === true ? Math.min(figures.non200, SWITCH_NON200) : 0;
    if (toleratedNon200 > 0)
      notes['not counted: deliveries answered 503 as the breaking migration landed (sent again, none lost)'] =
        String(toleratedNon200);
    return { run: s.run, figures, notes, unmet, drained, exits, bed, tolerated, toleratedNon200 };
  } catch (err) {
    await bed.close().catch(() => undefined);
    (err as Error).message += `\n\nreplica and HAProxy logs kept in ${bed.dir}`;
    throw err;
  }
}

/** The previous release installed: its migrate step, then every slot, in rotation, clocks certain. */
async function startFleet(bed: UpgradeBed, previous: Release): Promise<void> {
  // A release from before issue 46 migrates only its SQLite file there (the replicas then migrate
  // PostgreSQL at their start, under the runner's advisory lock): harmless either way.
  const install = await bed.migrate(previous);
  if (install.code !== 0) throw new Error(`${previous.name} migrate failed:\n${install.output}`);
  for (const slot of bed.slots) bed.launch(slot, previous);
  await Promise.all(bed.slots.map((slot) => bed.inRotation(slot)));
  // As the failover test does: the load starts once every replica measures PostgreSQL's clock
  // within the order bound (a first reading on a busy machine can be uncertain; not this tier's topic).
  await bed.clocksCertain();
}

/** What the operator would have seen: relay lag and errors, HAProxy's outages, error log lines. */
function observed(bed: UpgradeBed, haproxyLogFrom: number): Record<string, string> {
  // HAProxy's own lines since the load started (before, the slots were still starting).
  const haproxy = readFileSync(bed.lb.logPath).subarray(haproxyLogFrom).toString('utf8');
  const noServer = haproxy.split('\n').filter((l) => /has no server available/.test(l)).length;
  const errors = bed.logLines(/"level":"(error|fatal)"/);
  const distinct = [...new Set(errors)];
  const relay = bed.relayTotals();
  return {
    'relay lag, the highest any replica showed': `${bed.maxRelayLagS.toFixed(1)} s`,
    'relay errors, deliveries relayed after the watermark (consig_relay_errors_total, consig_relay_late_total; summed)': `${relay.errors}, ${relay.late}`,
    'HAProxy: times the backend had no server UP': String(noServer),
    'replicas’ error log lines': `${errors.length}${distinct.length > 0 ? `: ${distinct.slice(0, 4).join('; ')}` : ''}`,
  };
}

/** The run's row with the table's header, and its notes. */
export function report(o: Outcome): string {
  const notes = [
    ...Object.entries(o.notes).map(([k, v]) => `- ${k}: ${v}`),
    ...o.unmet.map((u) => `- NOT AS EXPECTED: ${u}`),
  ];
  return [`\n${o.run}`, TABLE_HEADER, tableRow(o.run, o.figures), ...notes, ''].join('\n');
}

/**
 * Every bad column 0, everything drained, each replica stopped cleanly (exit 0 after its drain); the
 * run's files removed when so, kept and named when not.
 */
export function expectClean(o: Outcome): void {
  const text = report(o);
  process.stdout.write(text);
  try {
    expect(o.unmet).toEqual([]);
    expect(o.figures.acknowledged).toBeGreaterThan(PER_SECOND * 10);
    expect(o.drained).toBe(true);
    const bad = badColumns({
      ...o.figures,
      non200: o.figures.non200 - o.toleratedNon200,
      transitionsNotApplied: Math.max(0, o.figures.transitionsNotApplied - o.tolerated),
      outOfOrder: Math.max(0, o.figures.outOfOrder - o.tolerated),
    });
    expect(Object.entries(bad).filter(([, n]) => n !== 0)).toEqual([]);
    // interface §6.1, rule 2: an answer within 5 seconds.
    expect(o.figures.worstAnswerMs).toBeLessThan(5000);
    expect(o.exits.filter((e) => !e.endsWith(': 0') && !e.includes('exited by itself'))).toEqual([]);
  } catch (err) {
    (err as Error).message += `\n${text}\nreplica and HAProxy logs kept in ${o.bed.dir}`;
    throw err;
  }
  o.bed.removeFiles();
}
