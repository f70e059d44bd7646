import type { Pool, PoolClient } from 'pg';
import { StorageError } from '../domain/errors';
import type { ReplayHooks, ReplayResult } from '../domain/event-status';
import { feedReader } from '../core/feed';
import { forwardAdmin, type SenderWake } from '../core/forward-admin';
import type { LogQuery, LogSql } from '../domain/sql/log-sql';
import { OUTBOX_CHANNEL } from './pg-outbox';
import { isPgUnavailable } from './pg-reads';
import { pgReplayHooks } from './pg-replay';
import { type TrackRequest, trackOnPostgres } from './pg-track';
import { inPoolTransaction, pgLogQuery, pgLogSql } from './pg-log-sql';
import { type Sql, sqlOf } from './sql';

/**
 * The admin API's reads and writes in cluster mode (contract §10): the log of PostgreSQL through
 * {@link pgLogStatements} (the forwarding admin and the feed, src/core/), which the log commands
 * run too (pg-command-log.ts, on their own connection), and through `logSql` for the reads and the
 * replay rule written once for both stores (core/log-reads.ts, core/replay.ts, composed by
 * http/admin/admin-log.ts `pgAdminPort`), in the shapes of the SQLite log, so that the routes
 * (src/http/admin/) serve both stores with one parser and one JSON shape.
 *
 * Every call of {@link pgAdminLog} rejects with a StorageError while the replica is not connected to PostgreSQL or when
 * PostgreSQL cannot serve it (down, restarting, failing over): the routes answer 503 and the client
 * asks again. Any other failure (a statement PostgreSQL refused) passes through as it is.
 */

export interface PgAdminLogOptions {
  /** The replica's pool (ClusterNode's), with an 'error' listener. */
  pool: Pool;
  /** Whether the replica is connected and migrated (ClusterNode `state === 'running'`). */
  running(): boolean;
  /** Queues a kick of each work key in `sql`'s transaction (engine.ts `kick`). */
  kick(sql: Sql, keys: readonly string[]): Promise<void>;
  /** Schedules a registration's poll in `sql`'s transaction (engine.ts `schedulePoll`). */
  schedulePoll(sql: Sql, requestId: string, at: Date): Promise<void>;
}

/** A read longer than this is a server in trouble: the route answers 503 rather than hang. */
const READ_TIMEOUT = '10s';

/** The admin API's log on `options.pool` (see the module's comment); the ClusterNode builds one. */
export function pgAdminLog(options: PgAdminLogOptions) {
  const { guarded, read, transaction, writing } = runners(options);
  const logSql = pgLogSql({ read, writing });
  return {
    ...pgLogStatements(logSql),
    /** `fn` (the replay rule, core/replay.ts) in one transaction, each work key kicked in it (pg-replay.ts). */
    replaying: (fn: (q: LogQuery, hooks: ReplayHooks) => Promise<ReplayResult>): Promise<ReplayResult> =>
      writing((client) => fn(pgLogQuery(client), pgReplayHooks(sqlOf(client), options.kick))),
    /** Tracks a registration (pg-track.ts), its first poll a job queued with it. */
    track: (t: TrackRequest, now: Date, graceMs: number) =>
      trackOnPostgres(
        { transaction: (fn) => transaction((tx) => fn(tx, options.schedulePoll)), read },
        t,
        now,
        graceMs,
      ),
    /**
     * The runners every call above goes through (the replica's pool, the running() guard,
     * StorageError, READ_TIMEOUT): the console's log (http/console/console-log.ts `pgConsoleLog`) reads and writes with them.
     */
    runners: { guarded, read, transaction, writing } satisfies PgRunners,
    /** The log as code written once for both stores reaches it (src/core/). */
    logSql,
  };
}

/** Wakes the replica sending a destination (and the feed's long-polls) when the write commits. */
const NOTIFY_SENDER: SenderWake = {
  inWrite: (q) => q.rows('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']),
};

/**
 * The forwarding statements the admin API and the log commands share, on either way to
 * PostgreSQL: one home per query (the SQLite adapter is http/admin/admin-log.ts `sqliteAdminLog`).
 */
export function pgLogStatements(logSql: LogSql) {
  return {
    forwards: forwardAdmin(logSql, NOTIFY_SENDER),
    feed: feedReader(logSql),
  };
}

export type PgAdminLog = ReturnType<typeof pgAdminLog>;

type Guarded = <T>(fn: () => Promise<T>) => Promise<T>;
type Read = <T>(fn: (db: PoolClient) => Promise<T>) => Promise<T>;
type Transaction = <T>(fn: (tx: Sql) => Promise<T>) => Promise<T>;
type Writing = <T>(fn: (client: PoolClient) => Promise<T>) => Promise<T>;

/** The guarded ways to reach PostgreSQL that every call of the admin log takes (see {@link runners}). */
export interface PgRunners {
  guarded: Guarded;
  read: Read;
  transaction: Transaction;
  /** A transaction as {@link Transaction}, on the client itself (pg-log-sql.ts). */
  writing: Writing;
}

/**
 * `guarded`: refuses while the replica is not connected, and turns PostgreSQL's being away into a
 * StorageError. `read`: guarded, `fn` in one read-only snapshot on a connection of the pool, bounded
 * by {@link READ_TIMEOUT}. `transaction`: guarded, `fn` in one transaction.
 */
function runners(options: PgAdminLogOptions): PgRunners {
  const guarded = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (!options.running()) throw new StorageError('cluster mode is not connected to PostgreSQL yet');
    try {
      return await fn();
    } catch (err) {
      if (isPgUnavailable(err))
        throw new StorageError(`PostgreSQL does not answer: ${(err as Error).message}`, { cause: err });
      throw err;
    }
  };
  const inTransaction = <T>(begin: string, fn: (client: PoolClient) => Promise<T>): Promise<T> =>
    inPoolTransaction(options.pool, begin, fn);
  return {
    guarded,
    read: (fn) =>
      guarded(() =>
        inTransaction('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', async (client) => {
          await client.query(`SET LOCAL statement_timeout = '${READ_TIMEOUT}'`);
          return fn(client);
        }),
      ),
    transaction: (fn) => guarded(() => inTransaction('BEGIN', (client) => fn(sqlOf(client)))),
    writing: (fn) => guarded(() => inTransaction('BEGIN', fn)),
  };
}
