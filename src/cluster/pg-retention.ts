import type { Client } from 'pg';
import type { PgBoss } from 'pg-boss';
import {
  BODY_PRUNABLE_STATUSES,
  type PruneSummary,
  RETENTION_BATCH,
  removableMessages,
  retentionCutoff,
  retentionLog,
} from '../domain/retention';
import { type Sql, sqlOf } from './sql';

/**
 * RETENTION_DAYS and `prune` on PostgreSQL (cluster mode, contract §10): the rule of SQLite mode
 * (domain/retention.ts, which both stores read) applied to the shared tables, in batches of one
 * short transaction each, so that the relay and the kicks never wait on it for long. A pass that
 * stops half-way (a replica dies, shuts down, loses PostgreSQL) leaves only whole batches behind;
 * the next pass walks the table again and finds what is left. Which rows go, the batch sizes and
 * the log lines are domain/retention.ts's, as store/retention.ts's on SQLite; the statements are
 * PostgreSQL's own (row locks that skip what another transaction holds, arrays of ids, a walk of
 * the whole table), so none is shared with SQLite's.
 *
 * Once per hour cluster-wide, not once per replica: every replica with RETENTION_DAYS offers a pass
 * to pg-boss as a *throttled* job (`sendThrottled`, one job per clock hour: pg-boss's unique index
 * on the queue, the slot and the key refuses the others), and whichever replica's worker fetches
 * it runs it. A replica that dies mid-pass stops its job's heartbeat; pg-boss then retries the job
 * on another replica, which walks the table again.
 */

/** The pg-boss queue of retention passes. */
export const RETENTION_QUEUE = 'consig_retention';

/** Runs `fn` in one transaction on one connection (BEGIN … COMMIT, or ROLLBACK when it throws). */
export type Transaction = <T>(fn: (sql: Sql) => Promise<T>) => Promise<T>;

/** One committed batch, for measurements (how long PostgreSQL held its row locks). */
export interface BatchReport {
  kind: 'bodies' | 'messages';
  /** Rows the batch changed (bodies removed, messages removed). */
  rows: number;
  ms: number;
}

export interface PgPruneOptions {
  /** Events looked at per batch (one statement, one transaction). @default RETENTION_BATCH.postgres.bodies (1000) */
  bodyBatch?: number;
  /** Messages looked at per batch. @default RETENTION_BATCH.postgres.messages (250) */
  messageBatch?: number;
  /** Asked between batches: true ends the pass there (it throws {@link PassInterrupted}). */
  shouldStop?(): boolean;
  onBatch?(batch: BatchReport): void;
}

/** A pass ended between two batches because it was asked to stop: what it committed stays. */
export class PassInterrupted extends Error {
  constructor() {
    super('retention pass interrupted between two batches (what it committed stays; the next pass goes on)');
    this.name = 'PassInterrupted';
  }
}

/**
 * One batch of bodies, as one statement: the next `batch` ids of the table (any status: that is the
 * walk), and among them the events the rule names, locked without waiting (`SKIP LOCKED`: a row a
 * relay batch is counting a duplicate on, or a replay is taking, is left for the next pass) and with
 * the lock that does not block foreign-key checks (`NO KEY`: the relay's deliveries still reference
 * them freely). The status is checked again on the locked version, so an event replayed meanwhile
 * keeps its body.
 */
const PRUNE_BODIES_BATCH = `
WITH scope AS (
  SELECT id FROM events WHERE id > $1 ORDER BY id LIMIT $2
), bound AS (
  SELECT max(id) AS upto, count(*) AS scanned FROM scope
), target AS (
  SELECT e.id FROM events e
  WHERE e.id > $1 AND e.id <= (SELECT upto FROM bound)
    AND e.received_at < $3 AND e.status = ANY($4::text[]) AND e.body IS NOT NULL
  FOR NO KEY UPDATE OF e SKIP LOCKED
), pruned AS (
  UPDATE events e SET body = NULL, body_pruned_at = $5
  FROM target t WHERE e.id = t.id AND e.status = ANY($4::text[])
  RETURNING e.id
)
SELECT (SELECT upto FROM bound) AS upto, (SELECT scanned FROM bound) AS scanned,
  (SELECT count(*) FROM pruned) AS pruned`;

/**
 * Removes the raw bodies of finished events received before `cutoff` (domain/retention.ts), keeping
 * rows and dedup keys. Unlike SQLite, the walk covers the whole table: `events.id` is the order in
 * which relay batches committed, and a spool relayed after an outage (or a SQLite history relayed
 * when a deployment moved to cluster mode) puts old `received_at` behind new ids.
 */
export async function pruneBodiesPg(
  transaction: Transaction,
  cutoff: Date,
  now: Date,
  options: PgPruneOptions = {},
): Promise<{ pruned: number; scanned: number }> {
  const batch = options.bodyBatch ?? RETENTION_BATCH.postgres.bodies;
  let lastId = 0;
  let pruned = 0;
  let scanned = 0;
  for (;;) {
    if (options.shouldStop?.()) throw new PassInterrupted();
    const started = performance.now();
    const [row] = await transaction((sql) =>
      sql.query<{ upto: string | null; scanned: string; pruned: string }>(PRUNE_BODIES_BATCH, [
        lastId,
        batch,
        cutoff,
        [...BODY_PRUNABLE_STATUSES],
        now,
      ]),
    );
    const n = Number(row?.scanned ?? 0);
    const p = Number(row?.pruned ?? 0);
    options.onBatch?.({ kind: 'bodies', rows: p, ms: performance.now() - started });
    pruned += p;
    scanned += n;
    if (row === undefined || row.upto === null || n < batch) break;
    lastId = Number(row.upto);
  }
  return { pruned, scanned };
}

/**
 * Removes forwarded messages created before `cutoff` whose every delivery is `delivered`
 * (domain/retention.ts), with their deliveries and attempts; one transaction per batch:
 * 1. the batch's messages, locked (`SKIP LOCKED`): nobody can add a delivery to one meanwhile (a
 *    backfill's foreign-key check waits), and one being backfilled now is left for the next pass;
 * 2. their deliveries, locked (`SKIP LOCKED`), then counted: a message is removed only when every
 *    one of its deliveries is locked here and delivered, so a replay (delivered → pending) either
 *    committed before (and the message stays) or waits for this commit and finds nothing to replay;
 * 3. attempts, deliveries, messages.
 * The walk ends at the newest message created before the cutoff when the pass began (one seek on
 * `forward_messages_created`); any created before the cutoff with a higher id is the next pass's.
 */
export async function pruneForwardedPg(
  transaction: Transaction,
  cutoff: Date,
  options: PgPruneOptions = {},
): Promise<{ pruned: number }> {
  const batch = options.messageBatch ?? RETENTION_BATCH.postgres.messages;
  const [last] = await transaction((sql) =>
    sql.query<{ id: string }>(
      'SELECT id FROM forward_messages WHERE created_at < $1 ORDER BY created_at DESC, id DESC LIMIT 1',
      [cutoff],
    ),
  );
  if (last === undefined) return { pruned: 0 };
  const upto = Number(last.id);
  let lastId = 0;
  let pruned = 0;
  for (;;) {
    if (options.shouldStop?.()) throw new PassInterrupted();
    const started = performance.now();
    const result = await transaction((sql) => pruneMessageBatch(sql, lastId, upto, cutoff, batch));
    options.onBatch?.({ kind: 'messages', rows: result.pruned, ms: performance.now() - started });
    pruned += result.pruned;
    if (result.lastId === null) break;
    lastId = result.lastId;
  }
  return { pruned };
}

async function pruneMessageBatch(
  sql: Sql,
  afterId: number,
  upto: number,
  cutoff: Date,
  batch: number,
): Promise<{ pruned: number; lastId: number | null }> {
  const candidates = (
    await sql.query<{ id: string }>(
      `SELECT id FROM forward_messages WHERE id > $1 AND id <= $2 AND created_at < $3
       ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED`,
      [afterId, upto, cutoff, batch],
    )
  ).map((r) => r.id);
  if (candidates.length === 0) return { pruned: 0, lastId: null };
  const locked = await sql.query<{ message_id: string; status: string }>(
    'SELECT message_id, status FROM forward_deliveries WHERE message_id = ANY($1::bigint[]) FOR UPDATE SKIP LOCKED',
    [candidates],
  );
  const totals = await sql.query<{ message_id: string; n: string }>(
    'SELECT message_id, count(*) AS n FROM forward_deliveries WHERE message_id = ANY($1::bigint[]) GROUP BY message_id',
    [candidates],
  );
  const total = new Map(totals.map((t) => [t.message_id, Number(t.n)]));
  const gone = removableMessages(
    candidates,
    locked.map((d) => ({ messageId: d.message_id, status: d.status })),
    total,
  );
  if (gone.length > 0) {
    await sql.query(
      `DELETE FROM forward_attempts WHERE delivery_id IN
         (SELECT id FROM forward_deliveries WHERE message_id = ANY($1::bigint[]))`,
      [gone],
    );
    await sql.query('DELETE FROM forward_deliveries WHERE message_id = ANY($1::bigint[])', [gone]);
    await sql.query('DELETE FROM forward_messages WHERE id = ANY($1::bigint[])', [gone]);
  }
  const lastId = Number(candidates[candidates.length - 1]);
  return { pruned: gone.length, lastId: candidates.length < batch ? null : lastId };
}

/** One pass: bodies, then messages. */
export async function prunePostgres(
  transaction: Transaction,
  cutoff: Date,
  now: Date,
  options: PgPruneOptions = {},
): Promise<PruneSummary> {
  const { pruned } = await pruneBodiesPg(transaction, cutoff, now, options);
  const { pruned: forwarded } = await pruneForwardedPg(transaction, cutoff, options);
  return { pruned, forwarded, cutoff: cutoff.toISOString() };
}

/** {@link Transaction} on one pg client (a command's own connection). */
export function transactionOn(client: Pick<Client, 'query'>): Transaction {
  return async (fn) => {
    await client.query('BEGIN');
    try {
      const result = await fn(sqlOf(client));
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  };
}

export interface RetentionLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

/** What a pass job carries: the offering replica's RETENTION_DAYS. */
export interface RetentionJobData {
  days: number;
}

export interface ClusterRetentionOptions {
  /** RETENTION_DAYS of this replica (carried by the jobs it offers). */
  days: number;
  replicaId: string;
  transaction: Transaction;
  logger: RetentionLogger;
  now(): Date;
  /** True once the replica is shutting down: a running pass ends after its batch. */
  stopping(): boolean;
  /** How often this replica offers a pass (a refused offer costs one insert). @default 300000 */
  offerEveryMs?: number;
  /** At most one pass per this many seconds, cluster-wide (slots aligned on the epoch). @default 3600 */
  slotSeconds?: number;
  /** After each finished pass on this replica. */
  onPass?(summary: PruneSummary & { ms: number }): void;
}

/**
 * Creates the queue, registers this replica's worker and offers a pass now and every
 * `offerEveryMs`. The queue's settings:
 * - completed jobs are kept two days (`deleteAfterSeconds`): the slot's job must outlive the slot,
 *   or a later offer in the same hour would find the slot free again;
 * - a 30 s heartbeat, which pg-boss's worker beats by itself: a replica that dies mid-pass is
 *   noticed within it, and the job is retried (30 s later) on another replica;
 * - a pass stopped by a shutdown throws, so that it is retried elsewhere too.
 */
export async function startClusterRetention(
  boss: PgBoss,
  options: ClusterRetentionOptions,
): Promise<{ stop(): void }> {
  const slotSeconds = options.slotSeconds ?? 3600;
  await boss.createQueue(RETENTION_QUEUE, {
    retryLimit: 5,
    retryDelay: 30,
    heartbeatSeconds: 30,
    expireInSeconds: Math.max(3600, slotSeconds),
    deleteAfterSeconds: Math.max(2 * 86_400, 2 * slotSeconds),
    notify: true,
  });
  await boss.work<RetentionJobData>(
    RETENTION_QUEUE,
    { localConcurrency: 1, batchSize: 1, pollingIntervalSeconds: 5, notifyPollingIntervalSeconds: 30 },
    async (jobs) => {
      for (const job of jobs)
        await runPass(job.data.days, job.signal, options).catch((err: unknown) => {
          // Failed: pg-boss runs the job again (30 s later, on whichever replica fetches it first).
          options.logger.warn(
            { err: (err as Error).message, replica: options.replicaId },
            'retention: pass on PostgreSQL stopped before its end; what it committed stays, and it runs again',
          );
          throw err;
        });
    },
  );
  const offer = () =>
    boss
      .sendThrottled(RETENTION_QUEUE, { days: options.days }, null, slotSeconds, 'retention')
      .catch((err) =>
        options.logger.warn(
          { err: (err as Error).message },
          'retention: could not offer the hourly pass to pg-boss; offering it again later',
        ),
      );
  await offer();
  const timer = setInterval(() => void offer(), options.offerEveryMs ?? 300_000);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

async function runPass(days: number, signal: AbortSignal, options: ClusterRetentionOptions): Promise<void> {
  const started = performance.now();
  const now = options.now();
  const cutoff = retentionCutoff(now, days);
  let longest = 0;
  const summary = await prunePostgres(options.transaction, cutoff, now, {
    // pg-boss aborts the signal when the job's claim is gone (another replica took it over).
    shouldStop: () => options.stopping() || signal.aborted,
    onBatch: (b) => void (longest = Math.max(longest, b.ms)),
  });
  const ms = Math.round(performance.now() - started);
  const fields = { retention_days: days, replica: options.replicaId };
  for (const line of retentionLog(summary, fields)) options.logger.info(line.fields, line.message);
  options.logger.info(
    { ...summary, ...fields, duration_ms: ms, longest_batch_ms: Math.round(longest) },
    'retention: pass on PostgreSQL finished',
  );
  options.onPass?.({ ...summary, ms });
}
