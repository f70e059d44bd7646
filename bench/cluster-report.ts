import { HAPPY_PATH } from '../src/domain/lifecycle';
import {
  CLUSTER_DRAIN_TARGET,
  CLUSTER_INGEST_TARGET,
  type ClusterFigures,
  drainOk,
  type IngestMode,
  ingestOk,
  type IngestRun,
} from './cluster';
import type { ClusterBenchOptions } from './protocol';
import { type CpuUse, type MachineLoad, PG_SETTINGS, type RelayLag, type Spread } from './cluster-pg';
import { type RateRun, rateOk } from './cluster-rate';
import { medianBy } from '../rigs/harness';

/** The cluster figures' printed report (run.ts). */

// ---------------------------------------------------------------------------------------------
// Report

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : 1) : '-');
const spreadText = (s: Spread) => `p50 ${ms(s.p50Ms)} ms, p99 ${ms(s.p99Ms)} ms, max ${ms(s.maxMs)} ms`;
const loadText = (m: MachineLoad) => `load average ${m.load1.toFixed(1)} on ${m.cores} cores`;
const met = (ok: boolean) => (ok ? 'MET' : 'MISSED');

const ROW1_LABEL: Record<IngestMode, string> = {
  sqlite: 'SQLite mode',
  cluster: 'cluster mode',
  'ingest-only': 'ingest-only',
};

/** Each cluster mode's req/s over the SQLite mode's of the same round, round by round. */
function roundRatios(runs: readonly IngestRun[], mode: IngestMode): string {
  const out: string[] = [];
  for (const r of runs.filter((x) => x.mode === mode)) {
    const s = runs.find((x) => x.mode === 'sqlite' && x.round === r.round);
    if (s !== undefined && s.load.rps > 0) out.push((r.load.rps / s.load.rps).toFixed(2));
  }
  return out.join(', ');
}

function ingestReport(f: ClusterFigures, o: ClusterBenchOptions): string[] {
  const of = (mode: IngestMode) => f.ingest.filter((r) => r.mode === mode);
  const s = medianBy(of('sqlite'), (r) => r.load.rps);
  if (s === undefined) return ['1. ingest per replica: not run'];
  const runs = (mode: IngestMode) =>
    of(mode)
      .map((r) => `${r.load.rps.toFixed(0)} (${r.busyCores === null ? '-' : r.busyCores.toFixed(2)})`)
      .join(', ');
  const loads = f.ingest.map((r) => r.machine.load1);
  const checks = (rs: IngestRun[]) => (rs.every(ingestOk) ? 'ok' : 'MISMATCH');
  const cpu = (n: number | null) => (n === null ? '-' : n.toFixed(0));
  const out = [
    `1. ingest per replica, cluster mode / SQLite mode: load.ts (signed unique deliveries), c=${o.concurrency}, ` +
      `warm-up ${o.warmupMs / 1000} s + ${o.durationMs / 1000} s measured, ${o.rounds} rounds alternating (ABC CBA), ` +
      `median req/s of each mode; CPU per 200 over the load (warm-up included); ` +
      `each run's req/s with, in brackets, the cores the whole machine kept busy meanwhile`,
    `   SQLite mode   ${s.load.rps.toFixed(0).padStart(6)} req/s (runs ${runs('sqlite')}); p50 ${ms(s.load.p50Ms)} ms, p99 ${ms(s.load.p99Ms)} ms; ` +
      `receiver CPU ${cpu(s.cpuUsPerReq)} µs/req; rows/200s ${checks(of('sqlite'))}`,
  ];
  const targets: string[] = [];
  for (const mode of ['cluster', 'ingest-only'] as const) {
    const c = medianBy(of(mode), (r) => r.load.rps);
    if (c === undefined) continue;
    const ratio = c.load.rps / s.load.rps;
    const catchUp = of(mode).map((r) => ((r.catchUpMs ?? 0) / 1000).toFixed(1));
    const processed = of(mode).map((r) => cpu(r.processedPerSecond));
    const beside =
      mode === 'cluster'
        ? 'the relay and the turn workers run beside the load'
        : 'CLUSTER_CONCURRENCY=0: the relay alone runs beside the load';
    const after =
      mode === 'cluster'
        ? `processing (one turn per event: each delivery of load.ts is a new proposal) ran ${processed.join(', ')} events/s ` +
          `from the first event done to the last, and caught up ${catchUp.join(', ')} s after each load`
        : `events processed before a replica with workers started: ${of(mode)
            .map((r) => r.doneBeforeProcessing ?? '-')
            .join(
              ', ',
            )} (must be 0); that replica (CLUSTER_CONCURRENCY 4, started once the relay had caught up) ` +
          `processed ${processed.join(', ')} events/s, every event done ${catchUp.join(', ')} s after each load`;
    out.push(
      `   ${ROW1_LABEL[mode].padEnd(13)} ${c.load.rps.toFixed(0).padStart(6)} req/s (runs ${runs(mode)}); p50 ${ms(c.load.p50Ms)} ms, p99 ${ms(c.load.p99Ms)} ms; ` +
        `replica CPU ${cpu(c.cpuUsPerReq)} µs/req + PostgreSQL ${cpu(c.pgCpuUsPerReq)} µs/req (${beside}); ` +
        `ratio ${ratio.toFixed(3)}× (per round: ${roundRatios(f.ingest, mode)})`,
      `     checks: every 200 one event in the spool and in PostgreSQL, all done: ${checks(of(mode))} ` +
        `(median run: ${c.load.ok200Total} 200s, ${c.sqliteEvents} spooled, ${c.pgEvents} in PostgreSQL, ${c.pgDone} done); ${after}`,
    );
    targets.push(
      `target "ingest per replica in cluster mode ≥ ${CLUSTER_INGEST_TARGET}× SQLite mode", ${ROW1_LABEL[mode]}: ` +
        `${met(ratio >= CLUSTER_INGEST_TARGET)} (${ratio.toFixed(3)}×)`,
    );
  }
  out.push(
    `   load average ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)} on ${s.machine.cores} cores; ` +
      (f.ingestLayout === null
        ? 'every run on every core (the receiver, PostgreSQL and the load generator share them)'
        : `the receiver under load and the load generator on core ${f.ingestLayout.replica}, PostgreSQL and the ` +
          `ingest-only run's processing replica on cores ${f.ingestLayout.rest} (taskset): a replica on a machine ` +
          'of its own, PostgreSQL elsewhere; --cluster-share-cores runs them unpinned'),
    ...targets,
  );
  return out;
}

function cpuText(c: CpuUse, unit: string, m: MachineLoad): string {
  const us = (n: number | null) => (n === null ? '-' : n.toFixed(0));
  return (
    `CPU per ${unit}: replica ${us(c.replicaUs)} µs, PostgreSQL ${us(c.postgresUs)} µs; machine busy ` +
    `${c.busyCores === null ? '-' : c.busyCores.toFixed(2)} of ${m.cores} cores; ${loadText(m)}`
  );
}

function lagText(r: RelayLag): string {
  const hist =
    r.histogram === null
      ? 'no histogram'
      : `replica histogram: p50 ≤ ${r.histogram.p50Le} s, p99 ≤ ${r.histogram.p99Le} s, mean ${ms(r.histogram.meanMs)} ms over ${r.histogram.count}`;
  return (
    `${spreadText(r)} over ${r.n} deliveries in ${r.batches} batches (${(r.n / Math.max(1, r.batches)).toFixed(0)} rows/batch); ` +
    `to the batch's start (relayed_at): p50 ${ms(r.startP50Ms)}, p99 ${ms(r.startP99Ms)} ms; ${hist}`
  );
}

function relayReport(f: ClusterFigures): string[] {
  const at = (mode: IngestMode) => {
    const c = medianBy(
      f.ingest.filter((r) => r.mode === mode),
      (r) => r.load.rps,
    );
    return c?.relay == null
      ? `   at the load of row 1, ${ROW1_LABEL[mode]}: not run`
      : `   at the load of row 1 (median ${ROW1_LABEL[mode]} round, ${c.load.rps.toFixed(0)} req/s): ${lagText(c.relay)}; ${loadText(c.machine)}`;
  };
  return [
    `2. relay lag: a delivery's receipt at the replica (deliveries.received_at) → commit of its relay batch in PostgreSQL ` +
      `(pg_xact_commit_timestamp of its row), every delivery of the run`,
    at('cluster'),
    at('ingest-only'),
    `   at ${f.rate.rate} deliveries/s (open loop, the run of row 4): ${lagText(f.rate.relay)}; ${loadText(f.rate.machine)}`,
  ];
}

function drainReport(f: ClusterFigures, o: ClusterBenchOptions): string[] {
  const d0 = f.drains[0];
  if (d0 === undefined) return ['3. processing throughput: not run'];
  const out = [
    `3. processing throughput on PostgreSQL: ${d0.events} pending life-cycle events (${d0.proposals} proposals × ${HAPPY_PATH.length} ` +
      `steps, interleaved), written with SQL in transactions of 2 000 with one turn per proposal queued through the real engine ` +
      `(src/postgres/pg-queues.ts) before the replica started (written in ${d0.prefillSeconds.toFixed(1)} s, not timed); one replica ` +
      `(\`serve\`) drains them; timed from the first event's processed_at to the last processing commit`,
  ];
  for (const d of f.drains) {
    out.push(
      `   CLUSTER_CONCURRENCY=${d.concurrency}: ${Math.round(d.eventsPerSecond)} events/s (${d.seconds.toFixed(2)} s); ` +
        `${d.done}/${d.events} done, ${d.transitions} transitions, ${d.orderViolations} out of order ${drainOk(d, o.drainEvents) ? 'ok' : 'MISMATCH'}; ` +
        `${d.turns} turns (${(d.events / Math.max(1, d.turns)).toFixed(1)} events each) in ${d.transactions} transactions ` +
        `(${(d.events / Math.max(1, d.transactions)).toFixed(1)} events each); ${cpuText(d.cpu, 'event', d.machine)}`,
    );
  }
  const s = f.sqliteDrain;
  if (s !== null)
    out.push(
      `   baseline, SQLite pipeline (bench/pipeline-drain.ts, same count, consecutive per proposal, in this process): ` +
        `${Math.round(s.eventsPerSecond)} events/s (${s.drainSeconds.toFixed(2)} s); ${s.done}/${s.events} done ` +
        `${s.done === s.events && s.transitions === s.events ? 'ok' : 'MISMATCH'}; ${loadText(s.machine)}`,
    );
  const best = Math.max(...f.drains.map((d) => d.eventsPerSecond));
  out.push(
    `target "processing on PostgreSQL ≥ ${CLUSTER_DRAIN_TARGET} events/s": ${met(best >= CLUSTER_DRAIN_TARGET)} (best ${Math.round(best)} events/s)`,
  );
  return out;
}

function endToEndReport(r: RateRun, row = 4): string[] {
  const where =
    r.replicas === 1
      ? 'one replica'
      : `${r.replicas} replicas, delivery i to replica i mod ${r.replicas} (a round-robin load balancer: a proposal's ` +
        `consecutive events, 50 deliveries apart, reach different replicas), processed in the order acknowledged: the hold-back ` +
        `window (each event waits until every relay has moved past it, docs/cluster.md §10); ${r.lateTransitions} transitions ` +
        `recorded out of order, with ${r.overlapping} deliveries sent before their proposal's previous event was answered ` +
        `(open loop: those are ordered by arrival) and ${r.relayedLate} relayed below the watermark`;
  return [
    `${row}. end to end, 200 → the proposal's row updated in PostgreSQL: ${r.rate} signed deliveries/s open-loop for ${r.durationMs / 1000} s ` +
      `(${HAPPY_PATH.length} life-cycle steps per proposal, 50 proposals interleaved), ${where}; the sender's clock (200 received) ` +
      `against PostgreSQL's (same machine)`,
    `   to the commit of its proposal_transitions row: ${spreadText(r.endToEnd)} over ${r.matched}/${r.ok200} deliveries`,
    `   to proposal_transitions.at (= proposals.updated_at; the turn's clock as it ran the event): ${spreadText(r.endToEndAt)}`,
    `   parts, p50 / p99: 200 → relay commit ${ms(r.parts.toRelay.p50Ms)} / ${ms(r.parts.toRelay.p99Ms)} ms; relay commit → turn runs ` +
      `the event (pg-boss NOTIFY, fetch) ${ms(r.parts.toTurn.p50Ms)} / ${ms(r.parts.toTurn.p99Ms)} ms; event → its commit ` +
      `${ms(r.parts.toCommit.p50Ms)} / ${ms(r.parts.toCommit.p99Ms)} ms`,
    `   webhook answer ${spreadText(r.answer)}; sender lag ≤ ${r.maxLagMs.toFixed(1)} ms; checks: ${r.ok200}/${r.sent} answered 200, ` +
      `${r.pgEvents} events in PostgreSQL and ${r.sqliteEvents} in the spool for ${r.ok200All} 200s, ${r.done} done, ` +
      `${r.transitions} transitions ${rateOk(r) ? 'ok' : 'MISMATCH'}`,
    `   processing: ${r.turns} turns (${(r.pgEvents / Math.max(1, r.turns)).toFixed(1)} events each) in ${r.transactions} ` +
      `transactions (${(r.turns / Math.max(1, r.transactions)).toFixed(1)} turns each); from the first send to every event ` +
      `processed, ${cpuText(r.cpu, 'delivery', r.machine)}`,
  ];
}

/** The section's text: each row, how it was measured, its checks and the machine's load. */
export function clusterReport(f: ClusterFigures, o: ClusterBenchOptions): string {
  return [
    `cluster mode (issue 13): ${f.postgres} on this machine (initdb + pg_ctl, durable: fsync, synchronous_commit and ` +
      `full_page_writes on; shared_buffers ${PG_SETTINGS.shared_buffers}, track_commit_timestamp on), a fresh database per run; ` +
      `replicas are \`serve\` with DATABASE_URL (SQLITE_SYNCHRONOUS=FULL spool, defaults otherwise: RELAY_BATCH 1000, ` +
      `CLUSTER_CONCURRENCY 4)`,
    ...ingestReport(f, o),
    '',
    ...relayReport(f),
    '',
    ...drainReport(f, o),
    '',
    ...endToEndReport(f.rate),
    ...(f.rateAcross === null ? [] : ['', ...endToEndReport(f.rateAcross, 5)]),
  ].join('\n');
}
