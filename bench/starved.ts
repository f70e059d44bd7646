import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from '../src/sqlite/sqlite-driver';
import { metricsOf, startStarvedPostgres } from './cluster-pg';
import { cpuMicros, metric, peakRss, percentile, pinToCpus, until } from '../rigs/harness';
import { DestinationChild } from './destination';
import type { ForwardingHarness, ReceiverRun } from './protocol';

/**
 * The starved row (issue 23: the answer comes first). The receiver is pinned to core 0 beside
 * `busyLoops` processes spinning there (a crowded node, a container at its CPU limit); the load
 * generator and the fast destinations on core 1. An open-loop fixed rate of signed deliveries;
 * forwarding off, then on (two destinations and the feed), then, with `--baseline`, the same two
 * with the baseline's build, all in one run. For each: the answers' p50/p99/max, non-200s, the
 * backlog's peak (events pending + deliveries pending) and how long after the last answer it
 * drained, and the receiver's CPU per delivery.
 *
 * The load generator is the forwarding latency figure's open-loop sender (destination.ts), run in
 * the first destination's child; with forwarding off that child only sends.
 */

export interface StarvedSpec {
  rate: number;
  warmupMs: number;
  durationMs: number;
  busyLoops: number;
  /** The baseline's receiver (`--baseline`), run after this build's rows. */
  baselineBin: string | null;
}

export interface StarvedRow {
  name: string;
  forwarding: boolean;
  sent: number;
  ok200: number;
  non200: number;
  socketErrors: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Answers of 5 s or more (the service's deadline). */
  over5s: number;
  /** Largest events pending + deliveries pending seen during the load (sampled every 100 ms). */
  peakBacklog: number;
  /** From the end of the load until the backlog was 0 (null: not within the wait). */
  drainSeconds: number | null;
  cpuUsPerDelivery: number | null;
  /** The receiver's peak resident set over the row (VmHWM), MB. */
  peakRssMb: number | null;
}

/** The receiver's work waiting: events not processed and deliveries not sent. */
function backlog(dbPath: string): number {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 1000');
    const n = (sql: string) => (db.prepare(sql).get() as { n: number }).n;
    const events = n("SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')");
    const forwards = n("SELECT count(*) AS n FROM forward_deliveries WHERE status = 'pending'");
    return events + forwards;
  } catch {
    return -1;
  } finally {
    db.close();
  }
}

function busyLoops(n: number, cpu: string): ChildProcess[] {
  const loops = Array.from({ length: n }, () =>
    spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }),
  );
  pinToCpus(
    loops.map((l) => l.pid),
    cpu,
  );
  return loops;
}

/**
 * Where a row's receiver keeps its work: SQLite mode (its file), or cluster mode (a replica on a
 * PostgreSQL database of the row's own; the backlog is its spool plus PostgreSQL's).
 */
interface RowMode {
  env: Record<string, string>;
  /** After the receiver answers /readyz: until it runs (a replica: connected to PostgreSQL). */
  ready(receiver: ReceiverRun): Promise<void>;
  backlog(dbPath: string): Promise<number>;
  /** After the row (a replica's database dropped). */
  done(): Promise<void>;
}

const SQLITE_MODE: RowMode = {
  env: {},
  ready: async () => undefined,
  backlog: async (dbPath) => backlog(dbPath),
  done: async () => undefined,
};

async function row(
  h: ForwardingHarness,
  spec: StarvedSpec,
  name: string,
  forwarding: boolean,
  bin: string | undefined,
  mode: RowMode = SQLITE_MODE,
): Promise<StarvedRow> {
  // The destinations (the first one also sends the load) on core 1.
  const onCore1: Pick<ForwardingHarness, 'track' | 'stopChild'> = {
    track: (child) => {
      h.track(child);
      pinToCpus([child.pid], '1');
      return child;
    },
    stopChild: h.stopChild,
  };
  const options = { verifyEvery: 100, keepArrivals: false, trackEventReceived: false };
  const first = await DestinationChild.start(onCore1, options);
  const second = forwarding ? await DestinationChild.start(onCore1, options) : null;
  const loops: ChildProcess[] = [];
  try {
    let env: Record<string, string> = {};
    if (second !== null) {
      const file = join(h.dir, `starved-${name}-destinations.json`);
      const destinations = [first, second].map((d, i) => ({ name: `d${i}`, url: d.url, secret: d.secret }));
      writeFileSync(file, JSON.stringify({ destinations }));
      env = { DESTINATIONS_FILE: file, FEED_ENABLED: 'true' };
    }
    const receiver = await h.startReceiver(`starved-${name}`, { ...env, ...mode.env }, undefined, bin);
    try {
      await mode.ready(receiver);
      pinToCpus([receiver.pid], '0');
      loops.push(...busyLoops(spec.busyLoops, '0'));
      let peak = 0;
      let sampling = false;
      const sampler = setInterval(() => {
        if (sampling) return;
        sampling = true;
        void mode
          .backlog(receiver.dbPath)
          .then((b) => {
            peak = Math.max(peak, b);
          })
          .finally(() => {
            sampling = false;
          });
      }, 100);
      const cpuBefore = cpuMicros(receiver.pid);
      const samples = await first.latency({
        rate: spec.rate,
        warmupMs: spec.warmupMs,
        durationMs: spec.durationMs,
        port: receiver.port,
        webhookSecret: h.webhookSecret,
        runId: randomBytes(3).toString('hex'),
        settleMs: 0,
      });
      const endedAt = performance.now();
      let drainSeconds: number | null = null;
      while (performance.now() - endedAt < 120_000) {
        const b = await mode.backlog(receiver.dbPath);
        peak = Math.max(peak, b);
        if (b === 0) {
          drainSeconds = (performance.now() - endedAt) / 1000;
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      clearInterval(sampler);
      const cpuAfter = cpuMicros(receiver.pid);
      const all = Math.round((spec.rate * (spec.warmupMs + spec.durationMs)) / 1000);
      const answers = Float64Array.from(samples.answerMs).sort();
      return {
        name,
        forwarding,
        sent: samples.sent,
        ok200: samples.ok200,
        non200: Object.values(samples.non200).reduce((a, b) => a + b, 0),
        socketErrors: samples.socketErrors,
        p50Ms: percentile(answers, 0.5),
        p99Ms: percentile(answers, 0.99),
        maxMs: answers.length > 0 ? (answers[answers.length - 1] as number) : Number.NaN,
        over5s: answers.filter((ms) => ms >= 5000).length,
        peakBacklog: peak,
        drainSeconds,
        cpuUsPerDelivery: cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) / all,
        peakRssMb: peakRss(receiver.pid),
      };
    } finally {
      for (const l of loops) l.kill('SIGKILL');
      await receiver.stop();
    }
  } finally {
    await first.stop();
    await second?.stop();
    await mode.done();
  }
}

/** Off, on (this build), then off, on with the baseline's build when there is one. */
export async function runStarvedRows(h: ForwardingHarness, spec: StarvedSpec): Promise<StarvedRow[]> {
  const rows: StarvedRow[] = [];
  const builds: [string, string | undefined][] = [['', undefined]];
  if (spec.baselineBin !== null) builds.push(['baseline-', spec.baselineBin]);
  for (const [prefix, bin] of builds)
    for (const forwarding of [false, true]) {
      const name = `${prefix}${forwarding ? 'forward-on' : 'forward-off'}`;
      process.stderr.write(`bench: starved ${name}, ${spec.rate}/s ...`);
      const r = await row(h, spec, name, forwarding, bin);
      process.stderr.write(` p99 ${r.p99Ms.toFixed(1)} ms, max ${r.maxMs.toFixed(1)} ms\n`);
      rows.push(r);
    }
  return rows;
}

/**
 * The same rows in cluster mode (issue 23: "the same in cluster mode"): the receiver a replica on a
 * PostgreSQL of its own pinned to core 1 with the load and the destinations, a fresh database per
 * row; off, on with this build, then off, on with the baseline's build when there is one.
 */
export async function runClusterStarvedRows(h: ForwardingHarness, spec: StarvedSpec): Promise<StarvedRow[]> {
  const pg = await startStarvedPostgres('1');
  const rows: StarvedRow[] = [];
  const builds: [string, string | undefined][] = [['', undefined]];
  if (spec.baselineBin !== null) builds.push(['baseline-', spec.baselineBin]);
  try {
    for (const [prefix, bin] of builds)
      for (const forwarding of [false, true]) {
        const name = `${prefix}cluster-${forwarding ? 'forward-on' : 'forward-off'}`;
        process.stderr.write(`bench: starved ${name}, ${spec.rate}/s ...`);
        const db = await pg.database(
          `starved_${forwarding ? 'on' : 'off'}_${randomBytes(3).toString('hex')}`,
        );
        const mode: RowMode = {
          env: { DATABASE_URL: db.url, REPLICA_ID: 'starved' },
          ready: (receiver) => connected(receiver).then(() => pg.pin()),
          backlog: (dbPath) => db.backlog(dbPath).catch(() => -1),
          done: () => db.drop(),
        };
        const r = await row(h, spec, name, forwarding, bin, mode);
        process.stderr.write(` p99 ${r.p99Ms.toFixed(1)} ms, max ${r.maxMs.toFixed(1)} ms\n`);
        rows.push(r);
      }
  } finally {
    await pg.stop();
  }
  return rows;
}

/** Until the replica says it is connected to PostgreSQL (its /metrics), at most 60 s. */
const connected = (receiver: ReceiverRun): Promise<void> =>
  until(
    'starved: the replica connected to PostgreSQL',
    async () => metric(await metricsOf(receiver.port), 'consig_cluster_connected') === 1,
    60_000,
    receiver.alive,
    200,
  );

export function starvedReport(spec: StarvedSpec, rows: readonly StarvedRow[]): string {
  const f = (n: number | null, d = 1) => (n === null || Number.isNaN(n) ? 'n/a' : n.toFixed(d));
  const lines = [
    `starved row: receiver pinned to core 0 with ${spec.busyLoops} busy loops, load generator and destinations on core 1, ${spec.rate} deliveries/s open loop for ${spec.durationMs / 1000} s`,
    '| row | answered 200 / sent | non-200 | p50 ms | p99 ms | max ms | ≥ 5 s | peak backlog | drain s | CPU µs/delivery | peak RSS MB |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.ok200} / ${r.sent} | ${r.non200 + r.socketErrors} | ${f(r.p50Ms)} | ${f(r.p99Ms)} | ${f(r.maxMs)} | ${r.over5s} | ${r.peakBacklog} | ${f(r.drainSeconds)} | ${f(r.cpuUsPerDelivery, 0)} | ${f(r.peakRssMb, 0)} |`,
    ),
  ];
  for (const build of ['', 'baseline-'])
    for (const mode of ['', 'cluster-']) {
      const off = rows.find((r) => r.name === `${build}${mode}forward-off`);
      const on = rows.find((r) => r.name === `${build}${mode}forward-on`);
      if (off === undefined || on === undefined) continue;
      const ok = on.p99Ms <= 1.5 * off.p99Ms + 20 && on.maxMs < 2000 && on.non200 + on.socketErrors === 0;
      const what = `${build === '' ? '' : 'the baseline, '}${mode === '' ? '' : 'cluster mode, '}`;
      lines.push(
        `target "${what}forwarding on: p99 ≤ 1.5× off + 20 ms, worst < 2 s, 0 non-200": ${ok ? 'MET' : 'MISSED'} (p99 ${f(on.p99Ms)} vs ${f(1.5 * off.p99Ms + 20)} ms, max ${f(on.maxMs)} ms)`,
      );
    }
  return lines.join('\n');
}
