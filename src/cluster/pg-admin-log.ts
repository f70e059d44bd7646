import type { Pool, PoolClient } from 'pg';
import { decodeUtf8 } from '../domain/delivery';
import { StorageError } from '../domain/errors';
import type { ReplayResult } from '../domain/event-status';
import { feedReader } from '../core/feed';
import { forwardAdmin, type SenderWake } from '../core/forward-admin';
import { clampLimit } from '../domain/list-limit';
import type { LogSql } from '../domain/sql/log-sql';
import { OUTBOX_CHANNEL } from './pg-outbox';
import {
  isPgUnavailable,
  readAverbacao,
  readAverbacoes,
  readDeliveries,
  readEvent,
  readEvents,
  readProposal,
  type PgReader,
} from './pg-reads';
import { replayEvents } from './pg-replay';
import { type TrackRequest, trackOnPostgres } from './pg-track';
import { pgLogSql } from './pg-log-sql';
import { checkOut, type Sql, sqlOf } from './sql';

/**
 * The admin API's reads and writes in cluster mode (contract §10): the log of PostgreSQL through
 * {@link pgLogStatements} (pg-reads.ts; the forwarding admin and the feed, src/core/), which the
 * log commands run too (pg-command-log.ts, on their own connection), in the shapes of the SQLite
 * log, so that the routes (src/http/admin/) serve both stores with one parser and one JSON shape.
 * Filters are the SQLite store's: `nu_proposta` an integer or text, `limit` optional.
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

/** An event filter as the admin routes pass it (store/events.ts EventFilter). */
interface EventFilter {
  status?: string | undefined;
  evento?: string | undefined;
  kind?: string | undefined;
  nuProposta?: number | string | undefined;
  beforeId?: number | undefined;
  limit?: number | undefined;
}

/** PostgreSQL's text `nu_proposta` for the integer or text a filter names. */
const textNu = (nu: number | string | undefined): string | undefined =>
  nu === undefined ? undefined : String(nu);

/** The admin API's log on `options.pool` (see the module's comment); the ClusterNode builds one. */
export function pgAdminLog(options: PgAdminLogOptions) {
  const { guarded, read, transaction, writing } = runners(options);
  const logSql = pgLogSql({ read, writing });
  return {
    ...pgLogStatements({ read, logSql }),
    replayEvents: (ids: readonly number[], now: string): Promise<ReplayResult> =>
      transaction((tx) => replayEvents(tx, ids, now, options.kick)),
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

/**
 * How {@link pgLogStatements} reaches PostgreSQL: the replica's pool, guarded (the admin API), or
 * one command's own connection (cli/command-log.ts, pg-command-log.ts).
 */
export interface PgLogRunners {
  /** `fn` in one read-only snapshot. */
  read: <T>(fn: (db: PgReader) => Promise<T>) => Promise<T>;
  /** The same way, for the code written once for both stores (src/core/). */
  logSql: LogSql;
}

/** Wakes the replica sending a destination (and the feed's long-polls) when the write commits. */
const NOTIFY_SENDER: SenderWake = {
  inWrite: (q) => q.rows('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']),
};

/**
 * The reads and the forwarding statements the admin API and the log commands share, on either
 * way to PostgreSQL: one home per query (the SQLite adapter is http/admin/admin-log.ts
 * `sqliteAdminLog`). Filters are the SQLite store's: `nu_proposta` an integer or text, `limit`
 * optional.
 */
export function pgLogStatements(run: PgLogRunners) {
  const { read } = run;
  return {
    events: (filter: EventFilter) =>
      read((db) =>
        readEvents(db, { ...filter, nuProposta: textNu(filter.nuProposta), limit: clampLimit(filter.limit) }),
      ),
    /** One event and its raw body: text when it is valid UTF-8 (as SQLite stores it), else the bytes. */
    event: (id: number) =>
      read(async (db) => {
        const found = await readEvent(db, id);
        if (found === undefined) return undefined;
        const body = found.body === null ? null : (decodeUtf8(found.body) ?? found.body);
        return { event: found.event, body };
      }),
    deliveries: (filter: {
      outcome?: string | undefined;
      beforeId?: number | undefined;
      limit?: number | undefined;
    }) => read((db) => readDeliveries(db, { ...filter, limit: clampLimit(filter.limit) })),
    /** The proposal and its timeline, from one snapshot. */
    proposal: (nu: number | string) => read((db) => readProposal(db, String(nu))),
    averbacoes: (filter: {
      status?: string | undefined;
      stale?: boolean | undefined;
      nuProposta?: number | string | undefined;
      limit?: number | undefined;
    }) =>
      read((db) =>
        readAverbacoes(db, {
          ...filter,
          nuProposta: textNu(filter.nuProposta),
          limit: clampLimit(filter.limit),
        }),
      ),
    averbacao: (requestId: string) => read((db) => readAverbacao(db, requestId)),
    forwards: forwardAdmin(run.logSql, NOTIFY_SENDER),
    feed: feedReader(run.logSql),
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
  const inTransaction = async <T>(begin: string, fn: (client: PoolClient) => Promise<T>): Promise<T> => {
    const client = await checkOut(options.pool);
    let ok = false;
    try {
      await client.query(begin);
      const result = await fn(client);
      await client.query('COMMIT');
      ok = true;
      return result;
    } finally {
      if (!ok) await client.query('ROLLBACK').catch(() => undefined);
      // A client that failed mid-transaction may be broken (the server went away): not reused.
      client.release(!ok);
    }
  };
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
