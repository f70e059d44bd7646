import type { Client, Pool, PoolClient } from 'pg';
import { StorageError } from '../domain/errors';
import type { PruneOutcome, StorePort } from '../core/store-port';
import { prunePass } from '../core/prune-pass';
import type { SenderWake } from '../core/forward-admin';
import type { SpoolPruneSummary } from '../domain/retention';

import { runOfAnswers } from '../domain/delivery-alarm';
import { readSharedAnswers } from './pg-delivery-alarm';
import { OUTBOX_CHANNEL } from './pg-outbox';
import {
  describePgTarget,
  isPgUnavailable,
  pgTarget,
  readStoreFigures,
  withPgConnection,
  withPgReads,
} from './pg-reads';
import { inEngineTransaction, pgReplayHooks } from './pg-replay';
import { drive } from '../core/event-step';
import type { EffectProgram } from '../core/effects';
import { pgStepOps, type SchedulePoll } from './kick';
import {
  clientRunners,
  inPoolTransaction,
  pgStoreQuery,
  pgStoreSql,
  type PgQuery,
  type PgRunners,
} from './pg-store-sql';
import { type Sql, sqlOf } from './pg-sql';
import type { Engine } from './engine';

/**
 * The store port (core/store-port.ts) on PostgreSQL, in cluster mode (contract §10), in its two
 * ways of being reached: a replica's pool ({@link pgPoolStorePort}, which the ClusterNode builds
 * for the admin API and the console) and a command's own connection ({@link withPgCommandStore}).
 * Rows come in the SQLite store's representation (pg-store-sql.ts STORE_TYPES). Each statement handle
 * carries its connection (pg-store-sql.ts `PgQuery`), so that PostgreSQL's own figures read in the same
 * snapshot as the core's statements.
 *
 * Through the pool, every call rejects with a StorageError while the replica is not connected to
 * PostgreSQL or when PostgreSQL cannot serve it (down, restarting, failing over): the routes answer
 * 503 and the client asks again. Any other failure (a statement PostgreSQL refused) passes through.
 * A command's errors name host, port and database, never the password (pg-reads.ts).
 */

/** Wakes the replica sending a destination (and the feed's long-polls) when the write commits. */
const NOTIFY_SENDER: SenderWake = {
  inWrite: (q) => q.rows('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']),
};

/** What both ways share: PostgreSQL's figures, read on the handle's connection. */
const pgFigures = {
  senderWake: NOTIFY_SENDER,
  consoleFigures: async (q: PgQuery) => {
    const answers = await readSharedAnswers(sqlOf(q.client));
    return {
      run: runOfAnswers(answers.run),
      lastDeliveryAt: answers.lastDeliveryAt,
      proposalsInFlight: answers.proposalsInFlight,
    };
  },
  statsFigures: (q: PgQuery, destinations: readonly string[]) => readStoreFigures(q.client, destinations),
};

export interface PgPoolStoreOptions {
  /** The replica's pool (ClusterNode's), with an 'error' listener. */
  pool: Pool;
  /** postgres://host:port/database (no user, no password). */
  name: string;
  /** Whether the replica is connected and migrated (ClusterNode `state === 'running'`). */
  running(): boolean;
  /** Queues a kick of each work key in `sql`'s transaction (engine.ts `kick`). */
  kick(sql: Sql, keys: readonly string[]): Promise<void>;
  /** Schedules a registration's poll in `sql`'s transaction (engine.ts `schedulePoll`). */
  schedulePoll: SchedulePoll;
}

/**
 * An effect program on `sql`'s transaction, as the kicks run the event step's (kick.ts ops): a
 * first poll queued as a pg-boss job in the same transaction, so that exactly one replica polls it
 * (docs/cluster.md §5.5).
 */
function pgEffects<R>(sql: Sql, schedulePoll: SchedulePoll, program: EffectProgram<R>): Promise<R> {
  return drive(program, pgStepOps(sql, { schedulePoll }));
}

/** A read longer than this is a server in trouble: the route answers 503 rather than hang. */
const READ_TIMEOUT = '10s';

/** The port on a replica's pool (see the module's comment). */
export function pgPoolStorePort(options: PgPoolStoreOptions): StorePort<PgQuery> {
  const { read, writing } = runners(options);
  const sql = pgStoreSql({ read, writing });
  return {
    name: options.name,
    sql,
    replaying: (fn) =>
      writing((client) => fn(pgStoreQuery(client), pgReplayHooks(sqlOf(client), options.kick))),
    effects: (program) => writing((client) => pgEffects(sqlOf(client), options.schedulePoll, program)),
    ...pgFigures,
    // The server listens through its forwarder (cluster/forwarder.ts), not through the port.
    listen: async () => undefined,
    prune: async (cutoff, now) => ({ summary: await prunePass(sql, cutoff, now) }),
  };
}

export type PgCommandAccess = 'read' | 'follow' | 'write';

/** The spool at DATABASE_PATH as a command's `prune` finds it (null `prune`: there is none). */
export interface LocalSpool {
  path: string;
  prune: ((cutoff: Date) => SpoolPruneSummary) | null;
}

/**
 * Runs `use` on the port of a command's own connection to `databaseUrl`, then closes it whatever
 * happens: its reads in one read-only snapshot (`read`: the figures of a command agree with each
 * other, and it cannot write) or as they come (`follow`, `write`); a replay or a tracking in one
 * transaction with a pg-boss started for it (pg-replay.ts). `spool`: what `prune` prunes after
 * PostgreSQL.
 */
export function withPgCommandStore<T>(
  databaseUrl: string,
  session: { access: PgCommandAccess; command?: string | undefined },
  spool: () => LocalSpool,
  use: (port: StorePort<PgQuery>) => Promise<T>,
): Promise<T> {
  const name = session.command === undefined ? undefined : `consig-receiver ${session.command}`;
  const run = (client: Client) => use(pgCommandStorePort(client, databaseUrl, spool));
  return session.access === 'read'
    ? withPgReads(databaseUrl, run, name)
    : withPgConnection(databaseUrl, run, name);
}

function pgCommandStorePort(
  client: Client,
  databaseUrl: string,
  spool: () => LocalSpool,
): StorePort<PgQuery> {
  const sql = sqlOf(client);
  const q = pgStoreQuery(client);
  const commandSql = pgStoreSql(clientRunners(client));
  const inEngine = <R>(fn: (engine: Engine) => Promise<{ result: R; commit: boolean }>) =>
    inEngineTransaction(client, databaseUrl, fn);
  return {
    name: describePgTarget(pgTarget(databaseUrl)),
    sql: commandSql,
    // Committed when it queued something.
    replaying: (fn) =>
      inEngine(async (engine) => {
        const result = await fn(
          q,
          pgReplayHooks(sql, (tx, keys) => engine.kick(tx, keys)),
        );
        return { result, commit: result.queued.length > 0 };
      }),
    effects: (program) =>
      inEngine(async (engine) => ({
        result: await pgEffects(sql, (tx, id, at) => engine.schedulePoll(tx, id, at), program),
        commit: true,
      })),
    ...pgFigures,
    // A message committed by any replica calls `onChange` (the outbox's NOTIFY).
    listen: async (onChange) => {
      client.on('notification', onChange);
      await client.query(`LISTEN ${OUTBOX_CHANNEL}`);
    },
    prune: async (cutoff, now): Promise<PruneOutcome> => {
      const local = spool();
      const summary = await prunePass(commandSql, cutoff, now);
      return { summary, spool: { path: local.path, removed: local.prune?.(cutoff) ?? null } };
    },
  };
}

/**
 * The ways every call of the pool's port reaches PostgreSQL, guarded: refused while the replica is
 * not connected, PostgreSQL's being away turned into a StorageError. `read`: `fn` in one read-only
 * snapshot on a connection of the pool, bounded by {@link READ_TIMEOUT}; `writing`: in one
 * transaction.
 */
function runners(options: PgPoolStoreOptions): PgRunners {
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
    read: (fn) =>
      guarded(() =>
        inTransaction('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', async (client) => {
          await client.query(`SET LOCAL statement_timeout = '${READ_TIMEOUT}'`);
          return fn(client);
        }),
      ),
    writing: (fn) => guarded(() => inTransaction('BEGIN', fn)),
  };
}
