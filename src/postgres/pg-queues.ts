import { PgBoss } from 'pg-boss';
import type { ConnectionSettings } from './connection';
import { bossDbOf, type ClusterLogger, type PgSql } from './pg-sql';

/**
 * pg-boss, configured for cluster mode (docs/cluster.md §5): one queue of "turns", at most one
 * queued and one running per work key (`p:<nu>`, `r:<requestId>`, `e:<id>`, policy `stately`), and
 * one queue of registry polls, one per registration (`r:<requestId>`). The engine dispatches across
 * replicas, retries and takes over a crashed replica's work; the order of a proposal's events and
 * exactly-once effects come from our `events` table (src/runtime/cluster/turn.ts), never from the engine.
 */

export const EVENTS_QUEUE = 'consig_events';
export const POLL_QUEUE = 'consig_registry_poll';
/** pg-boss's own schema, beside ours. */
export const BOSS_SCHEMA = 'pgboss';

export interface TurnData {
  key: string;
}
export interface PollData {
  requestId: string;
}

export type Engine = Awaited<ReturnType<typeof startEngine>>;

export interface EngineOptions {
  /** Connections pg-boss may open (its workers' transactions included). */
  max: number;
  logger: Pick<ClusterLogger, 'error' | 'warn'>;
  /** A turn's claim lapses after this: a dead replica's turns run elsewhere about then. @default 10 */
  turnExpireSeconds?: number;
  /**
   * connection.ts's settings for pg-boss's pool: a turn's transaction holds turn locks, the outbox
   * lock and proposals' rows, and a frozen replica's must end within the same bound as the relay's.
   * pg-boss bounds a transactional handler's transaction itself too (idle_in_transaction_session_timeout
   * of expireInSeconds + 5 s on PostgreSQL < 17), and keeps the tighter of its bound and the session's.
   */
  settings?: ConnectionSettings;
}

/**
 * Starts pg-boss on `url` (installing or migrating its schema under its own advisory lock, so
 * replicas may start together) and creates the two queues if missing.
 */
export async function startEngine(url: string, options: EngineOptions) {
  const boss = new PgBoss({
    connectionString: url,
    schema: BOSS_SCHEMA,
    max: options.max,
    application_name: 'consig-receiver:pg-boss',
    // `options` (the server's bounds) is pg-boss's; keepAlive reaches node-postgres's Pool with it.
    ...(options.settings ?? {}),
    useListenNotify: true,
    // Takeover after a crash: a claim lapses after expireInSeconds, checked in the monitor pass,
    // which runs every max(monitor, supervise) interval (60 s each by default: a 62 s takeover).
    superviseIntervalSeconds: 2,
    monitorIntervalSeconds: 2,
  });
  boss.on('error', (err: Error) => options.logger.error({ err: err.message }, 'pg-boss error'));
  await boss.start();
  await createQueues(boss, options);
  let recreating: Promise<void> | null = null;
  /**
   * Called with a failed transaction's error. A queue's row gone (a restore that left pg-boss's
   * tables behind, a server that lost its last commits) fails every commit that queued a job in
   * it (pg-boss's foreign key, checked at commit); the queues are then created again, once at a
   * time, and the caller's retry goes through.
   */
  const recoverFrom = (err: unknown): void => {
    if (!isMissingQueue(err) || recreating !== null) return;
    options.logger.warn({ err: (err as Error).message }, 'pg-boss queue missing: creating it again');
    recreating = createQueues(boss, options)
      .catch(() => undefined)
      .finally(() => {
        recreating = null;
      });
  };
  return {
    boss,
    recoverFrom,
    /** Queues a turn for each work key, in `sql`'s transaction; `startAfter` delays them (a retry). */
    async queueTurns(sql: PgSql, keys: readonly string[], startAfter?: Date): Promise<void> {
      if (keys.length === 0) return;
      const jobs = keys.map((key) => ({
        data: { key } satisfies TurnData,
        singletonKey: key,
        ...(startAfter ? { startAfter } : {}),
      }));
      await boss.insert(EVENTS_QUEUE, jobs, { db: bossDbOf(sql) });
    },
    /** Schedules the next poll of a registration at `at`, in `sql`'s transaction (one per registration). */
    async schedulePoll(sql: PgSql, requestId: string, at: Date): Promise<void> {
      await boss.insert(
        POLL_QUEUE,
        [{ data: { requestId } satisfies PollData, singletonKey: `r:${requestId}`, startAfter: at }],
        { db: bossDbOf(sql) },
      );
    },
    /**
     * Once per timeline, by the first replica to see it (a `cluster_timelines` row): fails the turns
     * and polls claimed before it, whose workers died with the old primary, so that they run again
     * now rather than when their claims lapse (expireInSeconds: 10 s for turns, 120 s for polls). A
     * claim a live worker took on the new primary in the meantime may be failed too: its turn runs
     * once more and finds nothing to do (pg-locks.ts). Returns how many claims it released.
     */
    async releaseClaimsBefore(sql: PgSql, timeline: number): Promise<number> {
      const first = await sql.query(
        'INSERT INTO cluster_timelines (timeline) VALUES ($1) ON CONFLICT DO NOTHING RETURNING timeline',
        [timeline],
      );
      if (first.length === 0) return 0;
      const claims = await sql.query<{ id: string; name: string }>(
        `SELECT id, name FROM ${BOSS_SCHEMA}.job WHERE state = 'active' AND name = ANY($1::text[]) AND started_on < now()`,
        [[EVENTS_QUEUE, POLL_QUEUE]],
      );
      const why = { reason: 'claimed before a PostgreSQL promotion' };
      for (const name of [EVENTS_QUEUE, POLL_QUEUE]) {
        const ids = claims.filter((c) => c.name === name).map((c) => c.id);
        if (ids.length > 0) await boss.fail(name, ids, why, { db: bossDbOf(sql) });
      }
      return claims.length;
    },
    async stop(timeoutMs: number): Promise<void> {
      await boss.stop({ graceful: true, close: true, timeout: timeoutMs });
    },
  };
}

/** pg-boss's foreign key from a job to its queue: the queue's row is not there. */
function isMissingQueue(err: unknown): boolean {
  const e = err as { code?: string; constraint?: string } | null;
  return e?.code === '23503' && e.constraint === 'q_fkey';
}

/** Creates the two queues if missing (a no-op for a queue that exists). */
async function createQueues(boss: PgBoss, options: EngineOptions): Promise<void> {
  // Turn failures are database errors (an event's own failures are ours: attempts, next_attempt_at,
  // dead letters in `events`): keep retrying them, with backoff, as polls. `events` is the log; a
  // completed job is worth nothing after an hour.
  const both = {
    policy: 'stately',
    retryLimit: 1_000_000,
    retryBackoff: true,
    deleteAfterSeconds: 3600,
    notify: true,
  };
  await boss.createQueue(EVENTS_QUEUE, {
    ...both,
    retryDelay: 1,
    retryDelayMax: 60,
    expireInSeconds: options.turnExpireSeconds ?? 10,
  });
  // Expiry: covers the service client's timeouts and retries.
  await boss.createQueue(POLL_QUEUE, { ...both, retryDelay: 5, retryDelayMax: 300, expireInSeconds: 120 });
}
