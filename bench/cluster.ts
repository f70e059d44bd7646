import { execFileSync, fork, spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { Agent, get, request } from 'node:http';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Pool } from 'pg';
import { EVENTS_QUEUE, startEngine } from '../src/cluster/engine';
import { RECEIVER_NODE_FLAGS } from './receiver-node';
import { freePort, type LocalPostgres, startLocalPostgres } from './local-postgres';
import { migratePostgres } from '../src/cluster/pg-migrate';
import { workKeyOf } from '../src/cluster/relay';
import { sqlOf } from '../src/cluster/sql';
import { HAPPY_PATH } from '../src/domain/lifecycle';
import Database from '../src/store/sqlite-driver';
import { pinToCpus } from './cpus';
import type { ForwardingHarness, ReceiverRun } from './forwarding';
import { type DrainResult, runPipelineDrain } from './pipeline-drain';
import { type LoadResult, percentile } from './protocol';

/**
 * Cluster-mode figures (issue 13), run by run.ts (`--only cluster`):
 *
 * 1. ingest per replica: the load generator of the HTTP rows (load.ts, c=50) against the receiver
 *    in SQLite mode, against one replica in cluster mode (`serve` with DATABASE_URL: its own
 *    SQLite spool, the relay and the kick workers running, PostgreSQL on this machine), and against
 *    an ingest-only replica (CLUSTER_CONCURRENCY=0: the relay only; once the load is over, a
 *    replica with workers starts and processes the backlog, so that the same checks hold),
 *    alternating (ABC CBA), the median of each; the ratio's target is ≥ 0.9. On 2 cores or more,
 *    the receiver under load and the load generator run on core 0 and PostgreSQL on the others
 *    ({@link Layout}; `--cluster-share-cores` unpins);
 * 2. relay lag, from a delivery's receipt at the replica to the commit of the relay's batch in
 *    PostgreSQL, computed per delivery from PostgreSQL (the commit timestamp of its `deliveries`
 *    row), at the load of row 1 and at a fixed rate (open loop);
 * 3. processing throughput: pending life-cycle events written with SQL and one kick per work key
 *    queued through the real engine (src/cluster/engine.ts) before the replica starts, then timed
 *    while one replica drains them (target ≥ 2 000 events/s), with the SQLite pipeline's drain of
 *    the same count as the baseline;
 * 4. end to end: for each delivery of the fixed-rate run, from its 200 at the sender to the commit
 *    that recorded its transition in PostgreSQL (`proposal_transitions`, the row that moves
 *    `proposals`), and to `proposal_transitions.at`; one machine, one clock;
 * 5. the same at the same rate over three replicas, delivery i to replica i mod 3 (a round-robin load
 *    balancer): what the hold-back window adds (docs/cluster.md §10), with the transitions recorded
 *    out of order counted (must be 0).
 *
 * PostgreSQL is a throwaway server on the machine's binaries (bench/local-postgres.ts) with
 * its durable defaults (fsync, synchronous_commit and full_page_writes on: not `fast`), plus
 * `track_commit_timestamp`, which rows 2–4 read; each run gets a fresh database. Every run is
 * checked: each 200 is one event in PostgreSQL (and in the spool), and every event is done at the
 * end, with one transition each.
 *
 * Row 3 also runs alone, as an A/B of builds (`node dist/bench/cluster.js drain --help`, at the end
 * of this file): alternating rounds, CPU per event of the replica and of PostgreSQL (steadier than
 * events/s on a shared machine), and with `--statements` pg_stat_statements' count and time of each
 * statement per event.
 */

// ---------------------------------------------------------------------------------------------
// What run.ts lends this module, and what it asks of it

export interface ClusterHarness extends ForwardingHarness {
  /** The HTTP rows' load generator (load.ts, a child of its own) against `port`, signed with the webhook secret. */
  runLoad(spec: {
    port: number;
    concurrency: number;
    warmupMs: number;
    durationMs: number;
    idPrefix: string;
    /** Pins the load generator to these cores (taskset's list form). */
    cpus?: string;
  }): Promise<LoadResult>;
}

export interface ClusterBenchOptions {
  /** Ingest rounds; each runs SQLite mode, cluster mode and an ingest-only replica once (ABC CBA order). */
  rounds: number;
  /** Row 1 on every core, unpinned (see {@link Layout}). @default false */
  shareCores?: boolean;
  /** The ingest load's concurrency (the HTTP rows' c=50). */
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  /** Deliveries per second of the fixed-rate run (rows 2 and 4), and its measured length. */
  rate: number;
  rateMs: number;
  /** Pending events the processing figure drains, and the CLUSTER_CONCURRENCY values it tries. */
  drainEvents: number;
  drainConcurrencies: readonly number[];
  /** Progress lines (stderr). */
  log(text: string): void;
}

/** Processing target of issue 13, events/s on PostgreSQL. */
export const CLUSTER_DRAIN_TARGET = 2000;
/** Ingest in cluster mode over SQLite mode, per replica. */
export const CLUSTER_INGEST_TARGET = 0.9;

const PG_SETTINGS = {
  max_connections: 200,
  shared_buffers: '256MB',
  // Rows 2–4 time commits with pg_xact_commit_timestamp(xmin); costs a few bytes per commit.
  track_commit_timestamp: true,
} as const;

// ---------------------------------------------------------------------------------------------
// Results

/** The machine when a figure ended: its 1-minute load average, and its cores. */
export interface MachineLoad {
  load1: number;
  cores: number;
}

/** One delivery's delay, ms, over a set of deliveries. */
export interface Spread {
  n: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * Row 1's modes: the receiver on SQLite alone; a cluster replica with its kick workers
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

export interface RelayLag extends Spread {
  /** Relay transactions (batches) and the rows per batch. */
  batches: number;
  /** The same delay to the batch's start (`relayed_at`, PostgreSQL's now() in the batch). */
  startP50Ms: number;
  startP99Ms: number;
  /** The replica's `consig_relay_delay_seconds` histogram: bucket bounds holding p50 and p99, and its mean. */
  histogram: { count: number; p50Le: string; p99Le: string; meanMs: number } | null;
}

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
  /** 200 → relay commit; relay commit → the kick ran the event; the event → its commit (p50/p99). */
  parts: { toRelay: Spread; toKick: Spread; toCommit: Spread };
  /** Kick jobs completed and processing transactions, for the events of the run. */
  kicks: number;
  transactions: number;
  /** From the first delivery sent to every event processed, per delivery. */
  cpu: CpuUse;
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
  /** Kick jobs completed, and processing transactions (each takes a batch of up to 8 kicks). */
  kicks: number;
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
// Small helpers

function machineLoad(): MachineLoad {
  return { load1: loadavg()[0] as number, cores: availableParallelism() };
}

function httpText(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((done, fail) => {
    const req = get({ host: '127.0.0.1', port, path, agent: false, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
      );
      res.on('error', fail);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', fail);
  });
}

function metric(text: string, name: string): number | null {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
  return m?.[1] === undefined ? null : Number(m[1]);
}

async function until(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  alive: () => boolean,
  everyMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (!alive()) throw new Error(`${what}: the replica died`);
    if (Date.now() > deadline) throw new Error(`${what}: not done in ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function spread(values: number[]): Spread {
  const sorted = Float64Array.from(values).sort();
  return {
    n: sorted.length,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
  };
}

function sqliteEvents(path: string): number {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** Deliveries in a replica's spool that its relay has not moved yet. */
function spoolBacklog(path: string): number {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    const last = (db.prepare('SELECT max(id) AS n FROM deliveries').get() as { n: number | null }).n ?? 0;
    const cursor = db.prepare('SELECT relayed_through AS n FROM relay_cursor WHERE id = 1').get() as {
      n: number;
    };
    return last - cursor.n;
  } finally {
    db.close();
  }
}

/** user + system CPU of a process in µs (its reaped children too, with `children`), from /proc. */
function procCpu(pid: number, children = false): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // proc_pid_stat(5): utime, stime, cutime, cstime are fields 14–17, in USER_HZ (100 on Linux).
    const ticks = Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0);
    return ticks * 10_000;
  } catch {
    return null;
  }
}

/**
 * CPU of the whole PostgreSQL server, µs: the postmaster, its live children, and the children it
 * reaped (a backend that exits adds its time to the postmaster's cutime).
 */
/** PostgreSQL's processes: the postmaster and its children (none if it is not running). */
function postgresPids(pg: LocalPostgres): number[] {
  let pm: number;
  try {
    pm = Number(readFileSync(join(pg.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return [];
  }
  const pids = [pm];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pm) pids.push(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

function postgresCpu(pg: LocalPostgres): number | null {
  const [pm, ...children] = postgresPids(pg);
  if (pm === undefined) return null;
  const total = procCpu(pm, true);
  if (total === null) return null;
  return children.reduce((sum, pid) => sum + (procCpu(pid) ?? 0), total);
}

/**
 * Row 1's layout on a machine of 2 cores or more: the receiver under load (either mode) and the load
 * generator on core 0, PostgreSQL and the replica that processes an ingest-only run's backlog on the
 * others. That is a replica on a machine of its own with PostgreSQL elsewhere, as deployed; unpinned,
 * PostgreSQL's CPU comes out of the replica's share of the same 2 cores, which no deployment has.
 * Null (every run on every core) with one core, without taskset, or with `shareCores`.
 */
export interface Layout {
  replica: string;
  rest: string;
  all: string;
}

function layoutOf(o: ClusterBenchOptions): Layout | null {
  const n = availableParallelism();
  if (o.shareCores === true || n < 2) return null;
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
  } catch {
    return null;
  }
  return { replica: '0', rest: n === 2 ? '1' : `1-${n - 1}`, all: `0-${n - 1}` };
}

/** Busy and total jiffies of all cores (/proc/stat): the machine's load, ours and the neighbours'. */
function machineJiffies(): { busy: number; total: number } | null {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = cpu.slice(0, 8).reduce((a, b) => a + b, 0);
    return { busy: total - (cpu[3] ?? 0) - (cpu[4] ?? 0), total };
  } catch {
    return null;
  }
}

interface CpuSnapshot {
  replica: number | null;
  postgres: number | null;
  machine: { busy: number; total: number } | null;
}

/** CPU used between two snapshots, per unit of work (an event, a delivery). */
export interface CpuUse {
  /** µs of the replica process and of the whole PostgreSQL server, per unit. */
  replicaUs: number | null;
  postgresUs: number | null;
  /** Cores the machine kept busy meanwhile (everyone's work, the neighbours' too). */
  busyCores: number | null;
}

/** `replica` may be several (the fixed rate across replicas): their CPU is summed. */
function cpuSnapshot(
  h: Pick<ClusterHarness, 'cpuMicros'>,
  replica: ReceiverRun | readonly ReceiverRun[],
  pg: LocalPostgres,
): CpuSnapshot {
  const all: readonly ReceiverRun[] = Array.isArray(replica) ? replica : [replica as ReceiverRun];
  const each = all.map((r) => h.cpuMicros(r.pid));
  const sum = each.some((v) => v === null) ? null : each.reduce((a: number, b) => a + (b as number), 0);
  return { replica: sum, postgres: postgresCpu(pg), machine: machineJiffies() };
}

function cpuUse(a: CpuSnapshot, b: CpuSnapshot, units: number): CpuUse {
  const per = (x: number | null, y: number | null) =>
    x === null || y === null || units <= 0 ? null : (y - x) / units;
  return {
    replicaUs: per(a.replica, b.replica),
    postgresUs: per(a.postgres, b.postgres),
    busyCores: busyCores(a.machine, b.machine),
  };
}

/** Cores the whole machine kept busy between two readings of /proc/stat. */
function busyCores(
  a: { busy: number; total: number } | null,
  b: { busy: number; total: number } | null,
): number | null {
  if (a === null || b === null || b.total <= a.total) return null;
  return ((b.busy - a.busy) / (b.total - a.total)) * availableParallelism();
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: one server for the section, a fresh database per run

class RunDatabase {
  private constructor(
    private readonly pg: LocalPostgres,
    readonly name: string,
    readonly url: string,
    readonly pool: Pool,
  ) {}

  static async create(pg: LocalPostgres, name: string): Promise<RunDatabase> {
    await admin(pg, `CREATE DATABASE ${name}`);
    const url = pg.url.replace(/\/[^/]+$/, `/${name}`);
    const pool = new Pool({ connectionString: url, max: 2 });
    pool.on('error', () => undefined);
    return new RunDatabase(pg, name, url, pool);
  }

  async count(sql: string, values: unknown[] = []): Promise<number> {
    const r = await this.pool.query<{ n: string }>(sql, values);
    return Number(r.rows[0]?.n ?? 0);
  }

  /** Whether `sql` finds a row: an index probe, where a count of the busy table costs PostgreSQL milliseconds. */
  async exists(sql: string): Promise<boolean> {
    return (await this.pool.query<{ e: boolean }>(`SELECT EXISTS (${sql}) AS e`)).rows[0]?.e === true;
  }

  async drop(): Promise<void> {
    await this.pool.end().catch(() => undefined);
    await admin(this.pg, `DROP DATABASE IF EXISTS ${this.name} WITH (FORCE)`).catch(() => undefined);
  }
}

/** A throwaway PostgreSQL for the starved rows in cluster mode (starved.ts), pinned to `cpus`. */
export interface StarvedPostgres {
  /** A fresh database for one row: its URL, its backlog (spool + PostgreSQL), and its removal. */
  database(name: string): Promise<{
    url: string;
    /** Deliveries in the replica's spool not relayed + events to process + deliveries to send. */
    backlog(spoolPath: string): Promise<number>;
    drop(): Promise<void>;
  }>;
  /** Pins PostgreSQL's processes (those forked since too) to `cpus`. */
  pin(): void;
  stop(): Promise<void>;
}

export async function startStarvedPostgres(cpus: string): Promise<StarvedPostgres> {
  const pg = await startLocalPostgres({ settings: PG_SETTINGS });
  const pin = (): void => pinToCpus(postgresPids(pg), cpus);
  pin();
  return {
    pin,
    stop: () => pg.stop(),
    async database(name) {
      const db = await RunDatabase.create(pg, name);
      return {
        url: db.url,
        drop: () => db.drop(),
        async backlog(spoolPath) {
          const pending = await db.count(
            `SELECT (SELECT count(*) FROM events WHERE status IN ('pending', 'failed'))
                  + (SELECT count(*) FROM forward_deliveries WHERE status = 'pending') AS n`,
          );
          return spoolBacklog(spoolPath) + pending;
        },
      };
    },
  };
}

async function admin(pg: LocalPostgres, sql: string): Promise<void> {
  const client = new Client({ connectionString: pg.url.replace(/\/[^/]+$/, '/postgres') });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** One replica (`serve` with DATABASE_URL), once it has migrated PostgreSQL and runs its relay and workers. */
async function startReplica(
  h: ClusterHarness,
  db: RunDatabase,
  env: Record<string, string> = {},
): Promise<ReceiverRun> {
  const replica = await h.startReceiver(`cluster-${db.name}`, {
    DATABASE_URL: db.url,
    REPLICA_ID: db.name,
    ...env,
  });
  try {
    await until(
      `${db.name}: replica connected`,
      async () => metric((await httpText(replica.port, '/metrics')).body, 'consig_cluster_connected') === 1,
      60_000,
      () => replica.alive(),
      200,
    );
  } catch (err) {
    await replica.stop();
    throw err;
  }
  return replica;
}

/** Waits until the replica's spool is relayed. */
async function relayed(db: RunDatabase, replica: ReceiverRun, timeoutMs: number): Promise<void> {
  // The spool read directly: a scrape of /metrics would also query PostgreSQL (the shared gauges).
  await until(
    `${db.name}: relay backlog 0`,
    async () => spoolBacklog(replica.dbPath) === 0,
    timeoutMs,
    () => replica.alive(),
    200,
  );
}

/** Waits until the replica's spool is relayed and no event is left to process. */
async function caughtUp(db: RunDatabase, replica: ReceiverRun, timeoutMs: number): Promise<void> {
  await relayed(db, replica, timeoutMs);
  await until(
    `${db.name}: every event processed`,
    async () => !(await db.exists("SELECT 1 FROM events WHERE status IN ('pending', 'failed')")),
    timeoutMs,
    () => replica.alive(),
    200,
  );
}

/**
 * Relay lag of every delivery in the database: commit of its relay batch − its receipt at the
 * replica (what `consig_relay_delay_seconds` observes, exactly), and to the batch's start.
 */
async function relayLag(db: RunDatabase, metricsText: string | null): Promise<RelayLag> {
  const r = await db.pool.query<Record<string, string | null>>(
    `SELECT count(*) AS n, count(DISTINCT x) AS batches,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY lag) AS p50, percentile_disc(0.99) WITHIN GROUP (ORDER BY lag) AS p99,
       max(lag) AS max, percentile_disc(0.5) WITHIN GROUP (ORDER BY start) AS s50,
       percentile_disc(0.99) WITHIN GROUP (ORDER BY start) AS s99
     FROM (SELECT xmin::text AS x, extract(epoch FROM pg_xact_commit_timestamp(xmin) - received_at) * 1000 AS lag,
             extract(epoch FROM relayed_at - received_at) * 1000 AS start FROM deliveries) d`,
  );
  const row = r.rows[0] ?? {};
  const n = (k: string) => Number(row[k] ?? Number.NaN);
  return {
    n: n('n'),
    batches: n('batches'),
    p50Ms: n('p50'),
    p99Ms: n('p99'),
    maxMs: n('max'),
    startP50Ms: n('s50'),
    startP99Ms: n('s99'),
    histogram: metricsText === null ? null : delayHistogram(metricsText),
  };
}

/** The bucket bounds holding p50 and p99 of `consig_relay_delay_seconds`, and its mean. */
function delayHistogram(text: string): RelayLag['histogram'] {
  const buckets = [...text.matchAll(/^consig_relay_delay_seconds_bucket\{le="([^"]+)"\} (\S+)$/gm)].map(
    (m) => ({ le: m[1] as string, n: Number(m[2]) }),
  );
  const count = metric(text, 'consig_relay_delay_seconds_count');
  const sum = metric(text, 'consig_relay_delay_seconds_sum');
  if (count === null || sum === null || count === 0 || buckets.length === 0) return null;
  const at = (p: number) => buckets.find((b) => b.n >= p * count)?.le ?? '+Inf';
  return { count, p50Le: at(0.5), p99Le: at(0.99), meanMs: (sum / count) * 1000 };
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
    const before = { node: h.cpuMicros(receiver.pid), machine: machineJiffies() };
    load = await h.runLoad({
      ...ingestSpec(o, layout),
      port: receiver.port,
      idPrefix: `sqlite${round}`,
    });
    const after = { node: h.cpuMicros(receiver.pid), machine: machineJiffies() };
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
      const before = { node: h.cpuMicros(replica.pid), pg: postgresCpu(pg), machine: machineJiffies() };
      const load = await h.runLoad({
        ...ingestSpec(o, layout),
        port: replica.port,
        idPrefix: `${mode}${round}`,
      });
      const after = { node: h.cpuMicros(replica.pid), pg: postgresCpu(pg), machine: machineJiffies() };
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
      const metrics = await httpText(replica.port, '/metrics');
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
        relay: await relayLag(db, metrics.body),
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
function ingestOk(r: IngestRun): boolean {
  const n = r.load.ok200Total;
  return (
    r.sqliteEvents === n &&
    (r.mode === 'sqlite' || (r.pgEvents === n && r.pgDone === n)) &&
    (r.mode !== 'ingest-only' || r.doneBeforeProcessing === 0)
  );
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

async function rateRun(
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
      const before = cpuSnapshot(h, replicas, pg);
      paced = await pace(h, {
        ports: replicas.map((r) => r.port),
        secret: h.webhookSecret,
        rate: o.rate,
        warmupMs: o.warmupMs,
        durationMs: o.rateMs,
      });
      for (const r of replicas) await caughtUp(db, r, 120_000);
      cpu = cpuUse(before, cpuSnapshot(h, replicas, pg), paced.ids.length);
      metricsText = (await httpText((replicas[0] as ReceiverRun).port, '/metrics')).body;
      for (const r of replicas)
        relayedLate += metric((await httpText(r.port, '/metrics')).body, 'consig_relay_late_total') ?? 0;
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
    fork(join(__dirname, 'cluster.js'), ['pace'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
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
  const series = { toRelay: [] as number[], toKick: [] as number[], toCommit: [] as number[] };
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
    series.toKick.push(at - relayed);
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
      toKick: spread(series.toKick),
      toCommit: spread(series.toCommit),
    },
    kicks: await kicks(db),
    transactions: await transactions(db),
    cpu: after.cpu,
    machine: machineLoad(),
  };
}

function rateOk(r: RateRun): boolean {
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
 * Writes `events` pending events and one kick per proposal, through the real engine, in
 * transactions of 2 000 (as relay batches would, without a replica running); returns the proposals.
 */
async function prefillBacklog(
  db: RunDatabase,
  events: number,
  migrationsDir?: string,
  steps = HAPPY_PATH.length,
): Promise<number> {
  const proposals = Math.ceil(events / steps);
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
      await engine.kick(sqlOf(client), [...new Set(rows.rows.map(workKeyOf))]);
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

/** What a drain needs of its harness: a replica to start, and a process's CPU. */
type DrainHarness = Pick<ClusterHarness, 'startReceiver' | 'cpuMicros'>;

/** Options of one drain beyond the section's (the drain-only A/B mode at the end of this file). */
interface DrainExtras {
  /** The replica's migrations-pg (a baseline build's own), for the prefill. @default this build's */
  migrationsDir?: string;
  /** Events per proposal, the first steps of the happy path (1: one event per kick). @default all 9 */
  steps?: number;
  /** Database name suffix, so that runs on one server do not collide. @default '' */
  suffix?: string;
  /** Called once processing began (pg_stat_statements is reset there) and once it ended. */
  onBegin?(db: RunDatabase): Promise<void>;
  onEnd?(db: RunDatabase, events: number): Promise<void>;
}

async function drainRun(
  h: DrainHarness,
  pg: LocalPostgres,
  o: Pick<ClusterBenchOptions, 'drainEvents'>,
  concurrency: number,
  extras: DrainExtras = {},
): Promise<DrainRun> {
  const db = await RunDatabase.create(pg, `drain_c${concurrency}${extras.suffix ?? ''}`);
  try {
    const t = performance.now();
    const proposals = await prefillBacklog(db, o.drainEvents, extras.migrationsDir, extras.steps);
    const prefillSeconds = (performance.now() - t) / 1000;
    const replica = await h.startReceiver(`cluster-${db.name}`, {
      DATABASE_URL: db.url,
      REPLICA_ID: db.name,
      CLUSTER_CONCURRENCY: String(concurrency),
    });
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
      await extras.onBegin?.(db);
      first = cpuSnapshot(h, replica, pg);
      doneAtFirst = await db.count("SELECT count(*) AS n FROM events WHERE status = 'done'");
      await until(
        'drain: backlog processed',
        async () => !(await db.exists("SELECT 1 FROM events WHERE status IN ('pending', 'failed')")),
        Math.max(120_000, o.drainEvents * 20),
        replica.alive,
        100,
      );
      last = cpuSnapshot(h, replica, pg);
      await extras.onEnd?.(db, o.drainEvents - doneAtFirst);
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
    kicks: await kicks(db),
    transactions: await transactions(db),
    cpu: run.cpu,
    machine: machineLoad(),
  };
}

/**
 * Processing transactions: distinct commit times of the transition rows. Not distinct xmin: each
 * event runs in a savepoint, whose subtransaction has an xid of its own (and the commit time of its
 * top transaction).
 */
function transactions(db: RunDatabase): Promise<number> {
  return db.count('SELECT count(DISTINCT pg_xact_commit_timestamp(xmin)) AS n FROM proposal_transitions');
}

/** Kick jobs pg-boss completed. */
function kicks(db: RunDatabase): Promise<number> {
  return db.count(`SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'`, [
    EVENTS_QUEUE,
  ]);
}

function drainOk(d: DrainRun, events: number): boolean {
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
// Report

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : 1) : '-');
const spreadText = (s: Spread) => `p50 ${ms(s.p50Ms)} ms, p99 ${ms(s.p99Ms)} ms, max ${ms(s.maxMs)} ms`;
const loadText = (m: MachineLoad) => `load average ${m.load1.toFixed(1)} on ${m.cores} cores`;
const met = (ok: boolean) => (ok ? 'MET' : 'MISSED');

function median<T>(items: readonly T[], by: (t: T) => number): T | undefined {
  const sorted = [...items].sort((a, b) => by(a) - by(b));
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

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
  const s = median(of('sqlite'), (r) => r.load.rps);
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
    const c = median(of(mode), (r) => r.load.rps);
    if (c === undefined) continue;
    const ratio = c.load.rps / s.load.rps;
    const catchUp = of(mode).map((r) => ((r.catchUpMs ?? 0) / 1000).toFixed(1));
    const processed = of(mode).map((r) => cpu(r.processedPerSecond));
    const beside =
      mode === 'cluster'
        ? 'the relay and the kick workers run beside the load'
        : 'CLUSTER_CONCURRENCY=0: the relay alone runs beside the load';
    const after =
      mode === 'cluster'
        ? `processing (one kick per event: each delivery of load.ts is a new proposal) ran ${processed.join(', ')} events/s ` +
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
    const c = median(
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
      `steps, interleaved), written with SQL in transactions of 2 000 with one kick per proposal queued through the real engine ` +
      `(src/cluster/engine.ts) before the replica started (written in ${d0.prefillSeconds.toFixed(1)} s, not timed); one replica ` +
      `(\`serve\`) drains them; timed from the first event's processed_at to the last processing commit`,
  ];
  for (const d of f.drains) {
    out.push(
      `   CLUSTER_CONCURRENCY=${d.concurrency}: ${Math.round(d.eventsPerSecond)} events/s (${d.seconds.toFixed(2)} s); ` +
        `${d.done}/${d.events} done, ${d.transitions} transitions, ${d.orderViolations} out of order ${drainOk(d, o.drainEvents) ? 'ok' : 'MISMATCH'}; ` +
        `${d.kicks} kicks (${(d.events / Math.max(1, d.kicks)).toFixed(1)} events each) in ${d.transactions} transactions ` +
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
    `   to proposal_transitions.at (= proposals.updated_at; the kick's clock as it ran the event): ${spreadText(r.endToEndAt)}`,
    `   parts, p50 / p99: 200 → relay commit ${ms(r.parts.toRelay.p50Ms)} / ${ms(r.parts.toRelay.p99Ms)} ms; relay commit → kick runs ` +
      `the event (pg-boss NOTIFY, fetch) ${ms(r.parts.toKick.p50Ms)} / ${ms(r.parts.toKick.p99Ms)} ms; event → its commit ` +
      `${ms(r.parts.toCommit.p50Ms)} / ${ms(r.parts.toCommit.p99Ms)} ms`,
    `   webhook answer ${spreadText(r.answer)}; sender lag ≤ ${r.maxLagMs.toFixed(1)} ms; checks: ${r.ok200}/${r.sent} answered 200, ` +
      `${r.pgEvents} events in PostgreSQL and ${r.sqliteEvents} in the spool for ${r.ok200All} 200s, ${r.done} done, ` +
      `${r.transitions} transitions ${rateOk(r) ? 'ok' : 'MISMATCH'}`,
    `   processing: ${r.kicks} kicks (${(r.pgEvents / Math.max(1, r.kicks)).toFixed(1)} events each) in ${r.transactions} ` +
      `transactions (${(r.kicks / Math.max(1, r.transactions)).toFixed(1)} kicks each); from the first send to every event ` +
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

/** Delivery i: proposals go through the happy path, 50 at a time interleaved (as in forwarding's latency run). */
function paceDelivery(spec: PaceSpec, i: number): { id: string; body: Buffer; signature: string } {
  const group = HAPPY_PATH.length * 50;
  const nu = 5_000_000 + Math.floor(i / group) * 50 + (i % 50);
  const evento = HAPPY_PATH[Math.floor((i % group) / 50)] as string;
  const id = `wh_rate_${String(i).padStart(6, '0')}`;
  const body = Buffer.from(
    JSON.stringify({
      evento,
      timestamp: '2026-11-21T10:00:00-03:00',
      dados: {
        nu_proposta: nu,
        nu_cpf: '52998224725',
        st_proposta: evento.split('.')[1],
        vl_emprestimo: 15000.5,
        no_conveniada: 'Empresa Exemplo Ltda',
      },
      metadata: { tentativa: 1, webhook_id: id },
    }),
  );
  // Signed here, independently of the code under test (as load.ts does).
  const signature = `sha256=${createHmac('sha256', spec.secret).update(body).digest('hex')}`;
  return { id, body, signature };
}

/** Open loop: request i leaves at t0 + i/rate whatever the earlier ones are doing. */
async function runPace(spec: PaceSpec): Promise<PaceResult> {
  const warm = Math.round((spec.rate * spec.warmupMs) / 1000);
  const total = warm + Math.round((spec.rate * spec.durationMs) / 1000);
  const items = Array.from({ length: total }, (_, i) => paceDelivery(spec, i));
  const result: PaceResult = {
    ids: items.map((it) => it.id),
    status: new Array<number>(total).fill(0),
    answeredAtMs: new Array<number>(total).fill(Number.NaN),
    answerMs: new Array<number>(total).fill(Number.NaN),
    warm,
    maxLagMs: 0,
  };
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const period = 1000 / spec.rate;
  const t0 = performance.now() + 20;
  let open = 0;
  let next = 0;
  let allAnswered: () => void = () => undefined;
  const answered = new Promise<void>((done) => (allAnswered = done));
  const send = (i: number) => {
    const item = items[i] as (typeof items)[number];
    const sentAt = performance.now();
    result.maxLagMs = Math.max(result.maxLagMs, sentAt - (t0 + i * period));
    open += 1;
    const finish = (status: number) => {
      const now = performance.now();
      result.status[i] = status;
      result.answeredAtMs[i] = performance.timeOrigin + now;
      result.answerMs[i] = now - sentAt;
      open -= 1;
      if (open === 0 && next >= total) allAnswered();
    };
    const headers = {
      'content-type': 'application/json',
      'content-length': String(item.body.length),
      'x-service-signature': item.signature,
    };
    const req = request(
      {
        host: '127.0.0.1',
        port: spec.ports[i % spec.ports.length],
        path: '/webhooks',
        method: 'POST',
        agent,
        headers,
      },
      (res) => {
        res.resume();
        res.on('end', () => finish(res.statusCode ?? 0));
        res.on('error', () => finish(0));
      },
    );
    req.on('error', () => finish(0));
    req.end(item.body);
  };
  await new Promise<void>((done) => {
    const tick = () => {
      while (next < total && t0 + next * period <= performance.now()) send(next++);
      if (next >= total) return done();
      setTimeout(tick, Math.max(0, t0 + next * period - performance.now()));
    };
    tick();
  });
  if (open > 0) await answered;
  agent.destroy();
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

// ---------------------------------------------------------------------------------------------
// Row 3 alone, A/B: `node dist/bench/cluster.js drain [--bin <cli>]… [options]`

const DRAIN_USAGE = `usage: node dist/bench/cluster.js drain [options]
  --bin <label=path>   a build's CLI (dist/src/cli/bin.js) to drain with; repeat for A/B (default: this build)
  --events <n>         pending events per run (default 20000)
  --concurrency <n>    CLUSTER_CONCURRENCY (default 4)
  --runs <n>           rounds; each runs every --bin once, the order reversed every other round (default 3)
  --steps <n>          events per proposal, 1 to 9 (default 9: the happy path; 1: one event per kick)
  --statements         pg_stat_statements on (its own cost included): statements and PostgreSQL time per event
  --env <K=V>          added to every replica's environment (repeatable; FEED_ENABLED=true turns the outbox on)`;

export interface DrainBuild {
  label: string;
  bin: string;
}

/** A replica of `build` as the section's harness starts one (a fresh spool, FULL, LOG_LEVEL info). */
function drainHarness(build: DrainBuild, dir: string, env: Record<string, string>): DrainHarness {
  return {
    cpuMicros: (pid) => (pid === undefined ? null : procCpu(pid)),
    startReceiver: async (name, extra) => {
      const home = join(dir, `${build.label}-${name}-${Date.now()}`);
      mkdirSync(home, { recursive: true });
      const port = await freePort();
      const logPath = join(home, 'server.log');
      const log = openSync(logPath, 'w');
      const child = spawn(process.execPath, [...RECEIVER_NODE_FLAGS, build.bin, 'serve'], {
        env: {
          PATH: process.env.PATH ?? '',
          ...(process.env.PG_BIN === undefined ? {} : { PG_BIN: process.env.PG_BIN }),
          PORT: String(port),
          HOST: '127.0.0.1',
          WEBHOOK_SECRETS: 'drain-bench-secret-0123456789abcdef',
          DATABASE_PATH: join(home, 'consig.db'),
          LOG_LEVEL: 'info',
          SQLITE_SYNCHRONOUS: 'FULL',
          ...env,
          ...extra,
        },
        stdio: ['ignore', log, log],
      });
      closeSync(log);
      const alive = () => child.exitCode === null && child.signalCode === null;
      const stop = async () => {
        if (!alive()) return;
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      };
      try {
        await until(
          `${build.label}: ready`,
          async () => (await httpText(port, '/readyz').catch(() => ({ status: 0 }))).status === 200,
          20_000,
          alive,
          50,
        );
      } catch (err) {
        await stop();
        throw new Error(`${(err as Error).message}\n${readFileSync(logPath, 'utf8').slice(-2000)}`);
      }
      return { port, pid: child.pid, dbPath: join(home, 'consig.db'), logPath, alive, stop };
    },
  };
}

interface StatementRow {
  query: string;
  calls: string;
  exec_ms: string;
  plan_ms: string;
  rows: string;
}

/** pg_stat_statements of the run's database since `reset`, per event, the costliest first. */
async function statementReport(db: RunDatabase, events: number): Promise<string[]> {
  const r = await db.pool.query<StatementRow>(
    `SELECT query, calls, total_exec_time AS exec_ms, total_plan_time AS plan_ms, rows
     FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     ORDER BY total_exec_time + total_plan_time DESC`,
  );
  let calls = 0;
  let execMs = 0;
  let planMs = 0;
  const lines = r.rows.map((s) => {
    calls += Number(s.calls);
    execMs += Number(s.exec_ms);
    planMs += Number(s.plan_ms);
    const per = (n: string) => (Number(n) / events).toFixed(3);
    const us = (n: string) => ((Number(n) * 1000) / events).toFixed(1);
    const q = s.query.replace(/\s+/g, ' ').slice(0, 150);
    return `   ${per(s.calls).padStart(7)} calls ${us(s.exec_ms).padStart(6)} µs exec ${us(s.plan_ms).padStart(5)} µs plan  ${q}`;
  });
  return [
    `  statements per event: ${(calls / events).toFixed(2)}; PostgreSQL exec ${((execMs * 1000) / events).toFixed(1)} µs + ` +
      `plan ${((planMs * 1000) / events).toFixed(1)} µs per event (pg_stat_statements, top level)`,
    ...lines.slice(0, 40),
  ];
}

export interface DrainOptions {
  builds: DrainBuild[];
  env: Record<string, string>;
  events: number;
  concurrency: number;
  runs: number;
  steps: number;
  statements: boolean;
}

/** The drain mode's options (DRAIN_USAGE); null for --help. */
function drainOptions(argv: string[]): DrainOptions | null {
  const { values } = parseArgs({
    args: argv,
    options: {
      bin: { type: 'string', multiple: true },
      events: { type: 'string' },
      concurrency: { type: 'string' },
      runs: { type: 'string' },
      steps: { type: 'string' },
      statements: { type: 'boolean' },
      env: { type: 'string', multiple: true },
      help: { type: 'boolean' },
    },
  });
  if (values.help) return null;
  const split = (kv: string): [string, string] => {
    const i = kv.indexOf('=');
    return i < 0 ? [kv, kv] : [kv.slice(0, i), kv.slice(i + 1)];
  };
  const steps = Number(values.steps ?? HAPPY_PATH.length);
  if (!Number.isInteger(steps) || steps < 1 || steps > HAPPY_PATH.length)
    throw new Error(`--steps: expected 1 to ${HAPPY_PATH.length}, got ${values.steps}`);
  return {
    builds: (values.bin ?? [`this=${join(__dirname, '..', 'src', 'cli', 'bin.js')}`]).map((b) => {
      const [label, bin] = split(b);
      return { label, bin };
    }),
    env: Object.fromEntries((values.env ?? []).map(split)),
    events: Number(values.events ?? 20_000),
    concurrency: Number(values.concurrency ?? 4),
    runs: Number(values.runs ?? 3),
    steps,
    statements: values.statements === true,
  };
}

/** One drain by `build`'s replica: its line, and with --statements its statements per event. */
async function drainOnce(
  pg: LocalPostgres,
  o: DrainOptions,
  build: DrainBuild,
  dir: string,
  n: number,
): Promise<{ lines: string[]; eventsPerSecond: number; ok: boolean }> {
  const report: string[] = [];
  const d = await drainRun(drainHarness(build, dir, o.env), pg, { drainEvents: o.events }, o.concurrency, {
    // The build's own migrations: its replica refuses a database with migrations it does not know.
    migrationsDir: resolve(build.bin, '..', '..', '..', '..', 'migrations-pg'),
    steps: o.steps,
    suffix: `_${n}`,
    onBegin: o.statements
      ? async (db) => {
          await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
          await db.pool.query('SELECT pg_stat_statements_reset()');
        }
      : undefined,
    onEnd: o.statements
      ? async (db, processed) => void report.push(...(await statementReport(db, processed)))
      : undefined,
  });
  const us = (v: number | null) => (v === null ? '-' : v.toFixed(0));
  const checks = drainOk(d, o.events)
    ? 'ok'
    : `MISMATCH (${d.done} done, ${d.transitions} transitions, ${d.orderViolations} out of order)`;
  const lines = [
    `${build.label.padEnd(8)} ${Math.round(d.eventsPerSecond)} events/s (${d.seconds.toFixed(2)} s); ` +
      `CPU per event: replica ${us(d.cpu.replicaUs)} µs, PostgreSQL ${us(d.cpu.postgresUs)} µs; ` +
      `busy cores ${d.cpu.busyCores?.toFixed(2) ?? '-'}; ${d.kicks} kicks in ${d.transactions} transactions; ` +
      `${checks}; load ${d.machine.load1.toFixed(1)}`,
    ...report,
  ];
  return { lines, eventsPerSecond: d.eventsPerSecond, ok: checks === 'ok' };
}

async function drainMain(argv: string[]): Promise<void> {
  const o = drainOptions(argv);
  if (o === null) {
    process.stdout.write(`${DRAIN_USAGE}\n`);
    return;
  }
  await drainBuilds(o, (line) => process.stdout.write(`${line}\n`));
}

/**
 * Row 3 alone, every build once per round, the order reversed every other round (ABBA); each
 * build's events/s in round order (`npm run bench -- --baseline` takes the ratio of their medians).
 */
export async function drainBuilds(
  o: DrainOptions,
  write: (line: string) => void,
): Promise<Map<string, { eventsPerSecond: number[]; ok: boolean }>> {
  const results = new Map(o.builds.map((b) => [b.label, { eventsPerSecond: [] as number[], ok: true }]));
  const statementSettings = {
    shared_preload_libraries: 'pg_stat_statements',
    'pg_stat_statements.track_planning': true,
    'pg_stat_statements.max': 10000,
  };
  const pg = await startLocalPostgres({
    settings: { ...PG_SETTINGS, ...(o.statements ? statementSettings : {}) },
  });
  const dir = mkdtempSync(join(tmpdir(), 'consig-drain-'));
  let n = 0;
  try {
    write(
      `${await postgresVersion(pg)}; ${o.events} events (${o.steps} per proposal), CLUSTER_CONCURRENCY=${o.concurrency}`,
    );
    for (let round = 1; round <= o.runs; round++) {
      for (const build of round % 2 === 1 ? o.builds : [...o.builds].reverse()) {
        const d = await drainOnce(pg, o, build, dir, ++n);
        write(`round ${round} ${d.lines.join('\n')}`);
        const r = results.get(build.label);
        r?.eventsPerSecond.push(d.eventsPerSecond);
        if (r !== undefined && !d.ok) r.ok = false;
      }
    }
  } finally {
    await pg.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}

if (require.main === module && process.argv[2] === 'pace') childMain();
if (require.main === module && process.argv[2] === 'drain')
  drainMain(process.argv.slice(3)).catch((err: unknown) => {
    process.stderr.write(
      `drain: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n${DRAIN_USAGE}\n`,
    );
    process.exitCode = 1;
  });
