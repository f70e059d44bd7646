import { resolve } from 'node:path';
import { Client } from 'pg';
import { startEngine } from '../src/postgres/pg-queues';
import { migratePostgres } from '../src/postgres/pg-migrate';
import { workKeyOf } from '../src/domain/work-key';
import { sqlOf } from '../src/postgres/pg-sql';
import { HAPPY_PATH } from '../src/domain/lifecycle';
import {
  busyCores,
  caughtUp,
  cpuSnapshot,
  cpuUse,
  type CpuSnapshot,
  turns,
  type CpuUse,
  type Layout,
  layoutOf,
  machineJiffies,
  machineLoad,
  type MachineLoad,
  metricsOf,
  PG_SETTINGS,
  postgresCpu,
  postgresPids,
  type RelayLag,
  relayed,
  relayLag,
  RunDatabase,
  sqliteEvents,
  startReplica,
  transactions,
} from './cluster-pg';
import { type RateRun, rateRun } from './cluster-rate';
import type { ReceiverRun, ClusterBenchOptions, ClusterHarness } from './protocol';
import { cpuMicros, fixed, pinToCpus, until } from '../rigs/harness';
import { type LocalPostgres, startLocalPostgres } from '../rigs/local-postgres';
import { type DrainResult, runPipelineDrain } from './pipeline-drain';
import type { LoadResult } from './protocol';

/**
 * Cluster-mode figures (issue 13), run by run.ts (`--only cluster`):
 *
 * 1. ingest per replica: the load generator of the HTTP rows (load.ts, c=50) against the receiver
 *    in SQLite mode, against one replica in cluster mode (`serve` with DATABASE_URL: its own
 *    SQLite spool, the relay and the turn workers running, PostgreSQL on this machine), and against
 *    an ingest-only replica (CLUSTER_CONCURRENCY=0: the relay only; once the load is over, a
 *    replica with workers starts and processes the backlog, so that the same checks hold),
 *    alternating (ABC CBA), the median of each; the ratio's target is ≥ 0.9. On 2 cores or more,
 *    the receiver under load and the load generator run on core 0 and PostgreSQL on the others
 *    ({@link Layout}; `--cluster-share-cores` unpins);
 * 2. relay lag, from a delivery's receipt at the replica to the commit of the relay's batch in
 *    PostgreSQL, computed per delivery from PostgreSQL (the commit timestamp of its `deliveries`
 *    row), at the load of row 1 and at a fixed rate (open loop);
 * 3. processing throughput: pending life-cycle events written with SQL and one turn per work key
 *    queued through the real engine (src/postgres/pg-queues.ts) before the replica starts, then timed
 *    while one replica drains them (target ≥ 2 000 events/s), with the SQLite pipeline's drain of
 *    the same count as the baseline;
 * 4. end to end: for each delivery of the fixed-rate run, from its 200 at the sender to the commit
 *    that recorded its transition in PostgreSQL (`proposal_transitions`, the row that moves
 *    `proposals`), and to `proposal_transitions.at`; one machine, one clock;
 * 5. the same at the same rate over three replicas, delivery i to replica i mod 3 (a round-robin load
 *    balancer): what the hold-back window adds (docs/cluster.md §10), with the transitions recorded
 *    out of order counted (must be 0).
 *
 * PostgreSQL is a throwaway server on the machine's binaries (rigs/local-postgres.ts) with
 * its durable defaults (fsync, synchronous_commit and full_page_writes on: not `fast`), plus
 * `track_commit_timestamp`, which rows 2–4 read; each run gets a fresh database. Every run is
 * checked: each 200 is one event in PostgreSQL (and in the spool), and every event is done at the
 * end, with one transition each.
 *
 * Row 3 also runs alone, as an A/B of builds (`npm run bench -- --baseline <rev>`: drainBuilds, at
 * the end of this file): alternating rounds, with the CPU per event of the replica and of PostgreSQL
 * (steadier than events/s on a shared machine).
 */

// ---------------------------------------------------------------------------------------------
// What run.ts lends this module, and what it asks of it

/** Processing target of issue 13, events/s on PostgreSQL. */
export const CLUSTER_DRAIN_TARGET = 2000;
/** Ingest in cluster mode over SQLite mode, per replica. */
export const CLUSTER_INGEST_TARGET = 0.9;

// ---------------------------------------------------------------------------------------------
// Results

/**
 * Row 1's modes: the receiver on SQLite alone; a cluster replica with its turn workers
 * (CLUSTER_CONCURRENCY 4); an ingest-only cluster replica (CLUSTER_CONCURRENCY=0).
 */
export type IngestMode = 'sqlite' | 'cluster' | 'ingest-only';

export interface IngestRun {
  mode: IngestMode;
  round: number;
  load: LoadResult;
  /** Server CPU per 200 (user + system, all threads, warm-up included), µs. */
  cpuUsPerReq: number | null;
  /** Cluster: PostgreSQL's CPU (all its processes) per 200 over the same window, µs. */
  pgCpuUsPerReq: number | null;
  /**
   * Cores the whole machine kept busy over the load: the server, PostgreSQL, the load generator, and
   * any neighbour's job (a figure well above theirs says the round was disturbed).
   */
  busyCores: number | null;
  /** Events in the SQLite file (the spool, in cluster mode) after the run. */
  sqliteEvents: number;
  /** Cluster only: events in PostgreSQL, and how many of them are done. */
  pgEvents: number | null;
  pgDone: number | null;
  /**
   * Ingest-only: events processed (or tried) once its relay had caught up, before a replica with
   * workers started; 0 unless the replica processed.
   */
  doneBeforeProcessing: number | null;
  /**
   * Cluster only: from the end of the load to the relay caught up and every event done (ingest-only:
   * the processing replica's start-up included).
   */
  catchUpMs: number | null;
  /** Cluster only: events processed per second, from the first event done to the last. */
  processedPerSecond: number | null;
  relay: RelayLag | null;
  machine: MachineLoad;
}

export interface DrainRun {
  concurrency: number;
  events: number;
  proposals: number;
  prefillSeconds: number;
  /** First event's processed_at to the last processing commit. */
  seconds: number;
  eventsPerSecond: number;
  done: number;
  transitions: number;
  orderViolations: number;
  /** Turn jobs completed, and processing transactions (each takes a batch of up to 8 turns). */
  turns: number;
  transactions: number;
  /** CPU per event while draining, and the machine's busy cores (everyone's). */
  cpu: CpuUse;
  machine: MachineLoad;
}

export interface ClusterFigures {
  postgres: string;
  ingest: IngestRun[];
  /** Row 1's cores (null: every run on every core). */
  ingestLayout: Layout | null;
  rate: RateRun;
  /** Row 5: the fixed rate round-robin over three replicas (the hold-back window at work). */
  rateAcross: RateRun | null;
  drains: DrainRun[];
  sqliteDrain: (DrainResult & { machine: MachineLoad }) | null;
}

// ---------------------------------------------------------------------------------------------
// 1 (and 2 at its load). Ingest per replica: SQLite mode and cluster mode, alternating

async function ingestSqlite(
  h: ClusterHarness,
  o: ClusterBenchOptions,
  round: number,
  layout: Layout | null,
): Promise<IngestRun> {
  const receiver = await h.startReceiver(`sqlite-ingest-${round}`, {});
  if (layout !== null) pinToCpus([receiver.pid], layout.replica);
  let load: LoadResult;
  let cpuUsPerReq: number | null = null;
  let busy: number | null = null;
  try {
    const before = { node: cpuMicros(receiver.pid), machine: machineJiffies() };
    load = await h.runLoad({
      ...ingestSpec(o, layout),
      port: receiver.port,
      idPrefix: `sqlite${round}`,
    });
    const after = { node: cpuMicros(receiver.pid), machine: machineJiffies() };
    if (before.node !== null && after.node !== null && load.ok200Total > 0)
      cpuUsPerReq = (after.node - before.node) / load.ok200Total;
    busy = busyCores(before.machine, after.machine);
    if (!receiver.alive()) throw new Error(`SQLite ingest round ${round}: the receiver died`);
  } finally {
    await receiver.stop();
  }
  return {
    mode: 'sqlite',
    round,
    load,
    cpuUsPerReq,
    pgCpuUsPerReq: null,
    busyCores: busy,
    sqliteEvents: sqliteEvents(receiver.dbPath),
    pgEvents: null,
    pgDone: null,
    doneBeforeProcessing: null,
    catchUpMs: null,
    processedPerSecond: null,
    relay: null,
    machine: machineLoad(),
  };
}

function ingestSpec(o: ClusterBenchOptions, layout: Layout | null) {
  return {
    concurrency: o.concurrency,
    warmupMs: o.warmupMs,
    durationMs: o.durationMs,
    ...(layout === null ? {} : { cpus: layout.replica }),
  };
}

/**
 * One cluster round of row 1: the load against one replica on a fresh database, then every event
 * processed. In `ingest-only` mode the replica runs with CLUSTER_CONCURRENCY=0; once its relay has
 * caught up (and nothing was processed), a second replica with workers starts and drains the backlog.
 * CPU is counted over the load only, for the replica under load and for PostgreSQL.
 */
async function ingestCluster(
  h: ClusterHarness,
  pg: LocalPostgres,
  o: ClusterBenchOptions,
  round: number,
  mode: Exclude<IngestMode, 'sqlite'>,
  layout: Layout | null,
): Promise<IngestRun> {
  const db = await RunDatabase.create(pg, mode === 'cluster' ? `ingest_${round}` : `ingest_only_${round}`);
  try {
    const replica = await startReplica(h, db, mode === 'ingest-only' ? { CLUSTER_CONCURRENCY: '0' } : {});
    if (layout !== null) pinToCpus([replica.pid], layout.replica);
    let worker: ReceiverRun | null = null;
    let run: Omit<IngestRun, 'sqliteEvents' | 'machine'>;
    try {
      const before = { node: cpuMicros(replica.pid), pg: postgresCpu(pg), machine: machineJiffies() };
      const load = await h.runLoad({
        ...ingestSpec(o, layout),
        port: replica.port,
        idPrefix: `${mode}${round}`,
      });
      const after = { node: cpuMicros(replica.pid), pg: postgresCpu(pg), machine: machineJiffies() };
      const loadEnd = performance.now();
      const per = (a: number | null, b: number | null) =>
        a === null || b === null || load.ok200Total === 0 ? null : (b - a) / load.ok200Total;
      const timeoutMs = Math.max(120_000, load.ok200Total * 20);
      let doneBeforeProcessing: number | null = null;
      if (mode === 'ingest-only') {
        await relayed(db, replica, timeoutMs);
        doneBeforeProcessing = await db.count(
          "SELECT count(*) AS n FROM events WHERE status IN ('done', 'failed', 'dead')",
        );
        worker = await startReplica(h, db, { REPLICA_ID: `${db.name}_worker` });
        if (layout !== null) pinToCpus([worker.pid], layout.rest);
      }
      // Processing runs behind the load; the checks need it finished (and the next run an idle machine).
      await caughtUp(db, worker ?? replica, timeoutMs);
      const catchUpMs = performance.now() - loadEnd;
      const metrics = await metricsOf(replica.port);
      run = {
        mode,
        round,
        load,
        cpuUsPerReq: per(before.node, after.node),
        pgCpuUsPerReq: per(before.pg, after.pg),
        busyCores: busyCores(before.machine, after.machine),
        pgEvents: await db.count('SELECT count(*) AS n FROM events'),
        pgDone: await db.count("SELECT count(*) AS n FROM events WHERE status = 'done'"),
        doneBeforeProcessing,
        catchUpMs,
        processedPerSecond: await db.count(
          'SELECT count(*) / extract(epoch FROM max(processed_at) - min(processed_at)) AS n FROM events',
        ),
        relay: await relayLag(db, metrics),
      };
    } finally {
      await worker?.stop();
      await replica.stop();
    }
    return { ...run, sqliteEvents: sqliteEvents(replica.dbPath), machine: machineLoad() };
  } finally {
    await db.drop();
  }
}

function checkIngest(r: IngestRun, errors: string[]): void {
  const label = `cluster ingest, ${r.mode} mode, round ${r.round}`;
  const bad = Object.values(r.load.non200).reduce((a, b) => a + b, 0) + r.load.socketErrors;
  if (bad > 0)
    errors.push(
      `${label}: ${bad} requests without a 200 (${JSON.stringify(r.load.non200)}, socket errors ${r.load.socketErrors}); e.g. ${r.load.errorSamples.join(' | ')}`,
    );
  if (r.sqliteEvents !== r.load.ok200Total)
    errors.push(`${label}: ${r.sqliteEvents} events in SQLite but ${r.load.ok200Total} answers 200`);
  if (r.mode !== 'sqlite' && (r.pgEvents !== r.load.ok200Total || r.pgDone !== r.pgEvents))
    errors.push(
      `${label}: ${r.pgEvents} events in PostgreSQL for ${r.load.ok200Total} answers 200, ${r.pgDone} of them done`,
    );
  if (r.mode === 'ingest-only' && r.doneBeforeProcessing !== 0)
    errors.push(
      `${label}: ${r.doneBeforeProcessing} events processed before a replica with workers started (CLUSTER_CONCURRENCY=0 ignored?)`,
    );
}

/**
 * A cluster run is ok when every 200 is one event in PostgreSQL and in the spool, and all are done;
 * an ingest-only run, when besides none was processed before the replica with workers started.
 */
export function ingestOk(r: IngestRun): boolean {
  const n = r.load.ok200Total;
  return (
    r.sqliteEvents === n &&
    (r.mode === 'sqlite' || (r.pgEvents === n && r.pgDone === n)) &&
    (r.mode !== 'ingest-only' || r.doneBeforeProcessing === 0)
  );
}

// ---------------------------------------------------------------------------------------------
// 3. Processing throughput: a backlog in PostgreSQL drained by one replica

/** Events of `count`: proposals interleaved (event i is step ⌊i / P⌋ of proposal i mod P), as a relay writes a busy stream. */
function backlogEvent(
  i: number,
  proposals: number,
): { key: string; evento: string; nu: string; body: Buffer } {
  const nu = String(7_000_000 + (i % proposals));
  const evento = HAPPY_PATH[Math.floor(i / proposals)] as string;
  const key = `wh_drain_${i}`;
  const body = Buffer.from(
    JSON.stringify({
      evento,
      timestamp: '2026-11-21T10:00:00-03:00',
      dados: {
        nu_proposta: Number(nu),
        uuid: `00000000-0000-4000-8000-${nu.padStart(12, '0')}`,
        nu_cpf: '52998224725',
        nu_cnpj_conveniada: '11222333000181',
        st_proposta: evento.split('.')[1],
        vl_emprestimo: 15000.5,
        no_conveniada: 'Empresa Exemplo Ltda',
      },
      metadata: { tentativa: 1, webhook_id: key },
    }),
  );
  return { key, evento, nu, body };
}

/**
 * Writes `events` pending events and one turn per proposal, through the real engine, in
 * transactions of 2 000 (as relay batches would, without a replica running); returns the proposals.
 */
async function prefillBacklog(db: RunDatabase, events: number, migrationsDir?: string): Promise<number> {
  const proposals = Math.ceil(events / HAPPY_PATH.length);
  await migratePostgres(db.pool, migrationsDir === undefined ? {} : { dir: migrationsDir });
  const silent = { error: () => undefined, warn: () => undefined };
  const engine = await startEngine(db.url, { max: 2, logger: silent });
  const client = await db.pool.connect();
  try {
    for (let from = 0; from < events; from += 2000) {
      const batch = Array.from({ length: Math.min(2000, events - from) }, (_, j) =>
        backlogEvent(from + j, proposals),
      );
      await client.query('BEGIN');
      const rows = await client.query<{ id: string; nu_proposta: string | null; request_id: string | null }>(
        `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes, status)
         SELECT u.k, u.k, 'event', u.evento, u.nu, 1, now(), u.body, length(u.body), 'pending'
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS u(k, evento, nu, body)
         RETURNING id, nu_proposta, request_id`,
        [
          batch.map((e) => e.key),
          batch.map((e) => e.evento),
          batch.map((e) => e.nu),
          batch.map((e) => e.body),
        ],
      );
      await engine.queueTurns(sqlOf(client), [...new Set(rows.rows.map(workKeyOf))]);
      await client.query('COMMIT');
    }
  } finally {
    client.release();
    await engine.stop(5000);
  }
  // A running system has statistics (autovacuum); a table filled a second ago has none yet.
  await db.pool.query('ANALYZE events');
  return proposals;
}

/** Options of one drain beyond the section's (the A/B of builds, drainBuilds). */
interface DrainExtras {
  /** Another build's CLI (--baseline), and its migrations-pg for the prefill. @default this build's */
  bin?: string;
  migrationsDir?: string;
  /** Database name suffix, so that runs on one server do not collide. @default '' */
  suffix?: string;
}

async function drainRun(
  h: ClusterHarness,
  pg: LocalPostgres,
  o: Pick<ClusterBenchOptions, 'drainEvents'>,
  concurrency: number,
  extras: DrainExtras = {},
): Promise<DrainRun> {
  const db = await RunDatabase.create(pg, `drain_c${concurrency}${extras.suffix ?? ''}`);
  try {
    const t = performance.now();
    const proposals = await prefillBacklog(db, o.drainEvents, extras.migrationsDir);
    const prefillSeconds = (performance.now() - t) / 1000;
    const replica = await h.startReceiver(
      `cluster-${db.name}`,
      { DATABASE_URL: db.url, REPLICA_ID: db.name, CLUSTER_CONCURRENCY: String(concurrency) },
      undefined,
      extras.bin,
    );
    // CPU is counted from the first done event to the end (the replica's start-up left out).
    let first: CpuSnapshot;
    let doneAtFirst: number;
    let last: CpuSnapshot;
    try {
      await until(
        'drain: processing began',
        () => db.exists("SELECT 1 FROM events WHERE status = 'done'"),
        60_000,
        replica.alive,
        20,
      );
      first = cpuSnapshot(replica, pg);
      doneAtFirst = await db.count("SELECT count(*) AS n FROM events WHERE status = 'done'");
      await until(
        'drain: backlog processed',
        async () => !(await db.exists("SELECT 1 FROM events WHERE status IN ('pending', 'failed')")),
        Math.max(120_000, o.drainEvents * 20),
        replica.alive,
        100,
      );
      last = cpuSnapshot(replica, pg);
    } finally {
      await replica.stop();
    }
    const cpu = cpuUse(first, last, o.drainEvents - doneAtFirst);
    return await drainFigures(db, { concurrency, proposals, prefillSeconds, cpu });
  } finally {
    await db.drop();
  }
}

async function drainFigures(
  db: RunDatabase,
  run: { concurrency: number; proposals: number; prefillSeconds: number; cpu: CpuUse },
): Promise<DrainRun> {
  const span = await db.pool.query<{ seconds: string }>(
    `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - min(processed_at)) AS seconds FROM events`,
  );
  const seconds = Number(span.rows[0]?.seconds ?? Number.NaN);
  const events = await db.count('SELECT count(*) AS n FROM events');
  return {
    concurrency: run.concurrency,
    events,
    proposals: run.proposals,
    prefillSeconds: run.prefillSeconds,
    seconds,
    eventsPerSecond: events / seconds,
    done: await db.count("SELECT count(*) AS n FROM events WHERE status = 'done'"),
    transitions: await db.count('SELECT count(*) AS n FROM proposal_transitions'),
    orderViolations: await db.count(
      `SELECT count(*) AS n FROM (SELECT event_id < lag(event_id) OVER (PARTITION BY nu_proposta ORDER BY id) AS bad
       FROM proposal_transitions) t WHERE bad`,
    ),
    turns: await turns(db),
    transactions: await transactions(db),
    cpu: run.cpu,
    machine: machineLoad(),
  };
}

export function drainOk(d: DrainRun, events: number): boolean {
  return d.events === events && d.done === events && d.transitions === events && d.orderViolations === 0;
}

// ---------------------------------------------------------------------------------------------
// The section

/** Runs rows 1–4 (see the top of this file) on one throwaway PostgreSQL; checks go to `errors`. */
export async function runClusterFigures(
  h: ClusterHarness,
  o: ClusterBenchOptions,
  errors: string[],
): Promise<ClusterFigures> {
  o.log('bench: cluster: starting PostgreSQL (durable settings) ...');
  const pg = await startLocalPostgres({ settings: PG_SETTINGS });
  try {
    const version = await postgresVersion(pg);
    o.log(` ${version}\n`);
    const ingest: IngestRun[] = [];
    const layout = layoutOf(o);
    for (let round = 1; round <= o.rounds; round++) {
      // ABC CBA: over two rounds each mode has the same mean position (a machine warming up or a
      // neighbour's job starting favours none).
      const modes: IngestMode[] = ['sqlite', 'cluster', 'ingest-only'];
      if (round % 2 === 0) modes.reverse();
      for (const mode of modes) {
        o.log(`bench: cluster ingest, ${mode} mode, c=${o.concurrency}, round ${round}/${o.rounds} ...`);
        // PostgreSQL's processes forked since the last run (connections) are pinned too.
        if (layout !== null) pinToCpus(postgresPids(pg), layout.rest);
        const r =
          mode === 'sqlite'
            ? await ingestSqlite(h, o, round, layout)
            : await ingestCluster(h, pg, o, round, mode, layout);
        checkIngest(r, errors);
        ingest.push(r);
        o.log(
          ` ${r.load.rps.toFixed(0)} req/s${r.catchUpMs === null ? '' : `, caught up ${(r.catchUpMs / 1000).toFixed(1)} s after`}\n`,
        );
      }
    }
    // Rows 2-4 on every core, as before.
    if (layout !== null) pinToCpus(postgresPids(pg), layout.all);
    o.log(`bench: cluster fixed rate, ${o.rate} deliveries/s for ${o.rateMs / 1000} s ...`);
    const rate = await rateRun(h, pg, o, errors);
    o.log(` end to end p50 ${rate.endToEnd.p50Ms.toFixed(1)} ms\n`);
    o.log(
      `bench: cluster fixed rate across 3 replicas (round-robin), ${o.rate} deliveries/s for ${o.rateMs / 1000} s ...`,
    );
    const rateAcross = await rateRun(h, pg, o, errors, 3);
    o.log(
      ` end to end p50 ${rateAcross.endToEnd.p50Ms.toFixed(1)} ms, p99 ${rateAcross.endToEnd.p99Ms.toFixed(1)} ms\n`,
    );
    const drains: DrainRun[] = [];
    for (const c of o.drainConcurrencies) {
      o.log(`bench: cluster processing, ${o.drainEvents} pending events, CLUSTER_CONCURRENCY=${c} ...`);
      const d = await drainRun(h, pg, o, c);
      if (!drainOk(d, o.drainEvents))
        errors.push(
          `cluster processing c=${c}: ${d.events} events for ${o.drainEvents} written, ${d.done} done, ` +
            `${d.transitions} transitions, ${d.orderViolations} out of proposal order`,
        );
      drains.push(d);
      o.log(` ${Math.round(d.eventsPerSecond)} events/s\n`);
    }
    o.log(`bench: cluster baseline, SQLite pipeline drain of ${o.drainEvents} events ...`);
    const s = await runPipelineDrain(o.drainEvents);
    if (s.done !== s.events || s.transitions !== s.events)
      errors.push(
        `cluster baseline: SQLite pipeline ${s.done} done, ${s.transitions} transitions of ${s.events}`,
      );
    o.log(` ${Math.round(s.eventsPerSecond)} events/s\n`);
    return {
      postgres: version,
      ingest,
      ingestLayout: layout,
      rate,
      rateAcross,
      drains,
      sqliteDrain: { ...s, machine: machineLoad() },
    };
  } finally {
    await pg.stop();
  }
}

async function postgresVersion(pg: LocalPostgres): Promise<string> {
  const client = new Client({ connectionString: pg.url });
  await client.connect();
  try {
    const r = await client.query<{ v: string }>("SELECT current_setting('server_version') AS v");
    return `PostgreSQL ${r.rows[0]?.v ?? '?'}`;
  } finally {
    await client.end();
  }
}

// ---------------------------------------------------------------------------------------------
// Row 3, A/B of builds (`npm run bench -- --baseline <rev>`)

export interface DrainBuild {
  label: string;
  bin: string;
}

export interface DrainOptions {
  builds: DrainBuild[];
  events: number;
  concurrency: number;
  runs: number;
}

/**
 * Row 3 alone, every build once per round, the order reversed every other round (ABBA); each
 * build's events/s in round order (run.ts takes the ratio of their medians).
 */
export async function drainBuilds(
  h: ClusterHarness,
  o: DrainOptions,
  write: (line: string) => void,
): Promise<Map<string, { eventsPerSecond: number[]; ok: boolean }>> {
  const results = new Map(o.builds.map((b) => [b.label, { eventsPerSecond: [] as number[], ok: true }]));
  const pg = await startLocalPostgres({ settings: PG_SETTINGS });
  let n = 0;
  try {
    write(`${await postgresVersion(pg)}; ${o.events} events, CLUSTER_CONCURRENCY=${o.concurrency}`);
    for (let round = 1; round <= o.runs; round++) {
      for (const build of round % 2 === 1 ? o.builds : [...o.builds].reverse()) {
        const d = await drainRun(h, pg, { drainEvents: o.events }, o.concurrency, {
          bin: build.bin,
          // The build's own migrations: its replica refuses a database with migrations it does not know.
          migrationsDir: resolve(build.bin, '..', '..', '..', '..', 'migrations-pg'),
          suffix: `_${++n}`,
        });
        const ok = drainOk(d, o.events);
        write(
          `round ${round} ${build.label}: ${Math.round(d.eventsPerSecond)} events/s (${d.seconds.toFixed(2)} s); ` +
            `CPU per event: replica ${fixed(d.cpu.replicaUs, 0)} µs, PostgreSQL ${fixed(d.cpu.postgresUs, 0)} µs; ` +
            `${ok ? 'ok' : `MISMATCH (${d.done} done, ${d.transitions} transitions, ${d.orderViolations} out of order)`}`,
        );
        const r = results.get(build.label);
        r?.eventsPerSecond.push(d.eventsPerSecond);
        if (r !== undefined && !ok) r.ok = false;
      }
    }
  } finally {
    await pg.stop();
  }
  return results;
}
