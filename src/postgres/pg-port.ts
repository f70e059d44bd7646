import type { Client, Pool } from 'pg';
import { StorageError } from '../domain/errors';
import type { LogGauges, PruneOutcome, StorePort } from '../core/store-port';
import type { StuckCutoff } from '../domain/stuck';
import { prunePass } from '../core/prune-pass';
import { storeGauges } from '../core/gauges';
import type { SpoolPruneSummary } from '../domain/retention';
import { runOfAnswers } from '../domain/delivery-alarm';
import { readSharedAnswers } from './pg-delivery-alarm';
import { OUTBOX_CHANNEL } from './pg-outbox';
import { describePgTarget, isPgUnavailable, pgTarget, readStoreFigures, withPgConnection } from './pg-reads';
import type { ReplayHooks } from '../domain/event-status';
import { workKeyOf } from '../domain/work-key';
import { holdKeys } from './pg-locks';
import { drive } from '../core/event-step';
import type { EffectProgram } from '../core/effects';
import { pgStepOps, type SchedulePoll } from './pg-step-ops';
import {
  clientRunners,
  pgStoreSql,
  type PgRunners,
  poolRunners,
  SNAPSHOT,
  transactionOn,
} from './pg-statements';
import { type PgSql, sqlOf } from './pg-sql';
import { type Engine, startEngine } from './pg-queues';

/**
 * The store port (core/store-port.ts) on PostgreSQL, in cluster mode (contract §10), in its two
 * ways of being reached: a replica's pool ({@link pgPoolStorePort}, which the ClusterNode builds
 * for the admin API and the console) and a command's own connection ({@link withPgCommandStore}),
 * on pg-sql.ts's statement runner (`PgSql`: its `rows` in the SQLite store's representation).
 *
 * Through the pool, every call rejects with a StorageError while the replica is not connected to
 * PostgreSQL or when PostgreSQL cannot serve it (down, restarting, failing over): the routes answer
 * 503 and the client asks again. Any other failure (a statement PostgreSQL refused) passes through.
 * A command's errors name host, port and database, never the password (pg-reads.ts).
 */

/**
 * What both ways share: PostgreSQL's figures, read on the handle's connection, and the wake of the
 * replica sending a destination (and of the feed's long-polls) when a write commits.
 */
const pgFigures = {
  senderWake: { inWrite: (q: PgSql) => q.rows('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']) },
  consoleFigures: async (q: PgSql) => {
    const answers = await readSharedAnswers(q);
    return { ...answers, run: runOfAnswers(answers.run) };
  },
  statsFigures: (q: PgSql, destinations: readonly string[]) => readStoreFigures(q, destinations),
};

/** The replica's engine (turn, schedulePoll) in the transactions of the port's calls. */
export interface PgPoolStoreOptions extends Pick<Engine, 'queueTurns' | 'schedulePoll'> {
  /** The replica's pool (ClusterNode's), with an 'error' listener. */
  pool: Pool;
  /** postgres://host:port/database (no user, no password). */
  name: string;
  /** Whether the replica is connected and migrated (ClusterNode `state === 'running'`). */
  running(): boolean;
  /**
   * `/metrics`' figures, read short on the replica's pool (ClusterNode `sharedGauges`).
   * @default read in a snapshot of the pool, as the port's other reads
   */
  gauges?: (cutoffs: readonly StuckCutoff[]) => Promise<LogGauges | null>;
}

/**
 * An effect program on `sql`'s transaction, as the turns run the event step's (pg-step-ops.ts): a
 * first poll queued as a pg-boss job in the same transaction, so that exactly one replica polls it
 * (docs/cluster.md §5.5).
 */
function pgEffects<R>(sql: PgSql, schedulePoll: SchedulePoll, program: EffectProgram<R>): Promise<R> {
  return drive(program, pgStepOps(sql, { schedulePoll }));
}

/**
 * What a replay (core/replay.ts, the one rule) needs in cluster mode, in the replay's transaction
 * (`tx`): the events' work keys held before their rows are locked (pg-locks.ts), and a turn of
 * each key queued with the replay (docs/cluster.md §5.2): committed together, so a replayed event
 * is never left without a turn, nor a turn sent for a replay that rolled back. A turn of a key that
 * already has one queued is absorbed by it (pg-boss `stately`).
 */
function pgReplayHooks(tx: PgSql, queueTurns: Engine['queueTurns']): ReplayHooks {
  return {
    hold: (events) => holdKeys(tx, events.map(workKeyOf)),
    queued: (events) => queueTurns(tx, [...new Set(events.map(workKeyOf))]),
  };
}

/** A read longer than this is a server in trouble: the route answers 503 rather than hang. */
const READ_TIMEOUT = '10s';

/** The port on a replica's pool (see the module's comment). */
export function pgPoolStorePort(options: PgPoolStoreOptions): StorePort<PgSql> {
  const { read, writing } = runners(options);
  const sql = pgStoreSql({ read, writing });
  return {
    name: options.name,
    mayBeAway: true,
    file: null,
    sql,
    replaying: (fn) =>
      writing((client) => {
        const tx = sqlOf(client);
        return fn(tx, pgReplayHooks(tx, options.queueTurns));
      }),
    effects: (program) => writing((client) => pgEffects(sqlOf(client), options.schedulePoll, program)),
    gauges: options.gauges ?? ((cutoffs) => sql.read((q) => storeGauges(q, cutoffs))),
    ...pgFigures,
    // The server listens through its forwarder (runtime/cluster/forwarder.ts), not through the port.
    listen: async () => undefined,
    prune: async (cutoff, now) => ({ summary: await prunePass(sql, cutoff, now) }),
    scrub: async (_forms, { vacuum }) => {
      const client = await options.pool.connect();
      try {
        return await vacuumErased(client, vacuum);
      } finally {
        client.release();
      }
    },
  };
}

/**
 * An erasure's physical step on PostgreSQL (docs/privacy.md "Physically"): VACUUM of the tables an
 * erasure rewrites, so the dead versions' space is reclaimed and reused; FULL when asked, which
 * rewrites each table under an exclusive lock (the relays wait, the spools answer: acknowledgements
 * are not held). PostgreSQL's own WAL, its standbys and its backups keep what they hold until they
 * recycle it: that is the database's operator's, and docs/privacy.md says so.
 */
export async function vacuumErased(
  client: Pick<Client, 'query'>,
  full: boolean,
): Promise<{ files: []; walTruncated: null; vacuum: 'plain' | 'full' }> {
  const tables =
    'events, proposals, averbacoes, forward_messages, forward_attempts, forward_deliveries, console_audit';
  await client.query(`VACUUM ${full ? '(FULL) ' : ''}${tables}`);
  return { files: [], walTruncated: null, vacuum: full ? 'full' : 'plain' };
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
 * transaction with a pg-boss started for it. `spool`: what `prune` prunes after PostgreSQL.
 */
export function withPgCommandStore<T>(
  databaseUrl: string,
  session: { access: PgCommandAccess; command?: string | undefined },
  spool: () => LocalSpool,
  use: (port: StorePort<PgSql>) => Promise<T>,
): Promise<T> {
  const name = session.command === undefined ? undefined : `consig-receiver ${session.command}`;
  return withPgConnection(
    databaseUrl,
    (client) => {
      const run = () => use(pgCommandStorePort(client, databaseUrl, spool));
      return session.access === 'read' ? transactionOn(client, run, SNAPSHOT) : run();
    },
    name,
  );
}

function pgCommandStorePort(client: Client, databaseUrl: string, spool: () => LocalSpool): StorePort<PgSql> {
  const sql = sqlOf(client);
  const commandSql = pgStoreSql(clientRunners(client));
  /**
   * `use` in one transaction on the command's connection, with a pg-boss started for the purpose
   * (no workers: it only queues jobs in that transaction) and stopped at the end; committed when
   * `use` says so, else rolled back.
   */
  const inEngine = async <R>(use: (engine: Engine) => Promise<{ result: R; commit: boolean }>) => {
    const engine = await startEngine(databaseUrl, { max: 2, logger: { error() {}, warn() {} } });
    try {
      return (
        await transactionOn(
          client,
          () => use(engine),
          'BEGIN',
          (r) => r.commit,
        )
      ).result;
    } finally {
      await engine.stop(2000).catch(() => undefined);
    }
  };
  return {
    name: describePgTarget(pgTarget(databaseUrl)),
    mayBeAway: true,
    file: null,
    sql: commandSql,
    // Committed when it queued something.
    replaying: (fn) =>
      inEngine(async (engine) => {
        const result = await fn(sql, pgReplayHooks(sql, engine.queueTurns));
        return { result, commit: result.queued.length > 0 };
      }),
    effects: (program) =>
      inEngine(async (engine) => ({
        result: await pgEffects(sql, engine.schedulePoll, program),
        commit: true,
      })),
    gauges: (cutoffs) => commandSql.read((q) => storeGauges(q, cutoffs)),
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
    scrub: (_forms, { vacuum }) => vacuumErased(client, vacuum),
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
  const pool = poolRunners(options.pool);
  return {
    read: (fn) =>
      guarded(() =>
        pool.read(async (client) => {
          await client.query(`SET LOCAL statement_timeout = '${READ_TIMEOUT}'`);
          return fn(client);
        }),
      ),
    writing: (fn) => guarded(() => pool.writing(fn)),
  };
}
