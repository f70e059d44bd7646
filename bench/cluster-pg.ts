import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { Client, Pool } from 'pg';
import { EVENTS_QUEUE } from '../src/postgres/pg-queues';
import Database from '../src/sqlite/sqlite-driver';
import type { ClusterBenchOptions, ClusterHarness } from './protocol';
import type { ReceiverRun } from './protocol';
import { cpuMicros, httpGet, metric, percentile, pinToCpus, until } from '../rigs/harness';
import { type LocalPostgres, startLocalPostgres } from '../rigs/local-postgres';

/**
 * What the cluster rows (cluster.ts, cluster-rate.ts) and the starved rows' cluster mode share: one
 * PostgreSQL per section, with a fresh database per run (RunDatabase), replicas started on it and
 * waited for (connected, relayed, caught up), the relay lag read from PostgreSQL, and the CPU of the
 * replicas, of PostgreSQL and of the machine.
 */

export const PG_SETTINGS = {
  max_connections: 200,
  shared_buffers: '256MB',
  // Rows 2–4 time commits with pg_xact_commit_timestamp(xmin); costs a few bytes per commit.
  track_commit_timestamp: true,
} as const;

// Results shared by the rows

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

export interface RelayLag extends Spread {
  /** Relay transactions (batches) and the rows per batch. */
  batches: number;
  /** The same delay to the batch's start (`relayed_at`, PostgreSQL's now() in the batch). */
  startP50Ms: number;
  startP99Ms: number;
  /** The replica's `consig_relay_delay_seconds` histogram: bucket bounds holding p50 and p99, and its mean. */
  histogram: { count: number; p50Le: string; p99Le: string; meanMs: number } | null;
}

// ---------------------------------------------------------------------------------------------
// Small helpers

export function machineLoad(): MachineLoad {
  return { load1: loadavg()[0] as number, cores: availableParallelism() };
}

/** A replica's /metrics text ('' when it did not answer). */
export async function metricsOf(port: number): Promise<string> {
  const r = await httpGet(port, '/metrics', 10_000);
  return r?.status === 200 ? r.body : '';
}

export function spread(values: number[]): Spread {
  const sorted = Float64Array.from(values).sort();
  return {
    n: sorted.length,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
  };
}

export function sqliteEvents(path: string): number {
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

/** PostgreSQL's processes: the postmaster and its children (none if it is not running). */
export function postgresPids(pg: LocalPostgres): number[] {
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

/**
 * CPU of the whole PostgreSQL server, µs: the postmaster, its live children, and the children it
 * reaped (a backend that exits adds its time to the postmaster's cutime).
 */
export function postgresCpu(pg: LocalPostgres): number | null {
  const [pm, ...children] = postgresPids(pg);
  if (pm === undefined) return null;
  const total = cpuMicros(pm, true);
  if (total === null) return null;
  return children.reduce((sum, pid) => sum + (cpuMicros(pid) ?? 0), total);
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

export function layoutOf(o: ClusterBenchOptions): Layout | null {
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
export function machineJiffies(): { busy: number; total: number } | null {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = cpu.slice(0, 8).reduce((a, b) => a + b, 0);
    return { busy: total - (cpu[3] ?? 0) - (cpu[4] ?? 0), total };
  } catch {
    return null;
  }
}

export interface CpuSnapshot {
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
export function cpuSnapshot(replica: ReceiverRun | readonly ReceiverRun[], pg: LocalPostgres): CpuSnapshot {
  const all: readonly ReceiverRun[] = Array.isArray(replica) ? replica : [replica as ReceiverRun];
  const each = all.map((r) => cpuMicros(r.pid));
  const sum = each.some((v) => v === null) ? null : each.reduce((a: number, b) => a + (b as number), 0);
  return { replica: sum, postgres: postgresCpu(pg), machine: machineJiffies() };
}

export function cpuUse(a: CpuSnapshot, b: CpuSnapshot, units: number): CpuUse {
  const per = (x: number | null, y: number | null) =>
    x === null || y === null || units <= 0 ? null : (y - x) / units;
  return {
    replicaUs: per(a.replica, b.replica),
    postgresUs: per(a.postgres, b.postgres),
    busyCores: busyCores(a.machine, b.machine),
  };
}

/** Cores the whole machine kept busy between two readings of /proc/stat. */
export function busyCores(
  a: { busy: number; total: number } | null,
  b: { busy: number; total: number } | null,
): number | null {
  if (a === null || b === null || b.total <= a.total) return null;
  return ((b.busy - a.busy) / (b.total - a.total)) * availableParallelism();
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: one server for the section, a fresh database per run

export class RunDatabase {
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
interface StarvedPostgres {
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

export async function admin(pg: LocalPostgres, sql: string): Promise<void> {
  const client = new Client({ connectionString: pg.url.replace(/\/[^/]+$/, '/postgres') });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** One replica (`serve` with DATABASE_URL), once it has migrated PostgreSQL and runs its relay and workers. */
export async function startReplica(
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
      async () => metric(await metricsOf(replica.port), 'consig_cluster_connected') === 1,
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
export async function relayed(db: RunDatabase, replica: ReceiverRun, timeoutMs: number): Promise<void> {
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
export async function caughtUp(db: RunDatabase, replica: ReceiverRun, timeoutMs: number): Promise<void> {
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
export async function relayLag(db: RunDatabase, metricsText: string | null): Promise<RelayLag> {
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

/**
 * Processing transactions: distinct commit times of the transition rows. Not distinct xmin: each
 * event runs in a savepoint, whose subtransaction has an xid of its own (and the commit time of its
 * top transaction).
 */
export function transactions(db: RunDatabase): Promise<number> {
  return db.count('SELECT count(DISTINCT pg_xact_commit_timestamp(xmin)) AS n FROM proposal_transitions');
}

/** Turn jobs pg-boss completed. */
export function turns(db: RunDatabase): Promise<number> {
  return db.count(`SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'`, [
    EVENTS_QUEUE,
  ]);
}
