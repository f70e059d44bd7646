import { type ChildProcess, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';

/**
 * Issue #13: which PostgreSQL job engine runs the pipeline in cluster mode, measured: graphile-worker
 * (named queues run in series) against pg-boss (policy `key_strict_fifo`, one FIFO per singletonKey).
 * docs/cluster.md has the figures and the decision; this is how they were taken.
 *
 * The candidates are NOT dependencies of consig-receiver, so this file loads them (and `pg`) by
 * dynamic import and declares the little it uses of their API. It runs from a scratch directory
 * where they are installed:
 *
 *   mkdir -p /tmp/engines && cd /tmp/engines && npm init -y
 *   npm install graphile-worker@0.18.0 pg-boss@12.38.0 pg@8.23.1 typescript@5.9.3 @types/node@20
 *   cp <your checkout>/bench/pg-engines.ts . && npx tsc --module nodenext --target es2022 --strict \
 *     --skipLibCheck --types node pg-engines.ts
 *   export DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres
 *   node pg-engines.js throughput --engine gw --concurrency 4
 *
 * Scenarios (each resets the `bench` schema and the engine's own schema first):
 * - `throughput`: enqueue `--jobs` (20 000) over `--keys` (2 000) proposals, then drain with one
 *   worker process of `--concurrency` jobs in flight; checks per-proposal order and exactly-once.
 * - `latency`: enqueue at `--rate`/s for `--seconds`, one transaction per job, while one worker
 *   runs; reports commit → handler start p50/p99.
 * - `crash`: two worker processes; SIGKILL one mid-run; reports when its claimed jobs ran
 *   elsewhere, and whether any was lost or had its effects applied twice.
 * - `schedule`: one poll job per requestId, rescheduled, deduplicated by key.
 * - `baseline`: the same handler transactions on `--concurrency` connections, no engine (the ceiling).
 *
 * Any PostgreSQL will do (`--url` or DATABASE_URL); the figures in docs/cluster.md came from one on the
 * machine's binaries with default durability (bench/local-postgres.ts starts such a server).
 * docs/cluster.md §8 lists the command line of every figure.
 *
 * Two designs (`--design`):
 * - `event` (default): one job per event; the engine keeps a proposal's jobs in order (graphile-worker:
 *   `queue_name` per proposal; pg-boss: `key_strict_fifo` with singletonKey per proposal).
 * - `kick`: events go to our own `events` table (the relay's INSERT), plus one job per proposal key,
 *   deduplicated by the engine (graphile-worker `job_key`; pg-boss `stately` + singletonKey). The
 *   job processes the key's pending events in id order, marks them done in the same transaction,
 *   under a transaction advisory lock on the key. Order comes from our log, not from the engine.
 *
 * The `event` handler is an exactly-once pattern docs/cluster.md discusses: in ONE transaction, an insert
 * of the event's effect keyed by the event id (ON CONFLICT DO NOTHING: a replayed job finds it and
 * changes nothing) and an UPDATE of the proposal's row. The proposal row counts applied events, so a
 * count that is not `seq + 1` after the update is an order violation (or a lost earlier event).
 */

// ---------------------------------------------------------------------------------------------
// The few shapes used from `pg`, graphile-worker and pg-boss (loaded at run time, see above).

interface QueryResult<R> {
  rows: R[];
  rowCount: number | null;
}
type Row = Record<string, unknown>;
interface Queryable {
  query<R = Row>(text: string, values?: unknown[]): Promise<QueryResult<R>>;
}
interface PgClient extends Queryable {
  release(err?: Error | boolean): void;
}
interface PgPool extends Queryable {
  connect(): Promise<PgClient>;
  end(): Promise<void>;
  on(event: 'error', fn: (err: Error) => void): void;
}
interface PgModule {
  Pool: new (options: { connectionString: string; max: number; application_name?: string }) => PgPool;
}

interface GwHelpers {
  withPgClient<T>(fn: (client: Queryable) => Promise<T>): Promise<T>;
}
type GwTask = (payload: unknown, helpers: GwHelpers) => Promise<void>;
interface GwRunner {
  stop(): Promise<void>;
}
interface GwModule {
  run(options: Record<string, unknown>): Promise<GwRunner>;
  runMigrations(options: Record<string, unknown>): Promise<void>;
  Logger: new (factory: () => () => void) => unknown;
}

interface BossDb {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: Row[] }>;
}
interface BossJob {
  id: string;
  data: JobData;
}
interface Boss {
  start(): Promise<unknown>;
  stop(options?: Record<string, unknown>): Promise<void>;
  on(event: 'error', fn: (err: Error) => void): void;
  createQueue(name: string, options: Record<string, unknown>): Promise<void>;
  insert(name: string, jobs: Record<string, unknown>[], options?: { db?: BossDb }): Promise<unknown>;
  work(
    name: string,
    options: Record<string, unknown>,
    handler: (jobs: BossJob[], db?: BossDb) => Promise<unknown>,
  ): Promise<string>;
  upsert(name: string, data: object, options: Record<string, unknown>): Promise<unknown>;
}
interface BossModule {
  PgBoss: new (options: Record<string, unknown>) => Boss;
}

/** Kept out of TypeScript's reach so the repository builds without the candidates installed. */
const importModule = (name: string): Promise<unknown> => import(name);

async function loadPg(): Promise<PgModule> {
  const mod = (await importModule('pg')) as { default?: PgModule } & PgModule;
  return mod.default ?? mod;
}

// ---------------------------------------------------------------------------------------------
// Arguments and small helpers.

type Engine = 'gw' | 'boss';

interface Args {
  scenario: string;
  engine: Engine;
  url: string;
  concurrency: number;
  jobs: number;
  keys: number;
  /** Jobs per enqueue transaction. */
  batch: number;
  /** interleaved: event k of every proposal, then k+1; grouped: a proposal's events together. */
  layout: 'interleaved' | 'grouped';
  /** Every Nth proposal's 4th event fails on its first attempt (0: none). */
  failEvery: number;
  rate: number;
  seconds: number;
  /** pg-boss: LISTEN/NOTIFY wake-ups instead of polling only. */
  notify: boolean;
  /** pg-boss: job ids that sort in enqueue order (ties on created_on are then broken by them). */
  orderedIds: boolean;
  /** graphile-worker crash run: a surviving worker unlocks the pools of dead workers. */
  reaper: boolean;
  /** Milliseconds a handler holds its transaction open (simulated work). */
  handlerMs: number;
  design: 'event' | 'kick';
  /**
   * Milliseconds a handler waits after its effects are written and before the job completes:
   * graphile-worker after our COMMIT (completion is a later, separate statement), pg-boss at the
   * end of the transactional handler (before pg-boss commits effects and completion together).
   * A crash test with it shows which engine can run a job again after its effects committed.
   */
  afterCommitMs: number;
  /**
   * kick: `SET LOCAL synchronous_commit = off` in the processing transaction. Safe for the same
   * reason as the SQLite pipeline's synchronous=NORMAL: a commit lost to a server crash loses the
   * effects together with their done marks (and the job's completion), so the events run again.
   */
  asyncCommit: boolean;
  /** Baseline without per-proposal serialisation (graphile-worker: no queue_name; pg-boss: standard policy). */
  unordered: boolean;
  /** graphile-worker: idle poll interval in ms (new jobs also wake it by LISTEN/NOTIFY). */
  pollMs: number;
  /**
   * pg-boss: jobs per fetch (one transaction each, transactional mode). pg-boss waits its polling
   * interval (at least 500 ms) after every fetch unless the fetch came back full (burstWhenBatchFull),
   * so a batch of 1 caps a worker at two jobs a second.
   */
  bossBatch: number;
  name: string;
}

function parseArgs(argv: string[]): Args {
  const get = (flag: string, fallback: string): string => {
    const i = argv.indexOf(`--${flag}`);
    return i >= 0 && argv[i + 1] !== undefined ? (argv[i + 1] as string) : fallback;
  };
  const has = (flag: string): boolean => argv.includes(`--${flag}`);
  const engine = get('engine', 'gw');
  if (engine !== 'gw' && engine !== 'boss') throw new Error(`--engine gw|boss, not ${engine}`);
  const design = get('design', 'event');
  if (design !== 'event' && design !== 'kick') throw new Error('--design event|kick');
  const layout = get('layout', 'interleaved');
  if (layout !== 'interleaved' && layout !== 'grouped') throw new Error('--layout interleaved|grouped');
  return {
    scenario: argv[0] ?? 'help',
    engine,
    url: get('url', process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:55432/postgres'),
    concurrency: Number(get('concurrency', '4')),
    jobs: Number(get('jobs', '20000')),
    keys: Number(get('keys', '2000')),
    batch: Number(get('batch', '1000')),
    layout,
    failEvery: Number(get('fail-every', '0')),
    rate: Number(get('rate', '200')),
    seconds: Number(get('seconds', '15')),
    notify: has('notify'),
    orderedIds: has('ordered-ids'),
    reaper: has('reaper'),
    handlerMs: Number(get('handler-ms', '0')),
    design,
    afterCommitMs: Number(get('after-commit-ms', '0')),
    asyncCommit: has('async-commit'),
    unordered: has('unordered'),
    pollMs: Number(get('poll-ms', '2000')),
    bossBatch: Number(get('boss-batch', '8')),
    name: get('name', `w${process.pid}`),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

/** A uuid whose text order is `n`'s numeric order: pg-boss accepts caller-chosen job ids. */
function orderedUuid(n: number): string {
  const hex = n.toString(16).padStart(12, '0');
  return `00000000-0000-4000-8000-${hex}`;
}

function report(result: Record<string, unknown>): void {
  console.log(JSON.stringify({ ...result, load: load() }));
}

// ---------------------------------------------------------------------------------------------
// The application side: the effect tables and the handler's transaction.

interface JobData {
  id: number;
  nu: string;
  seq: number;
}

const QUEUE = 'ev';

async function resetBench(pool: PgPool, engine: Engine, keys: number): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS bench CASCADE`);
  await pool.query(
    engine === 'gw'
      ? 'DROP SCHEMA IF EXISTS graphile_worker CASCADE'
      : 'DROP SCHEMA IF EXISTS pgboss CASCADE',
  );
  await pool.query(`CREATE SCHEMA bench`);
  await pool.query(
    `CREATE TABLE bench.proposals (nu text PRIMARY KEY, n int NOT NULL DEFAULT 0, updated_at timestamptz)`,
  );
  // The effect, and the processed marker: one row per event id, written with the proposal's update.
  await pool.query(`CREATE TABLE bench.effects (
    event_id bigint PRIMARY KEY, nu text NOT NULL, seq int NOT NULL, worker text NOT NULL,
    bad_n int, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  // A handler run that found its effect already there (the engine ran the job again).
  await pool.query(`CREATE TABLE bench.dups (event_id bigint NOT NULL, worker text NOT NULL)`);
  await pool.query(`CREATE TABLE bench.failed_once (event_id bigint PRIMARY KEY)`);
  // The `kick` design's event log (in the product: the events table the relay fills).
  await pool.query(`CREATE TABLE bench.events (
    id bigint PRIMARY KEY, nu text NOT NULL, seq int NOT NULL, status text NOT NULL DEFAULT 'pending')`);
  await pool.query(`CREATE INDEX events_pending ON bench.events (nu, id) WHERE status = 'pending'`);
  await pool.query(`INSERT INTO bench.proposals (nu) SELECT 'n' || g FROM generate_series(0, $1 - 1) g`, [
    keys,
  ]);
}

class InjectedFailure extends Error {}

/**
 * The handler's transaction (BEGIN/COMMIT are the caller's). Returns false when the event's effect
 * was already there: the job ran before and its completion was lost, so it changes nothing.
 */
async function applyEvent(db: Queryable, job: JobData, worker: string, handlerMs: number): Promise<boolean> {
  const marker = await db.query(
    `INSERT INTO bench.effects (event_id, nu, seq, worker) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
    [job.id, job.nu, job.seq, worker],
  );
  if (marker.rowCount === 0) return false;
  const { rows } = await db.query<{ n: number }>(
    `UPDATE bench.proposals SET n = n + 1, updated_at = now() WHERE nu = $1 RETURNING n`,
    [job.nu],
  );
  const n = rows[0]?.n ?? -1;
  if (n !== job.seq + 1)
    await db.query(`UPDATE bench.effects SET bad_n = $2 WHERE event_id = $1`, [job.id, n]);
  if (handlerMs > 0) await sleep(handlerMs);
  return true;
}

/** Fails the event's first attempt when fail injection picks it (recorded outside the transaction). */
async function maybeFail(pool: Queryable, job: JobData, failEvery: number): Promise<void> {
  if (failEvery <= 0 || job.seq !== 3 || Number(job.nu.slice(1)) % failEvery !== 0) return;
  const first = await pool.query(`INSERT INTO bench.failed_once VALUES ($1) ON CONFLICT DO NOTHING`, [
    job.id,
  ]);
  if (first.rowCount === 1) throw new InjectedFailure(`injected failure of event ${job.id}`);
}

async function recordDup(pool: Queryable, job: JobData, worker: string): Promise<void> {
  await pool.query(`INSERT INTO bench.dups VALUES ($1, $2)`, [job.id, worker]);
}

/** The `kick` design's relay step: the events, in the caller's transaction. */
async function insertEvents(client: Queryable, jobs: JobData[]): Promise<void> {
  await client.query(
    `INSERT INTO bench.events (id, nu, seq) SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[])`,
    [jobs.map((j) => j.id), jobs.map((j) => j.nu), jobs.map((j) => j.seq)],
  );
}

/** Distinct proposal keys of a batch, in first-seen order. */
const keysOf = (jobs: JobData[]): string[] => [...new Set(jobs.map((j) => j.nu))];

/** Events of one key a kick processes per transaction; more left → the kick is queued again. */
const KICK_LIMIT = 64;

/**
 * The `kick` handler (caller's transaction): the key's pending events in id order, their effects
 * and their done marks together. The advisory lock serialises two kicks of one key that run at
 * once (a kick added while another runs). Returns whether events are left for another kick.
 */
async function processKey(
  db: Queryable,
  nu: string,
  worker: string,
  pool: Queryable,
  failEvery: number,
  handlerMs = 0,
  onStart?: (job: JobData) => void,
  asyncCommit = false,
): Promise<boolean> {
  if (asyncCommit) await db.query(`SET LOCAL synchronous_commit = off`);
  await db.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`p:${nu}`]);
  const { rows } = await db.query<{ id: string; seq: number }>(
    `SELECT id, seq FROM bench.events WHERE nu = $1 AND status = 'pending' ORDER BY id LIMIT ${KICK_LIMIT}`,
    [nu],
  );
  for (const row of rows) {
    const job = { id: Number(row.id), nu, seq: row.seq };
    onStart?.(job);
    await maybeFail(pool, job, failEvery);
    await applyEventReturning(db, job, worker, handlerMs);
  }
  if (rows.length > 0)
    await db.query(`UPDATE bench.events SET status = 'done' WHERE id = ANY($1::bigint[])`, [
      rows.map((r) => r.id),
    ]);
  return rows.length === KICK_LIMIT;
}

function makeJobs(args: Args): JobData[] {
  const perKey = Math.ceil(args.jobs / args.keys);
  const jobs: JobData[] = [];
  if (args.layout === 'interleaved') {
    for (let seq = 0; seq < perKey; seq++)
      for (let k = 0; k < args.keys && jobs.length < args.jobs; k++) jobs.push({ id: 0, nu: `n${k}`, seq });
  } else {
    for (let k = 0; k < args.keys; k++)
      for (let seq = 0; seq < perKey && jobs.length < args.jobs; seq++)
        jobs.push({ id: 0, nu: `n${k}`, seq });
  }
  jobs.forEach((j, i) => (j.id = i + 1));
  return jobs;
}

interface Verdict {
  applied: number;
  missing: number;
  orderViolations: number;
  proposalsWrongCount: number;
  handlerReruns: number;
}

async function verify(pool: PgPool, total: number, keys: number, perKey: number): Promise<Verdict> {
  const one = async (sql: string): Promise<number> =>
    Number((await pool.query<{ c: string }>(sql)).rows[0]?.c ?? 0);
  const applied = await one(`SELECT count(*) c FROM bench.effects`);
  return {
    applied,
    missing: total - applied,
    orderViolations: await one(`SELECT count(*) c FROM bench.effects WHERE bad_n IS NOT NULL`),
    proposalsWrongCount: await one(
      `SELECT count(*) c FROM bench.proposals WHERE n <> ${perKey} AND substr(nu, 2)::int < ${keys}`,
    ),
    handlerReruns: await one(`SELECT count(*) c FROM bench.dups`),
  };
}

// ---------------------------------------------------------------------------------------------
// The engines, behind one small interface.

interface Worker {
  /** graphile-worker's pool id (its jobs' locked_by), when known. */
  id(): string | undefined;
  stop(): Promise<void>;
}

interface EngineAdapter {
  migrate(): Promise<void>;
  /** Adds the jobs inside the caller's transaction (the relay's), so they commit with it. */
  enqueue(client: PgClient, jobs: JobData[], orderedIds: boolean): Promise<void>;
  startWorker(options: {
    concurrency: number;
    worker: string;
    onStart?: (job: JobData) => void;
    failEvery: number;
    handlerMs: number;
  }): Promise<Worker>;
  /** The event ids (or proposal keys, for kicks) of the jobs claimed now; by one graphile-worker pool if given. */
  claimed(pool: PgPool, poolId?: string): Promise<string[]>;
  close(): Promise<void>;
}

async function graphileWorker(pool: PgPool, args: Args): Promise<EngineAdapter> {
  const gw = (await importModule('graphile-worker')) as GwModule;
  const logger = new gw.Logger(() => () => undefined);
  const runners: GwRunner[] = [];
  return {
    migrate: () => gw.runMigrations({ pgPool: pool, logger }),
    async enqueue(client, jobs) {
      if (args.design === 'kick') {
        await insertEvents(client, jobs);
        // job_key per proposal: a kick still waiting absorbs the new one (one pending per key).
        const kicks = keysOf(jobs).map((nu) => ({ identifier: 'kick', payload: { nu }, job_key: `p:${nu}` }));
        await client.query(
          `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
             SELECT json_populate_record(NULL::graphile_worker.job_spec, x) FROM json_array_elements($1::json) x))`,
          [JSON.stringify(kicks)],
        );
        return;
      }
      // queue_name per proposal: graphile-worker runs the jobs of one named queue one at a time.
      const specs = jobs.map((j) => ({
        identifier: 'ev',
        payload: j,
        queue_name: args.unordered ? null : `p:${j.nu}`,
        max_attempts: 25,
      }));
      await client.query(
        `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
           SELECT json_populate_record(NULL::graphile_worker.job_spec, x) FROM json_array_elements($1::json) x))`,
        [JSON.stringify(specs)],
      );
    },
    async startWorker({ concurrency, worker, onStart, failEvery, handlerMs }) {
      const ev: GwTask = async (payload, helpers) => {
        const job = payload as JobData;
        onStart?.(job);
        await maybeFail(pool, job, failEvery);
        const fresh = await helpers.withPgClient(async (client) => {
          await client.query('BEGIN');
          try {
            const applied = await applyEvent(client, job, worker, handlerMs);
            await client.query(applied ? 'COMMIT' : 'ROLLBACK');
            return applied;
          } catch (err) {
            await client.query('ROLLBACK');
            throw err;
          }
        });
        if (!fresh) await recordDup(pool, job, worker);
        if (args.afterCommitMs > 0) await sleep(args.afterCommitMs);
      };
      const kick: GwTask = async (payload, helpers) => {
        const { nu } = payload as { nu: string };
        const more = await helpers.withPgClient(async (client) => {
          await client.query('BEGIN');
          try {
            const left = await processKey(
              client,
              nu,
              worker,
              pool,
              failEvery,
              handlerMs,
              onStart,
              args.asyncCommit,
            );
            await client.query('COMMIT');
            return left;
          } catch (err) {
            await client.query('ROLLBACK');
            throw err;
          }
        });
        if (more)
          await pool.query(
            `SELECT graphile_worker.add_job('kick', json_build_object('nu', $1::text), job_key := $2)`,
            [nu, `p:${nu}`],
          );
      };
      let poolId: string | undefined;
      const events = new EventEmitter();
      events.on('pool:create', (e: { workerPool: { id: string } }) => (poolId = e.workerPool.id));
      const runner = await gw.run({
        pgPool: pool,
        concurrency,
        noHandleSignals: true,
        pollInterval: args.pollMs,
        logger,
        taskList: { ev, kick },
        events,
      });
      runners.push(runner);
      return { id: () => poolId, stop: () => runner.stop() };
    },
    async claimed(p, poolId) {
      const { rows } = await p.query<{ id: string }>(
        `SELECT coalesce(payload->>'id', payload->>'nu') id FROM graphile_worker._private_jobs
         WHERE locked_at IS NOT NULL AND ($1::text IS NULL OR locked_by = $1)`,
        [poolId ?? null],
      );
      return rows.map((r) => r.id);
    },
    async close() {
      await Promise.all(runners.map((r) => r.stop().catch(() => undefined)));
    },
  };
}

async function pgBoss(pool: PgPool, args: Args): Promise<EngineAdapter> {
  const { PgBoss } = (await importModule('pg-boss')) as BossModule;
  const boss = new PgBoss({
    connectionString: args.url,
    schema: 'pgboss',
    max: args.concurrency + 6,
    useListenNotify: args.notify,
    // Takeover after a crash: a job's claim lapses after expireInSeconds, and expiry is checked in
    // the monitor pass, which runs every max(monitorIntervalSeconds, superviseIntervalSeconds): both
    // default to 60 s, so both must come down.
    superviseIntervalSeconds: 2,
    monitorIntervalSeconds: 2,
  });
  boss.on('error', (err) => console.error(`pg-boss error: ${err.message}`));
  const asDb = (client: Queryable): BossDb => ({
    executeSql: async (text, values) => ({ rows: (await client.query(text, values)).rows }),
  });
  return {
    async migrate() {
      await boss.start();
      await boss.createQueue(QUEUE, {
        // kick: stately = at most one queued and one active job per key (the queued one absorbs
        // further kicks, and waits while the key's active one runs).
        policy: args.design === 'kick' ? 'stately' : args.unordered ? 'standard' : 'key_strict_fifo',
        retryLimit: 25,
        retryDelay: 1,
        expireInSeconds: 10,
        notify: args.notify,
      });
    },
    async enqueue(client, jobs, orderedIds) {
      if (args.design === 'kick') {
        await insertEvents(client, jobs);
        await boss.insert(
          QUEUE,
          keysOf(jobs).map((nu) => ({ data: { id: 0, nu, seq: -1 }, singletonKey: `p:${nu}` })),
          { db: asDb(client) },
        );
        return;
      }
      await boss.insert(
        QUEUE,
        jobs.map((j) => ({
          data: j,
          singletonKey: `p:${j.nu}`,
          ...(orderedIds ? { id: orderedUuid(j.id) } : {}),
        })),
        { db: asDb(client) },
      );
    },
    async startWorker({ concurrency, worker, onStart, failEvery, handlerMs }) {
      // transactional: pg-boss opens the transaction, hands it to the handler, and completes the job
      // in it: the effects and the completion commit together.
      await boss.work(
        QUEUE,
        {
          localConcurrency: concurrency,
          batchSize: args.bossBatch,
          burstWhenBatchFull: args.bossBatch > 1,
          transactional: true,
          pollingIntervalSeconds: 0.5,
          notifyPollingIntervalSeconds: 30,
        },
        async (jobs, db) => {
          for (const { data: job } of jobs) {
            if (args.design === 'kick') {
              const tx: Queryable = {
                query: async <R>(text: string, values?: unknown[]) => ({
                  rows: (await (db as BossDb).executeSql(text, values)).rows as R[],
                  rowCount: null,
                }),
              };
              if (await processKey(tx, job.nu, worker, pool, failEvery, handlerMs, onStart, args.asyncCommit))
                await boss.insert(QUEUE, [{ data: job, singletonKey: `p:${job.nu}` }]);
              continue;
            }
            onStart?.(job);
            await maybeFail(pool, job, failEvery);
            const tx: Queryable = {
              query: async <R>(text: string, values?: unknown[]) => {
                const rows = (await (db as BossDb).executeSql(text, values)).rows as R[];
                return { rows, rowCount: null };
              },
            };
            // executeSql returns rows only: the marker insert says whether it inserted by RETURNING.
            const fresh = await applyEventReturning(tx, job, worker, handlerMs);
            if (!fresh) await recordDup(pool, job, worker);
            if (args.afterCommitMs > 0) await sleep(args.afterCommitMs);
          }
        },
      );
      return { id: () => undefined, stop: () => boss.stop({ graceful: true, close: false }) };
    },
    async claimed(p) {
      const { rows } = await p.query<{ id: string }>(
        `SELECT CASE WHEN (data->>'seq')::int < 0 THEN data->>'nu' ELSE data->>'id' END id
         FROM pgboss.job WHERE name = $1 AND state = 'active'`,
        [QUEUE],
      );
      return rows.map((r) => r.id);
    },
    async close() {
      await boss.stop({ graceful: true, close: true, timeout: 5000 });
    },
  };
}

/** applyEvent for an executor that returns rows but no row count (pg-boss's `db`). */
async function applyEventReturning(
  db: Queryable,
  job: JobData,
  worker: string,
  handlerMs: number,
): Promise<boolean> {
  const marker = await db.query(
    `INSERT INTO bench.effects (event_id, nu, seq, worker) VALUES ($1, $2, $3, $4)
     ON CONFLICT DO NOTHING RETURNING event_id`,
    [job.id, job.nu, job.seq, worker],
  );
  if (marker.rows.length === 0) return false;
  const { rows } = await db.query<{ n: number }>(
    `UPDATE bench.proposals SET n = n + 1, updated_at = now() WHERE nu = $1 RETURNING n`,
    [job.nu],
  );
  const n = rows[0]?.n ?? -1;
  if (n !== job.seq + 1)
    await db.query(`UPDATE bench.effects SET bad_n = $2 WHERE event_id = $1`, [job.id, n]);
  if (handlerMs > 0) await sleep(handlerMs);
  return true;
}

const makeEngine = (pool: PgPool, args: Args): Promise<EngineAdapter> =>
  args.engine === 'gw' ? graphileWorker(pool, args) : pgBoss(pool, args);

async function enqueueAll(pool: PgPool, engine: EngineAdapter, jobs: JobData[], args: Args): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < jobs.length; i += args.batch) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await engine.enqueue(client, jobs.slice(i, i + args.batch), args.orderedIds);
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    } finally {
      client.release();
    }
  }
  return (performance.now() - t0) / 1000;
}

async function waitForApplied(pool: PgPool, total: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const { rows } = await pool.query<{ c: string }>(`SELECT count(*) c FROM bench.effects`);
    if (Number(rows[0]?.c) >= total) return true;
    await sleep(50);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

async function throughput(pool: PgPool, args: Args): Promise<void> {
  await resetBench(pool, args.engine, args.keys);
  const engine = await makeEngine(pool, args);
  await engine.migrate();
  const jobs = makeJobs(args);
  const enqueueSeconds = await enqueueAll(pool, engine, jobs, args);
  const t0 = performance.now();
  const worker = await engine.startWorker({
    concurrency: args.concurrency,
    worker: args.name,
    failEvery: args.failEvery,
    handlerMs: args.handlerMs,
  });
  const done = await waitForApplied(pool, jobs.length, 600_000);
  const drainSeconds = (performance.now() - t0) / 1000;
  const loadAtEnd = load();
  await worker.stop();
  await engine.close();
  const verdict = await verify(pool, jobs.length, args.keys, Math.ceil(args.jobs / args.keys));
  report({
    scenario: 'throughput',
    engine: args.engine,
    concurrency: args.concurrency,
    ...(args.engine === 'boss'
      ? { bossBatch: args.bossBatch, notify: args.notify }
      : { pollMs: args.pollMs }),
    unordered: args.unordered,
    design: args.design,
    asyncCommit: args.asyncCommit,
    layout: args.layout,
    batch: args.batch,
    failEvery: args.failEvery,
    orderedIds: args.orderedIds,
    jobs: jobs.length,
    enqueueJobsPerS: Math.round(jobs.length / enqueueSeconds),
    drainSeconds: Number(drainSeconds.toFixed(2)),
    jobsPerS: Math.round(jobs.length / drainSeconds),
    done,
    loadAtEnd,
    ...verdict,
  });
}

/** The ceiling: the same handler transactions, no engine, `--concurrency` connections in parallel. */
async function baseline(pool: PgPool, args: Args): Promise<void> {
  await resetBench(pool, args.engine, args.keys);
  const jobs = makeJobs(args);
  // Each connection takes whole proposals, so order holds without any queue.
  const lanes: JobData[][] = Array.from({ length: args.concurrency }, () => []);
  for (const job of [...jobs].sort((x, y) => x.id - y.id)) {
    lanes[Number(job.nu.slice(1)) % args.concurrency]?.push(job);
  }
  for (const lane of lanes) lane.sort((x, y) => x.seq - y.seq || x.id - y.id);
  const t0 = performance.now();
  await Promise.all(
    lanes.map(async (lane) => {
      const client = await pool.connect();
      try {
        for (const job of lane) {
          await client.query('BEGIN');
          await applyEvent(client, job, args.name, 0);
          await client.query('COMMIT');
        }
      } finally {
        client.release();
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const verdict = await verify(pool, jobs.length, args.keys, Math.ceil(args.jobs / args.keys));
  report({
    scenario: 'baseline',
    concurrency: args.concurrency,
    jobs: jobs.length,
    jobsPerS: Math.round(jobs.length / seconds),
    ...verdict,
  });
}

async function latency(pool: PgPool, args: Args): Promise<void> {
  await resetBench(pool, args.engine, args.keys);
  const engine = await makeEngine(pool, args);
  await engine.migrate();
  const committed = new Map<number, number>();
  const started = new Map<number, number>();
  const worker = await engine.startWorker({
    concurrency: args.concurrency,
    worker: args.name,
    failEvery: 0,
    handlerMs: 0,
    onStart: (job) => started.set(job.id, performance.now()),
  });
  await sleep(1000);
  const total = Math.round(args.rate * args.seconds);
  const t0 = performance.now();
  for (let i = 1; i <= total; i++) {
    // One transaction per job, as a relay under light load would commit them.
    const due = t0 + ((i - 1) * 1000) / args.rate;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await engine.enqueue(client, [{ id: i, nu: `n${i % args.keys}`, seq: 0 }], args.orderedIds);
      await client.query('COMMIT');
      committed.set(i, performance.now());
    } finally {
      client.release();
    }
  }
  await waitForApplied(pool, total, 120_000);
  await worker.stop();
  await engine.close();
  const lat: number[] = [];
  let beforeCommitAck = 0;
  for (const [id, c] of committed) {
    const s = started.get(id);
    if (s === undefined) continue;
    if (s < c) beforeCommitAck += 1;
    lat.push(Math.max(0, s - c));
  }
  lat.sort((a, b) => a - b);
  report({
    scenario: 'latency',
    engine: args.engine,
    notify: args.notify,
    design: args.design,
    rate: args.rate,
    jobs: total,
    measured: lat.length,
    startedBeforeCommitAck: beforeCommitAck,
    p50Ms: Number(percentile(lat, 50).toFixed(1)),
    p99Ms: Number(percentile(lat, 99).toFixed(1)),
    maxMs: Number(percentile(lat, 100).toFixed(1)),
  });
}

/** Child process mode for `crash`: one worker, until killed. */
async function workerProcess(pool: PgPool, args: Args): Promise<void> {
  const engine = await makeEngine(pool, args);
  if (args.engine === 'boss') await engine.migrate(); // starts pg-boss (the queue exists already)
  const worker = await engine.startWorker({
    concurrency: args.concurrency,
    worker: args.name,
    failEvery: 0,
    handlerMs: args.handlerMs,
  });
  let poolId = worker.id();
  for (let i = 0; i < 50 && poolId === undefined && args.engine === 'gw'; i++) {
    await sleep(20);
    poolId = worker.id();
  }
  // Liveness for graphile-worker's locks: a session advisory lock named after the pool, which
  // PostgreSQL releases the moment this process's connection is gone.
  const liveness = await pool.connect();
  if (poolId !== undefined)
    await liveness.query(`SELECT pg_advisory_lock(hashtext($1))`, [`gw-pool:${poolId}`]);
  console.log(JSON.stringify({ ready: args.name, poolId: poolId ?? null }));
  if (args.reaper && args.engine === 'gw') void reaper(pool, poolId ?? '');
  await new Promise<void>(() => undefined); // until SIGKILL or SIGTERM
}

/**
 * graphile-worker leaves a crashed pool's jobs and named queues locked for 4 hours (hard-coded).
 * Every second, unlock the pools whose liveness lock nobody holds (force_unlock_workers).
 */
async function reaper(pool: PgPool, self: string): Promise<void> {
  for (;;) {
    await sleep(1000);
    try {
      const { rows } = await pool.query<{ locked_by: string }>(
        `SELECT DISTINCT locked_by FROM graphile_worker._private_job_queues WHERE locked_by IS NOT NULL
         UNION SELECT DISTINCT locked_by FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL`,
      );
      for (const { locked_by: id } of rows) {
        if (id === self) continue;
        const client = await pool.connect();
        try {
          const { rows: got } = await client.query<{ ok: boolean }>(
            `SELECT pg_try_advisory_lock(hashtext($1)) ok`,
            [`gw-pool:${id}`],
          );
          if (got[0]?.ok) {
            await client.query(`SELECT pg_advisory_unlock(hashtext($1))`, [`gw-pool:${id}`]);
            await client.query(`SELECT graphile_worker.force_unlock_workers($1::text[])`, [[id]]);
            console.log(JSON.stringify({ reaped: id, at: Date.now() }));
          }
        } finally {
          client.release();
        }
      }
    } catch (err) {
      console.error(`reaper: ${(err as Error).message}`);
    }
  }
}

interface SpawnedWorker {
  child: ChildProcess;
  poolId: string | undefined;
}

function spawnWorker(args: Args, name: string): Promise<SpawnedWorker> {
  const flags = [
    'worker',
    '--engine',
    args.engine,
    '--url',
    args.url,
    '--concurrency',
    String(args.concurrency),
    '--handler-ms',
    String(args.handlerMs),
    '--name',
    name,
    '--design',
    args.design,
    '--boss-batch',
    String(args.bossBatch),
    '--after-commit-ms',
    String(args.afterCommitMs),
    ...(args.orderedIds ? ['--ordered-ids'] : []),
    ...(args.reaper ? ['--reaper'] : []),
  ];
  const child = spawn(process.execPath, [__filename, ...flags], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        const msg = JSON.parse(line) as {
          ready?: string;
          poolId?: string | null;
          reaped?: string;
          at?: number;
        };
        if (msg.ready) resolve({ child, poolId: msg.poolId ?? undefined });
        if (msg.reaped) reaped.push({ by: name, pool: msg.reaped, at: msg.at ?? 0 });
      }
    });
    child.on('exit', (code) => reject(new Error(`worker ${name} exited with ${code}`)));
  });
}

const reaped: { by: string; pool: string; at: number }[] = [];

/**
 * What an orphan is: an event id (event design), or a proposal key whose kick A held (kick design;
 * its events then count from the kill).
 */
async function crash(pool: PgPool, args: Args): Promise<void> {
  await resetBench(pool, args.engine, args.keys);
  const engine = await makeEngine(pool, args);
  await engine.migrate();
  const jobs = makeJobs(args);
  await enqueueAll(pool, engine, jobs, args);
  if (args.engine === 'boss') await engine.close();
  const a = await spawnWorker(args, 'A');
  const b = await spawnWorker(args, 'B');
  await sleep(1500);
  // Kill A while it holds claims. For graphile-worker its claims are known (locked_by = its pool);
  // for pg-boss, the claims at the kill that A had not finished: B's own finish within milliseconds.
  let claimedAtKill: string[] = [];
  for (let i = 0; i < 500 && claimedAtKill.length === 0; i++) {
    claimedAtKill = await engine.claimed(pool, a.poolId);
    if (claimedAtKill.length === 0) await sleep(10);
  }
  a.child.kill('SIGKILL');
  const killedAt = Date.now();
  await sleep(200);
  const kick = args.design === 'kick';
  const { rows: byA } = await pool.query<{ id: string }>(
    `SELECT ${kick ? 'DISTINCT nu' : 'event_id'}::text id FROM bench.effects WHERE worker = 'A'`,
  );
  const doneByA = new Set(byA.map((r) => r.id));
  const orphans = kick ? claimedAtKill : claimedAtKill.filter((id) => !doneByA.has(id));
  const timeoutMs = args.engine === 'gw' && !args.reaper ? 60_000 : 120_000;
  const allDone = await waitForApplied(pool, jobs.length, timeoutMs);
  const { rows } = await pool.query<{ id: string; at: Date; worker: string }>(
    kick
      ? `SELECT nu id, min(applied_at) at, min(worker) worker FROM bench.effects
         WHERE nu = ANY($1::text[]) AND applied_at > to_timestamp(${killedAt} / 1000.0) GROUP BY nu`
      : `SELECT event_id::text id, applied_at at, worker FROM bench.effects WHERE event_id::text = ANY($1::text[])`,
    [orphans],
  );
  const late = rows
    .filter((r) => r.worker !== 'A')
    .map((r) => r.at.getTime() - killedAt)
    .filter((ms) => ms > (args.engine === 'gw' ? 0 : 1000))
    .sort((x, y) => x - y);
  const appliedIds = new Set(rows.map((r) => r.id));
  b.child.kill('SIGTERM');
  const verdict = await verify(pool, jobs.length, args.keys, Math.ceil(args.jobs / args.keys));
  report({
    scenario: 'crash',
    engine: args.engine,
    reaper: args.reaper,
    afterCommitMs: args.afterCommitMs,
    jobs: jobs.length,
    design: args.design,
    orphans: orphans.length,
    orphansRunElsewhere: late.length,
    orphansNeverRun: orphans.filter((id) => !appliedIds.has(id)).length,
    takeoverMsMin: late.length ? late[0] : null,
    takeoverMsMax: late.length ? late[late.length - 1] : null,
    reapedAfterMs: reaped.map((r) => r.at - killedAt),
    allDoneWithinTimeout: allDone,
    timeoutMs,
    ...verdict,
  });
}

async function schedule(pool: PgPool, args: Args): Promise<void> {
  await resetBench(pool, args.engine, 1);
  const ran: { at: number; data: string }[] = [];
  const t0 = Date.now();
  if (args.engine === 'gw') {
    const gw = (await importModule('graphile-worker')) as GwModule;
    const logger = new gw.Logger(() => () => undefined);
    await gw.runMigrations({ pgPool: pool, logger });
    const add = (runInMs: number, tag: string): Promise<QueryResult<Row>> =>
      pool.query(
        `SELECT id FROM graphile_worker.add_job('poll', json_build_object('requestId', 'REQ-1', 'tag', $2::text),
           job_key := 'r:REQ-1', run_at := now() + ($1::int * interval '1 millisecond'))`,
        [runInMs, tag],
      );
    await add(3000, 'first');
    await add(1000, 'rescheduled'); // same key: replaces the pending job
    const { rows } = await pool.query<{ c: string }>(
      `SELECT count(*) c FROM graphile_worker._private_jobs WHERE key = 'r:REQ-1'`,
    );
    const runner = await gw.run({
      pgPool: pool,
      concurrency: 2,
      noHandleSignals: true,
      pollInterval: 500,
      logger,
      taskList: {
        poll: async (payload: unknown) => {
          ran.push({ at: Date.now() - t0, data: JSON.stringify(payload) });
        },
      },
    });
    await sleep(4000);
    await runner.stop();
    report({ scenario: 'schedule', engine: 'gw', pendingJobsForKey: Number(rows[0]?.c), ran });
  } else {
    const { PgBoss } = (await importModule('pg-boss')) as BossModule;
    const boss = new PgBoss({ connectionString: args.url, schema: 'pgboss', max: 6 });
    boss.on('error', (err) => console.error(err.message));
    await boss.start();
    // stately: one queued and one active job per key, so a running poll can queue its successor.
    await boss.createQueue('poll', { policy: 'stately', retryLimit: 5, expireInSeconds: 30 });
    const inAbout = (ms: number): Date => new Date(Date.now() + ms);
    await boss.upsert(
      'poll',
      { requestId: 'REQ-1', tag: 'first' },
      { singletonKey: 'r:REQ-1', startAfter: inAbout(3000) },
    );
    await boss.upsert(
      'poll',
      { requestId: 'REQ-1', tag: 'rescheduled' },
      { singletonKey: 'r:REQ-1', startAfter: inAbout(1000) },
    );
    const { rows } = await pool.query<{ c: string }>(
      `SELECT count(*) c FROM pgboss.job WHERE name = 'poll' AND singleton_key = 'r:REQ-1' AND state < 'active'`,
    );
    await boss.work('poll', { pollingIntervalSeconds: 0.5 }, async (jobs) => {
      for (const j of jobs) ran.push({ at: Date.now() - t0, data: JSON.stringify(j.data) });
    });
    await sleep(4000);
    await boss.stop({ graceful: true, close: true, timeout: 3000 });
    report({ scenario: 'schedule', engine: 'boss', pendingJobsForKey: Number(rows[0]?.c), ran });
  }
}

async function main(argv: string[]): Promise<void> {
  const args = parseArgs(argv);
  const { Pool } = await loadPg();
  const pool = new Pool({
    connectionString: args.url,
    max: args.concurrency + 8,
    application_name: `bench-${args.name}`,
  });
  pool.on('error', (err) => console.error(`pool: ${err.message}`));
  try {
    switch (args.scenario) {
      case 'throughput':
        return await throughput(pool, args);
      case 'latency':
        return await latency(pool, args);
      case 'baseline':
        return await baseline(pool, args);
      case 'crash':
        return await crash(pool, args);
      case 'schedule':
        return await schedule(pool, args);
      case 'worker':
        return await workerProcess(pool, args);
      default:
        console.log('usage: node pg-engines.js throughput|latency|crash|schedule --engine gw|boss [options]');
    }
  } finally {
    await pool.end().catch(() => undefined);
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    () => process.exit(0),
    (err: Error) => {
      console.error(err.stack ?? err.message);
      process.exit(1);
    },
  );
}
