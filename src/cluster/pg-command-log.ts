import type { Client } from 'pg';
import { knownSpools, verifySpool } from './relay-verify';
import type { ReplayHooks, ReplayResult } from '../domain/event-status';
import type { LogQuery } from '../domain/sql/log-sql';
import { pgLogStatements } from './pg-admin-log';
import { pgClientLogSql, pgLogQuery } from './pg-log-sql';
import { OUTBOX_CHANNEL } from './pg-outbox';
import { describePgTarget, pgTarget, readStoreFigures, withPgConnection, withPgReads } from './pg-reads';
import { inEngineTransaction, pgReplayHooks } from './pg-replay';
import { type TrackRequest, trackOnPostgres } from './pg-track';
import { sqlOf } from './sql';

/**
 * The log commands' port (cli/command-log.ts `CommandLog`) on PostgreSQL, in cluster mode
 * (contract §10): one connection of the command's own, its reads in one read-only snapshot
 * (`read`: the figures of a command agree with each other, and it cannot write) or as they come
 * (`follow`, `write`). The reads written once for both stores (src/core/) reach it through
 * `logSql`; the forwarding statements are the admin API's (pg-admin-log.ts `pgLogStatements`). Errors name host, port and database, never the password
 * (pg-reads.ts `withPgConnection`).
 */

export type PgCommandAccess = 'read' | 'follow' | 'write';

/** Runs `use` on the log at `databaseUrl`, then closes the connection whatever happens. */
export function withPgCommandLog<T>(
  databaseUrl: string,
  session: { access: PgCommandAccess; command?: string | undefined },
  use: (log: PgCommandLog) => Promise<T>,
): Promise<T> {
  const name = session.command === undefined ? undefined : `consig-receiver ${session.command}`;
  const run = (client: Client) => use(pgCommandLog(client, databaseUrl));
  return session.access === 'read'
    ? withPgReads(databaseUrl, run, name)
    : withPgConnection(databaseUrl, run, name);
}

function pgCommandLog(client: Client, databaseUrl: string) {
  const sql = sqlOf(client);
  return {
    /** postgres://host:port/database: the log as messages name it (no user, no password). */
    name: describePgTarget(pgTarget(databaseUrl)),
    ...pgLogStatements(pgClientLogSql(client)),
    /** `stats`' figures only PostgreSQL has or keeps its own way (pg-reads.ts). */
    storeFigures: (destinations: readonly string[]) => readStoreFigures(client, destinations),
    /**
     * `fn` (the replay rule, core/replay.ts) in one transaction, each work key kicked through a
     * pg-boss started for it (pg-replay.ts); committed when it queued something.
     */
    replaying: (fn: (q: LogQuery, hooks: ReplayHooks) => Promise<ReplayResult>) =>
      inEngineTransaction(client, databaseUrl, async (engine) => {
        const result = await fn(
          pgLogQuery(client),
          pgReplayHooks(sql, (tx, keys) => engine.kick(tx, keys)),
        );
        return { result, commit: result.queued.length > 0 };
      }),
    /** The row, its first poll a pg-boss job queued in the same transaction (pg-track.ts). */
    track: (t: TrackRequest, now: Date, graceMs: number) =>
      trackOnPostgres(
        {
          transaction: (fn) =>
            inEngineTransaction(client, databaseUrl, async (engine) => ({
              result: await fn(sql, (tx, id, at) => engine.schedulePoll(tx, id, at)),
              commit: true,
            })),
          read: (fn) => fn(client),
        },
        t,
        now,
        graceMs,
      ),
    /** `relay verify`: a spool against what PostgreSQL holds of it (relay-verify.ts). */
    verifySpool,
    knownSpools,
    /** The command's connection as code written once for both stores reaches it (src/core/). */
    logSql: pgClientLogSql(client),
    /** A message committed by any replica calls `onChange` (the outbox's NOTIFY). */
    listen: async (onChange: () => void) => {
      client.on('notification', onChange);
      await client.query(`LISTEN ${OUTBOX_CHANNEL}`);
    },
  };
}

export type PgCommandLog = ReturnType<typeof pgCommandLog>;
