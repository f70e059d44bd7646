import { existsSync, statSync } from 'node:fs';
import { type PgCommandAccess, type PgCommandLog, withPgCommandLog } from '../cluster/pg-command-log';
import type { PgStats } from '../cluster/pg-reads';
import type { Config } from '../config';
import { endSessionsAudited } from '../core/console-sessions';
import { prunePass } from '../core/retention';
import type { NewAuditEntry } from '../domain/console';
import { StorageError } from '../domain/errors';
import type { EventStatus, ReplayResult } from '../domain/event-status';
import type { ProposalStatus } from '../domain/lifecycle';
import type { PruneSummary, SpoolPruneSummary } from '../domain/retention';
import type { StuckCutoff } from '../domain/stuck';
import { type AdminLog, sqliteAdminLog } from '../http/admin/admin-log';
import { forwardDeliveries } from '../store/forward-deliveries';
import { sqliteLogSql } from '../store/log-sql';
import { eventIdsWithStatus, replayEvents } from '../store/pipeline-queries';
import { proposalLists, type ProposalListRow } from '../store/proposal-lists';
import { openSpool } from '../store/spool';
import { openStore, type Store } from '../store/store';

/**
 * What the commands read and do on the log, whichever store holds it: the admin API's port
 * ({@link AdminLog}: one home per query for both) and the few reads and writes only the commands
 * have. The SQLite adapter is below; the PostgreSQL one is cluster/pg-command-log.ts.
 * {@link withCommandLog} is the one place that chooses between them: the commands parse their
 * options, call the port and render, without knowing the mode.
 */
export interface CommandLog extends Pick<
  AdminLog,
  'events' | 'deliveries' | 'proposal' | 'averbacoes' | 'track' | 'forwards' | 'feed'
> {
  /** The log as messages name it: the SQLite file, or PostgreSQL's host, port and database. */
  readonly name: string;
  /** Everything `stats` shows, read at once. */
  stats(cutoffs: readonly StuckCutoff[], destinations: readonly string[]): Promise<LogFigures>;
  latestProposals(statuses: readonly ProposalStatus[], limit: number): Promise<readonly ProposalListRow[]>;
  stuckProposals(cutoffs: readonly StuckCutoff[], limit: number): Promise<readonly ProposalListRow[]>;
  /** Puts the events named (or every one with `status`) back in the queue, all or nothing. */
  replay(wanted: { ids: readonly number[] } | { status: EventStatus }, now: string): Promise<ReplayResult>;
  /** Ends every console session and records `audit(ended)`, together; returns how many. */
  endSessions(audit: (ended: number) => NewAuditEntry): Promise<number>;
  /** Calls `onChange` when the outbox may have more (PostgreSQL's NOTIFY; never on SQLite). */
  listen(onChange: () => void): Promise<void>;
  /**
   * What RETENTION_DAYS does (domain/retention.ts): old bodies and forwarded messages out of the
   * log; in cluster mode then the relayed rows of the spool at DATABASE_PATH (session `spool`).
   */
  prune(cutoff: Date, now: Date): Promise<PruneOutcome>;
}

/**
 * What `prune` removed from the log; in cluster mode also from the spool at `path` (`removed`
 * null: there is no spool there, only PostgreSQL was pruned).
 */
export interface PruneOutcome {
  summary: PruneSummary;
  spool?: { path: string; removed: SpoolPruneSummary | null };
}

/**
 * What `stats` shows, as the stores give it. `forwarding` is null on a PostgreSQL schema that has
 * no forwarding tables yet; `replicas` (who answered the deliveries) only in cluster mode.
 */
export type LogFigures = Omit<PgStats, 'replicas'> & { replicas?: PgStats['replicas'] };

/**
 * How a command uses the log. `read`: reads in one snapshot (a read-only SQLite file). `follow`:
 * reads that see each new commit (`feed --follow`). `write`: a writable log. `command` names the
 * command's PostgreSQL connection (application_name `consig-receiver <command>`).
 */
export interface CommandSession {
  access: PgCommandAccess;
  command?: string;
  /**
   * With `write`: a SQLite file that does not exist yet is created and migrated (`start-averbacao`
   * tracks what it started in a database a receiver opens later). PostgreSQL's schema is the
   * replicas' to migrate.
   */
  create?: boolean;
  /**
   * Cluster mode: the spool at DATABASE_PATH too, when there is one (`prune`). Checked before
   * PostgreSQL is touched: a spool that cannot be opened stops the command first.
   */
  spool?: boolean;
}

/**
 * Opens the log of `config` — PostgreSQL when DATABASE_URL is set (cluster mode, contract §10),
 * else the SQLite file — runs `use` on it and closes it, whatever happens.
 */
export async function withCommandLog<T>(
  config: Config,
  session: CommandSession,
  use: (log: CommandLog) => Promise<T>,
): Promise<T> {
  const cluster = config.cluster; // the one place the commands look at the mode
  if (cluster) {
    const spool = session.spool ? spoolBeside(config) : null;
    return withPgCommandLog(cluster.databaseUrl, session, (pg) => use(clusterCommandLog(pg, config, spool)));
  }
  const store =
    session.access === 'write' ? openWritable(config, session.create ?? false) : openReadOnly(config);
  try {
    return await use(sqliteCommandLog(store, config.databasePath));
  } finally {
    store.close();
  }
}

/** The SQLite file, read-only; a missing one is said clearly. */
export function openReadOnly(config: Config): Store {
  try {
    statSync(config.databasePath);
  } catch {
    throw new StorageError(
      `no database at ${config.databasePath} (set DATABASE_PATH, or create it with \`consig-receiver migrate\`)`,
    );
  }
  return openStore(config.databasePath, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
}

/**
 * A writable store; a missing database is said clearly (as the read commands do), or created when
 * `create`. A receiver may be writing to the same file: a command waits for its lock rather than fail.
 */
function openWritable(config: Config, create: boolean): Store {
  if (!create) openReadOnly(config).close();
  return openStore(config.databasePath, {
    migrate: create,
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
}

/** The spool at DATABASE_PATH as `prune` finds it: checked readable now; `prune` null when there is none. */
interface LocalSpool {
  path: string;
  prune: ((cutoff: Date) => SpoolPruneSummary) | null;
}

function spoolBeside(config: Config): LocalSpool {
  const path = config.databasePath;
  if (!existsSync(path)) return { path, prune: null };
  openReadOnly(config).close();
  return {
    path,
    prune: (cutoff) => {
      const store = openStore(path, { busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000) });
      try {
        return openSpool(store.db).prune(cutoff);
      } finally {
        store.close();
      }
    },
  };
}

/** The port on PostgreSQL (cluster/pg-command-log.ts); `prune`: RETENTION_DAYS' pass, then the spool's. */
function clusterCommandLog(pg: PgCommandLog, config: Config, checked: LocalSpool | null): CommandLog {
  return {
    ...pg,
    endSessions: (audit) => endSessionsAudited(pg.logSql, audit),
    prune: async (cutoff, now) => {
      const spool = checked ?? spoolBeside(config);
      const summary = await prunePass(pg.logSql, cutoff, now);
      return { summary, spool: { path: spool.path, removed: spool.prune?.(cutoff) ?? null } };
    },
  };
}

/** The port on the SQLite file at `path`: the admin API's adapter and the store's synchronous reads. */
function sqliteCommandLog(store: Store, path: string): CommandLog {
  const { events, deliveries, proposal, averbacoes, track, forwards, feed } = sqliteAdminLog(store);
  const lists = proposalLists(store.db);
  return {
    name: path,
    events,
    deliveries,
    proposal,
    averbacoes,
    track,
    forwards,
    feed,
    stats: async (cutoffs, destinations) => sqliteFigures(store, path, cutoffs, destinations),
    latestProposals: async (statuses, limit) => lists.latest(statuses, { limit }),
    stuckProposals: async (cutoffs, limit) => lists.stuck(cutoffs, { limit }),
    replay: async (wanted, now) =>
      replayEvents(
        store.db,
        'status' in wanted ? eventIdsWithStatus(store.db, wanted.status) : wanted.ids,
        now,
      ),
    endSessions: (audit) => endSessionsAudited(sqliteLogSql(store.db), audit),
    // The file has no notifications: `feed --follow` finds new messages at its next look.
    listen: async () => undefined,
    prune: async (cutoff, now) => ({ summary: await prunePass(sqliteLogSql(store.db), cutoff, now) }),
  };
}

function sqliteFigures(
  store: Store,
  path: string,
  cutoffs: readonly StuckCutoff[],
  destinations: readonly string[],
): LogFigures {
  const repo = forwardDeliveries(store.db);
  // The configured destinations, then those paused or tripped before.
  const names = new Set(destinations);
  for (const row of repo.destinations()) names.add(row.name);
  const { avg, max } = store.deliveries.ackLatency();
  return {
    databaseBytes: fileBytes(path) + fileBytes(`${path}-wal`),
    eventsByStatus: store.events.countByStatus(),
    eventsByKind: store.events.countByKind(),
    duplicatesTotal: store.events.duplicatesTotal(),
    deliveriesByOutcome: store.deliveries.countByOutcome(),
    proposalsByStatus: store.proposals.countByStatus(),
    proposalsStuckByStatus: proposalLists(store.db).stuckCounts(cutoffs),
    ackMs: { avg, max },
    lastDeliveryAt: store.deliveries.lastReceivedAt(),
    forwarding: repo.gauges([...names]),
  };
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
