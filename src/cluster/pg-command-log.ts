import type { Client } from 'pg';
import type { EventStatus } from '../domain/event-status';
import type { ProposalStatus } from '../domain/lifecycle';
import type { StuckCutoff } from '../domain/stuck';
import { pgLogStatements } from './pg-admin-log';
import { pgClientLogSql } from './pg-log-sql';
import { OUTBOX_CHANNEL } from './pg-outbox';
import {
  describePgTarget,
  pgTarget,
  readLatestProposals,
  readStats,
  readStuckProposals,
  withPgConnection,
  withPgReads,
} from './pg-reads';
import { inEngineTransaction, replayOnPostgres } from './pg-replay';
import { type TrackRequest, trackOnPostgres } from './pg-track';
import { sqlOf } from './sql';

/**
 * The log commands' port (cli/command-log.ts `CommandLog`) on PostgreSQL, in cluster mode
 * (contract §10): one connection of the command's own, its reads in one read-only snapshot
 * (`read`: the figures of a command agree with each other, and it cannot write) or as they come
 * (`follow`, `write`). The queries are the admin API's (pg-admin-log.ts `pgLogStatements`) plus the
 * few only the commands run. Errors name host, port and database, never the password
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
    // The command's connection is already in its snapshot (`read`) or reads as it comes.
    ...pgLogStatements({ read: (fn) => fn(client), logSql: pgClientLogSql(client) }),
    stats: (cutoffs: readonly StuckCutoff[], destinations: readonly string[]) =>
      readStats(client, cutoffs, destinations),
    latestProposals: (statuses: readonly ProposalStatus[], limit: number) =>
      readLatestProposals(client, statuses, limit),
    stuckProposals: (cutoffs: readonly StuckCutoff[], limit: number) =>
      readStuckProposals(client, cutoffs, limit),
    /** Each work key kicked through pg-boss in the replay's transaction (pg-replay.ts). */
    replay: (wanted: { ids: readonly number[] } | { status: EventStatus }, now: string) =>
      replayOnPostgres(client, databaseUrl, wanted, now),
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
