import { fork } from 'node:child_process';
import { join } from 'node:path';
import { HAPPY_PATH } from '../src/domain/lifecycle';
import type { ClusterBenchOptions, ClusterHarness } from './protocol';
import {
  caughtUp,
  cpuSnapshot,
  cpuUse,
  type CpuUse,
  turns,
  machineLoad,
  type MachineLoad,
  metricsOf,
  type RelayLag,
  relayLag,
  RunDatabase,
  type Spread,
  spread,
  sqliteEvents,
  startReplica,
  transactions,
} from './cluster-pg';
import { interleavedDelivery, sendOpenLoop } from '../rigs/deliveries';
import type { ReceiverRun } from './protocol';
import { metric } from '../rigs/harness';
import type { LocalPostgres } from '../rigs/local-postgres';

/**
 * Rows 2, 4 and 5 of the cluster figures (cluster.ts): a fixed rate, open loop, against one replica
 * or round-robin over three; relay lag and 200 → proposal updated in PostgreSQL. The sender runs in a
 * child of its own (this file, `pace`), so the directing process's event loop stays out of the timing.
 */

export interface RateRun {
  rate: number;
  /** Replicas the deliveries went to, in turn (1: row 4; 3: row 5, the hold-back across replicas). */
  replicas: number;
  /** Transitions recorded as not applied: each delivery is the next step of its proposal, so 0 unless out of order. */
  lateTransitions: number;
  /**
   * Deliveries sent before the previous event of their proposal was answered (the sender is open
   * loop): their order against it is the replicas' arrival order, not the sender's.
   */
  overlapping: number;
  /** consig_relay_late_total summed over the replicas: deliveries relayed below the watermark. */
  relayedLate: number;
  durationMs: number;
  /** Measured deliveries (after the warm-up), and their 200s. */
  sent: number;
  ok200: number;
  /** 200s of the whole run (warm-up included), events in PostgreSQL, in the spool, done, transitions. */
  ok200All: number;
  pgEvents: number;
  sqliteEvents: number;
  done: number;
  transitions: number;
  /** Measured 200s found in PostgreSQL with their transition (must equal ok200). */
  matched: number;
  maxLagMs: number;
  answer: Spread;
  relay: RelayLag;
  /** 200 → commit of the event's transition; 200 → proposal_transitions.at. */
  endToEnd: Spread;
  endToEndAt: Spread;
  /** 200 → relay commit; relay commit → the turn ran the event; the event → its commit (p50/p99). */
  parts: { toRelay: Spread; toTurn: Spread; toCommit: Spread };
  /** Turn jobs completed and processing transactions, for the events of the run. */
  turns: number;
  transactions: number;
  /** From the first delivery sent to every event processed, per delivery. */
  cpu: CpuUse;
  machine: MachineLoad;
}

// ---------------------------------------------------------------------------------------------
// 2 and 4. A fixed rate, open loop: relay lag and 200 → proposal updated in PostgreSQL

interface PaceSpec {
  /** Delivery i goes to ports[i % ports.length] (a round-robin load balancer). */
  ports: number[];
  secret: string;
  rate: number;
  warmupMs: number;
  durationMs: number;
}

interface PaceResult {
  ids: string[];
  /** Per delivery: HTTP status (0: no answer), and when the answer arrived (epoch ms, this machine's clock). */
  status: number[];
  answeredAtMs: number[];
  answerMs: number[];
  warm: number;
  maxLagMs: number;
}

export async function rateRun(
  h: ClusterHarness,
  pg: LocalPostgres,
  o: ClusterBenchOptions,
  errors: string[],
  replicaCount = 1,
): Promise<RateRun> {
  const db = await RunDatabase.create(pg, replicaCount === 1 ? 'rate' : `rate_across_${replicaCount}`);
  try {
    const replicas: ReceiverRun[] = [];
    let paced: PaceResult;
    let metricsText: string;
    let cpu: CpuUse;
    let relayedLate = 0;
    try {
      for (let i = 0; i < replicaCount; i++)
        replicas.push(await startReplica(h, db, i === 0 ? {} : { REPLICA_ID: `${db.name}_${i}` }));
      const before = cpuSnapshot(replicas, pg);
      paced = await pace(h, {
        ports: replicas.map((r) => r.port),
        secret: h.webhookSecret,
        rate: o.rate,
        warmupMs: o.warmupMs,
        durationMs: o.rateMs,
      });
      for (const r of replicas) await caughtUp(db, r, 120_000);
      cpu = cpuUse(before, cpuSnapshot(replicas, pg), paced.ids.length);
      metricsText = await metricsOf((replicas[0] as ReceiverRun).port);
      for (const r of replicas)
        relayedLate += metric(await metricsOf(r.port), 'consig_relay_late_total') ?? 0;
    } finally {
      for (const r of replicas) await r.stop();
    }
    const run = await rateFigures(db, o, paced, {
      metricsText,
      spoolEvents: replicas.reduce((n, r) => n + sqliteEvents(r.dbPath), 0),
      cpu,
      replicas: replicaCount,
      relayedLate,
    });
    checkRate(run, errors);
    return run;
  } finally {
    await db.drop();
  }
}

/** Runs the open-loop sender in a child of its own (this process's event loop stays out of the timing). */
async function pace(h: ClusterHarness, spec: PaceSpec): Promise<PaceResult> {
  const child = h.track(
    fork(join(__dirname, 'cluster-rate.js'), ['pace'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  try {
    return await new Promise<PaceResult>((done, fail) => {
      const timer = setTimeout(
        () => fail(new Error('cluster pacer: no result in time')),
        spec.warmupMs + spec.durationMs + 60_000,
      );
      child.once('message', (m: { result?: PaceResult; error?: string }) => {
        clearTimeout(timer);
        if (m.result !== undefined) done(m.result);
        else fail(new Error(`cluster pacer: ${m.error}`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        fail(new Error(`cluster pacer exited (${code}) without a result`));
      });
      child.send(spec);
    });
  } finally {
    await h.stopChild(child);
  }
}

interface DeliveryRow {
  dedup_key: string;
  status: string;
  received_ms: string;
  relayed_ms: string;
  at_ms: string | null;
  committed_ms: string | null;
}

async function rateFigures(
  db: RunDatabase,
  o: ClusterBenchOptions,
  p: PaceResult,
  after: { metricsText: string; spoolEvents: number; cpu: CpuUse; replicas: number; relayedLate: number },
): Promise<RateRun> {
  const rows = await db.pool.query<DeliveryRow>(
    `SELECT e.dedup_key, e.status,
       extract(epoch FROM d.received_at) * 1000 AS received_ms,
       extract(epoch FROM pg_xact_commit_timestamp(d.xmin)) * 1000 AS relayed_ms,
       extract(epoch FROM t.at) * 1000 AS at_ms,
       extract(epoch FROM pg_xact_commit_timestamp(t.xmin)) * 1000 AS committed_ms
     FROM events e JOIN deliveries d ON d.event_id = e.id AND d.outcome = 'accepted'
     LEFT JOIN proposal_transitions t ON t.event_id = e.id`,
  );
  const byKey = new Map(rows.rows.map((r) => [r.dedup_key, r]));
  const series = { toRelay: [] as number[], toTurn: [] as number[], toCommit: [] as number[] };
  const e2e: number[] = [];
  const e2eAt: number[] = [];
  const answers: number[] = [];
  let ok200 = 0;
  for (let i = p.warm; i < p.ids.length; i++) {
    if (p.status[i] !== 200) continue;
    ok200 += 1;
    answers.push(p.answerMs[i] as number);
    const r = byKey.get(p.ids[i] as string);
    if (r === undefined || r.at_ms === null || r.committed_ms === null) continue;
    const answered = p.answeredAtMs[i] as number;
    const [relayed, at, committed] = [Number(r.relayed_ms), Number(r.at_ms), Number(r.committed_ms)];
    e2e.push(committed - answered);
    e2eAt.push(at - answered);
    series.toRelay.push(relayed - answered);
    series.toTurn.push(at - relayed);
    series.toCommit.push(committed - at);
  }
  return {
    rate: o.rate,
    replicas: after.replicas,
    lateTransitions: await db.count('SELECT count(*) AS n FROM proposal_transitions WHERE NOT applied'),
    overlapping: overlapping(p),
    relayedLate: after.relayedLate,
    durationMs: o.rateMs,
    sent: p.ids.length - p.warm,
    ok200,
    ok200All: p.status.filter((s) => s === 200).length,
    pgEvents: await db.count('SELECT count(*) AS n FROM events'),
    sqliteEvents: after.spoolEvents,
    done: await db.count("SELECT count(*) AS n FROM events WHERE status = 'done'"),
    transitions: await db.count('SELECT count(*) AS n FROM proposal_transitions'),
    matched: e2e.length,
    maxLagMs: p.maxLagMs,
    answer: spread(answers),
    relay: await relayLag(db, after.metricsText),
    endToEnd: spread(e2e),
    endToEndAt: spread(e2eAt),
    parts: {
      toRelay: spread(series.toRelay),
      toTurn: spread(series.toTurn),
      toCommit: spread(series.toCommit),
    },
    turns: await turns(db),
    transactions: await transactions(db),
    cpu: after.cpu,
    machine: machineLoad(),
  };
}

export function rateOk(r: RateRun): boolean {
  return (
    r.ok200 === r.sent &&
    r.pgEvents === r.ok200All &&
    r.sqliteEvents === r.ok200All &&
    r.done === r.pgEvents &&
    r.transitions === r.pgEvents &&
    r.matched === r.ok200
  );
}

function checkRate(r: RateRun, errors: string[]): void {
  if (!rateOk(r))
    errors.push(
      `cluster fixed rate: ${r.sent} measured deliveries sent, ${r.ok200} answered 200 (${r.ok200All} in the whole run); ` +
        `events: ${r.pgEvents} in PostgreSQL, ${r.sqliteEvents} in the spool, ${r.done} done, ${r.transitions} transitions; ` +
        `${r.matched} measured 200s found with their transition`,
    );
}

// ---------------------------------------------------------------------------------------------
// The child: the open-loop sender of the fixed-rate run

/** Deliveries sent before the 200 of their proposal's previous event (50 deliveries earlier, see paceDelivery). */
function overlapping(p: PaceResult): number {
  let n = 0;
  for (let i = 50; i < p.ids.length; i++) {
    if (Math.floor(i / (HAPPY_PATH.length * 50)) !== Math.floor((i - 50) / (HAPPY_PATH.length * 50)))
      continue;
    const sentAt = (p.answeredAtMs[i] as number) - (p.answerMs[i] as number);
    if (!(sentAt >= (p.answeredAtMs[i - 50] as number))) n += 1;
  }
  return n;
}

/** Open loop, delivery i to ports[i mod ports]: proposals through the happy path, 50 at a time interleaved. */
async function runPace(spec: PaceSpec): Promise<PaceResult> {
  const warm = Math.round((spec.rate * spec.warmupMs) / 1000);
  const total = warm + Math.round((spec.rate * spec.durationMs) / 1000);
  const o = { flow: HAPPY_PATH, atOnce: 50, nuBase: 5_000_000, idPrefix: 'wh_rate_', secret: spec.secret };
  const items = Array.from({ length: total }, (_, i) => interleavedDelivery(i, o));
  const result: PaceResult = {
    ids: items.map((it) => it.id),
    status: new Array<number>(total).fill(0),
    answeredAtMs: new Array<number>(total).fill(Number.NaN),
    answerMs: new Array<number>(total).fill(Number.NaN),
    warm,
    maxLagMs: 0,
  };
  result.maxLagMs = await sendOpenLoop(spec, items, (i, status, sentAt, answeredAt) => {
    result.status[i] = status;
    result.answeredAtMs[i] = performance.timeOrigin + answeredAt;
    result.answerMs[i] = answeredAt - sentAt;
  });
  return result;
}

function childMain(): void {
  process.once('message', (spec: PaceSpec) => {
    runPace(spec).then(
      (result) => process.send?.({ result }),
      (err: unknown) => process.send?.({ error: err instanceof Error ? err.message : String(err) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
}

if (require.main === module && process.argv[2] === 'pace') childMain();
