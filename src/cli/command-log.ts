import { existsSync, statSync } from 'node:fs';
import { type PgCommandAccess, type PgCommandLog, withPgCommandLog } from '../cluster/pg-command-log';
import type { Config } from '../config';
import { endSessionsAudited } from '../core/console-sessions';
import { type LogFigures, logFigures, logReads } from '../core/log-reads';
import { latestProposals, type ProposalListRow, stuckProposals } from '../core/proposal-lists';
import { replayWanted } from '../core/replay';
import { prunePass } from '../core/retention';
import { forwardingFigures } from '../core/sender-store';
import type { NewAuditEntry } from '../domain/console';
import { StorageError, UsageError } from '../domain/errors';
import type { SpoolFacts, SpoolVerdict } from '../domain/relay-gap';
import type { EventStatus, ReplayResult } from '../domain/event-status';
import type { ProposalStatus } from '../domain/lifecycle';
import type { PruneSummary, SpoolPruneSummary } from '../domain/retention';
import type { LogSql } from '../domain/sql/log-sql';
import type { StuckCutoff } from '../domain/stuck';
import { type AdminLog, sqliteAdminLog } from '../http/admin/admin-log';
import { sqliteLogSql } from '../store/log-sql';
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

export type { LogFigures } from '../core/log-reads';

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

/**
 * The reads both stores answer with the code written once (core/log-reads.ts,
 * core/proposal-lists.ts), on the command's log.
 */
function coreReads(sql: LogSql) {
  const { events, deliveries, proposal, averbacoes } = logReads(sql);
  return {
    events,
    deliveries,
    proposal,
    averbacoes,
    latestProposals: (statuses: readonly ProposalStatus[], limit: number) =>
      sql.read((q) => latestProposals(q, statuses, { limit })),
    stuckProposals: (cutoffs: readonly StuckCutoff[], limit: number) =>
      sql.read((q) => stuckProposals(q, cutoffs, { limit })),
  };
}

/** The port on PostgreSQL (cluster/pg-command-log.ts), its `prune` followed by the spool's. */
function clusterCommandLog(pg: PgCommandLog, config: Config, checked: LocalSpool | null): CommandLog {
  return {
    name: pg.name,
    ...coreReads(pg.logSql),
    track: pg.track,
    forwards: pg.forwards,
    feed: pg.feed,
    listen: pg.listen,
    stats: (cutoffs, destinations) =>
      pg.logSql.read(async (q) => ({
        ...(await logFigures(q, cutoffs)),
        ...(await pg.storeFigures(destinations)),
      })),
    replay: (wanted, now) => pg.replaying((q, hooks) => replayWanted(q, wanted, now, hooks)),
    endSessions: (audit) => endSessionsAudited(pg.logSql, audit),
    prune: async (cutoff, now) => {
      const spool = checked ?? spoolBeside(config);
      const summary = await prunePass(pg.logSql, cutoff, now);
      return { summary, spool: { path: spool.path, removed: spool.prune?.(cutoff) ?? null } };
    },
  };
}

/** The port on the SQLite file at `path`: the code written once on the file, and the admin API's adapter. */
function sqliteCommandLog(store: Store, path: string): CommandLog {
  const { track, forwards, feed } = sqliteAdminLog(store);
  const sql = sqliteLogSql(store.db);
  return {
    name: path,
    ...coreReads(sql),
    track,
    forwards,
    feed,
    stats: (cutoffs, destinations) =>
      sql.read(async (q) => ({
        databaseBytes: fileBytes(path) + fileBytes(`${path}-wal`),
        ...(await logFigures(q, cutoffs)),
        forwarding: await forwardingFigures(q, destinations),
      })),
    replay: (wanted, now) => sql.write((q) => replayWanted(q, wanted, now)),
    endSessions: (audit) => endSessionsAudited(sql, audit),
    // The file has no notifications: `feed --follow` finds new messages at its next look.
    listen: async () => undefined,
    prune: async (cutoff, now) => ({ summary: await prunePass(sqliteLogSql(store.db), cutoff, now) }),
  };
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** What `relay verify` compares: each spool file's verdict, and every spool PostgreSQL knows. */
export interface SpoolsVerified {
  database: string;
  verdicts: (SpoolVerdict & { path: string })[];
  known: { spool: string; replica: string; relayed_through: number }[];
}

/**
 * `relay verify` (cluster mode): the spool files at `paths` (default DATABASE_PATH, the spool of a
 * replica run beside this command) read in one snapshot each, then compared with PostgreSQL.
 */
export async function verifySpools(config: Config, paths: readonly string[]): Promise<SpoolsVerified> {
  const cluster = config.cluster;
  if (!cluster)
    throw new UsageError('relay verify compares spools with PostgreSQL: set DATABASE_URL (cluster mode)');
  const files = paths.length > 0 ? paths : [config.databasePath];
  const facts = files.map((path) => ({ path, facts: readSpoolFacts(path, config) }));
  return withPgCommandLog(cluster.databaseUrl, { access: 'read', command: 'relay-verify' }, (pg) =>
    pg.logSql.read(async (q) => {
      const verdicts: SpoolsVerified['verdicts'] = [];
      for (const f of facts) verdicts.push({ path: f.path, ...(await pg.verifySpool(q, f.facts)) });
      return { database: pg.name, verdicts, known: await pg.knownSpools(q) };
    }),
  );
}

function readSpoolFacts(path: string, config: Config): SpoolFacts {
  if (!existsSync(path)) throw new StorageError(`no spool at ${path}`);
  const store = openStore(path, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
  try {
    return openSpool(store.db).facts();
  } finally {
    store.close();
  }
}
