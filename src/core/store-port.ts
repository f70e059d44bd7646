import type { NewAuditEntry, OverviewFigures, OverviewQuery, ProposalListing } from '../domain/console';
import type { EventStatus, ReplayHooks, ReplayResult } from '../domain/event-status';
import type { ProposalStatus } from '../domain/lifecycle';
import type { PruneSummary, SpoolPruneSummary } from '../domain/retention';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import type { StuckCutoff } from '../domain/stuck';
import { newTracking } from '../domain/event-effects';
import { type EffectProgram, startTracking } from './effects';
import type { StoreGauges } from './gauges';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import { overviewFigures, type AlarmFigures, updateRollup } from './console-overview';
import {
  countBy,
  countEvents,
  eventForwards,
  eventIds,
  eventWithBody,
  listAverbacoes,
  listDeliveries,
  listEvents,
  proposalExists,
  proposalStory,
} from './console-reads';
import { consoleAudit, consoleSessions, endSessionsAudited, signInFailures } from './console-session-queries';
import { feedReader, feedSharing } from './feed-reader';
import { forwardAdmin, type SenderWake } from './forward-admin';
import { type StoreFigures, storeFigures, storeReads } from './store-reads';
import { latestProposals, proposalPage, stuckProposals } from './proposal-lists';
import { replayEvents, replayWanted } from './replay';
import { type EraseRequest, eraseSubject } from './subject-erase';
import { findSubject } from './subject-find';
import { adoptSubjectKey, indexSubjects, subjectKey } from './subject-index';

/**
 * The one store interface (issue 33): what the receiver's consumers — the admin API, the console,
 * the commands — need of a store, narrowed to what differs between SQLite and PostgreSQL. Each
 * store has one adapter per way it is reached (sqlite/sqlite-port.ts: the SQLite file;
 * postgres/pg-port.ts: a replica's pool, a command's own connection), opened in one place
 * (src/open-store.ts for the commands, each mode's composition in src/runtime/ for the server). Everything the
 * consumers see is built from it once, below ({@link adminStore}, {@link consoleStore},
 * {@link commandStore}), with the code written once for both stores (src/core/): the stores differ
 * only in the members of this interface and in their {@link StoreQuery.dialect}.
 *
 * `Q`: what the adapter's statements are run on; PostgreSQL's carries its connection beside them,
 * so that its own figures read in the same snapshot as the core's statements.
 */
export interface StorePort<Q extends StoreQuery = StoreQuery> {
  /** The store as messages name it: the SQLite file's path, or postgres://host:port/database. */
  readonly name: string;
  /**
   * Whether the store may be away while this process runs (PostgreSQL: a server elsewhere, which
   * restarts and fails over): its calls then reject with a StorageError, which the routes answer 503
   * (the client asks again). False for the SQLite file, this process's own.
   */
  readonly mayBeAway: boolean;
  /**
   * The file that holds the log (the SQLite file: an erasure searches its bytes, appends to the
   * journal beside it and reaches the backups it records); null where a server holds it (PostgreSQL).
   */
  readonly file: string | null;
  /** Snapshots and transactions (domain/sql/store-sql.ts). */
  readonly sql: StoreSql<Q>;
  /**
   * `fn` (the replay rule, core/replay.ts) in one transaction, with the store's way of making
   * processing look at once (SQLite: the in-process pipeline's sweep, after the commit; PostgreSQL:
   * a turn of each work key, in the transaction).
   */
  replaying(fn: (q: StoreQuery, hooks?: ReplayHooks) => Promise<ReplayResult>): Promise<ReplayResult>;
  /**
   * Runs an effect program (core/effects.ts: a registration's tracking) in one transaction, the
   * first poll it asks for queued in it (PostgreSQL: a pg-boss job; SQLite polls from the row).
   */
  effects<R>(program: EffectProgram<R>): Promise<R>;
  /** How a write to the forwarding tables wakes the sender (core/forward-admin.ts). */
  readonly senderWake: SenderWake;
  /** The overview's figures each store keeps its own way (the delivery alarm's run), read with `q`. */
  consoleFigures(q: Q): Promise<AlarmFigures>;
  /**
   * The log's figures `/metrics` shows (core/gauges.ts), with the destinations' gauges where the
   * store reads them with the log's (PostgreSQL); null when the store does not answer now (the
   * gauges keep their last values).
   */
  gauges(cutoffs: readonly StuckCutoff[]): Promise<LogGauges | null>;
  /** `stats`' figures each store keeps its own way (size on disk, forwarding), read with `q`. */
  statsFigures(q: Q, destinations: readonly string[]): Promise<StoreStats>;
  /** Calls `onChange` when the outbox may have more (PostgreSQL's NOTIFY; never on SQLite). */
  listen(onChange: () => void): Promise<void>;
  /**
   * What RETENTION_DAYS does (domain/retention.ts, core/prune-pass.ts): old bodies and forwarded
   * messages out of the store; in cluster mode then the relayed rows of the local spool.
   */
  prune(cutoff: Date, now: Date): Promise<PruneOutcome>;
  /**
   * An erasure's physical step (issue 45, docs/privacy.md): the old versions of the rows it rewrote
   * made unreadable where the store can (SQLite: the WAL truncated and the file's bytes searched for
   * `forms`, VACUUM when asked and needed, sqlite/scrub.ts; PostgreSQL: VACUUM of the tables, FULL
   * when asked).
   */
  scrub(forms: readonly string[], options: { vacuum: boolean }): Promise<ScrubOutcome>;
}

/** What {@link StorePort.gauges} reads. */
export type LogGauges = StoreGauges & { forwarding?: DestinationGauges[] };

/** What {@link StorePort.scrub} did and found. */
export interface ScrubOutcome {
  /** The files searched and the copies of the person's CPF left in each (none for PostgreSQL). */
  files: { path: string; copies: number }[];
  /** Whether the WAL was checkpointed and truncated; null where the store's WAL is its own. */
  walTruncated: boolean | null;
  /** The rewrite run: none, VACUUM (PostgreSQL's plain one), or a full rewrite. */
  vacuum: 'none' | 'plain' | 'full';
}

/** What {@link StorePort.statsFigures} adds to {@link StoreFigures}. */
export type StoreStats = Pick<StoreFigures, 'databaseBytes' | 'replicas' | 'forwarding'>;

/**
 * What `prune` removed from the store; in cluster mode also from the spool at `path` (`removed`
 * null: there is no spool there, only PostgreSQL was pruned).
 */
export interface PruneOutcome {
  summary: PruneSummary;
  spool?: { path: string; removed: SpoolPruneSummary | null };
}

/** A page of the change feed (contract §8). */
export type FeedReader = AdminStore['feed'];

/** What the admin routes read and write (contract §7, §8). */
export type AdminStore = ReturnType<typeof adminStore>;

export function adminStore(port: StorePort<StoreQuery>) {
  const reads = storeReads(port.sql);
  return {
    ...reads,
    /** Puts events back in the queue, all or nothing (core/replay.ts), and makes processing look at once. */
    replayEvents: (ids: readonly number[], now: string) =>
      port.replaying((q, hooks) => replayEvents(q, ids, now, hooks)),
    /**
     * Tracks a registration declared here or started through the service's client (`queued`, first
     * poll after `graceMs`, domain/event-effects.ts `newTracking`); one already tracked only gets its
     * missing fields. `created`: it was new.
     */
    track: async (t: Parameters<typeof newTracking>[0], now: Date, graceMs: number) => {
      const tracking = newTracking(t, now.getTime(), { graceMs });
      const created = await port.effects(startTracking(tracking, port.sql.dialect, now.toISOString()));
      return { created, averbacao: await reads.averbacao(t.requestId) };
    },
    /** The forwarding tables (contract §8); the writes wake the sender. */
    forwards: forwardAdmin(port.sql, port.senderWake),
    /** A page of the change feed. */
    feed: feedReader(port.sql),
    /** The ledger of sharing's rows for a page the feed served (issue 45). */
    feedShared: feedSharing(port.sql),
    /** The people in the data (issue 45): their index, find, export and erasure. */
    subjects: subjectsOf(port),
  };
}

/** The subject commands' and routes' calls on `port` (core/subject-*.ts). */
function subjectsOf(port: StorePort<StoreQuery>) {
  const { sql } = port;
  return {
    key: (now: Date) => subjectKey(sql, now),
    index: (key: Buffer, options?: Parameters<typeof indexSubjects>[2]) => indexSubjects(sql, key, options),
    find: (hash: string) => findSubject(sql, hash),
    erase: (request: EraseRequest) => eraseSubject(sql, port.senderWake, request),
    scrub: (forms: readonly string[], options: { vacuum: boolean }) => port.scrub(forms, options),
    /** A row of `console_audit` (who looked the person up, exported or erased them). */
    audit: (entry: NewAuditEntry) => consoleAudit(sql).record(entry),
    /** Every erasure the log records (ids only), oldest first. */
    erasures: () =>
      sql.read((q) =>
        q.rows<{ erasure_id: string; subject_hash: string; reason: string }>(
          'SELECT erasure_id, subject_hash, reason FROM erasures ORDER BY id',
        ),
      ),
    /** Makes `key` the store's subject-hash key (a spool takes PostgreSQL's). */
    adoptKey: (key: Buffer, now: Date) => adoptSubjectKey(sql, key, now),
    /** The backups `backup` made of this log (SQLite), so an erasure reaches them. */
    backups: () => sql.read((q) => q.rows<{ path: string }>('SELECT path FROM backups ORDER BY path')),
  };
}

/** {@link adminStore}'s `subjects`. */
export type SubjectStore = ReturnType<typeof subjectsOf>;

/**
 * Everything the console's pages and actions read and write (core/console-reads.ts and its
 * neighbours, in the SQLite store's shapes, so that one set of pages renders either), with the
 * replay rule and the forwarding tables of the admin API. Each page's reads run in one snapshot
 * where they are more than one (the overview, a proposal's story), so the figures of a page agree
 * with each other. Each call of PostgreSQL's rejects with a StorageError while PostgreSQL cannot
 * answer this replica; the console answers that with a 503.
 */
export type ConsoleStore = ReturnType<typeof consoleStore>;

/** The sign-in throttle's counts (http/console/throttle.ts), shared by every process on the store. */
export type SignInFailures = ConsoleStore['signInFailures'];

export function consoleStore<Q extends StoreQuery>(port: StorePort<Q>) {
  const { sql } = port;
  // The admin API's replay rule and forwarding tables (the same writes, waking the sender).
  const { replayEvents, forwards } = adminStore(port);
  return {
    sessions: consoleSessions(sql),
    audit: consoleAudit(sql),
    signInFailures: signInFailures(sql),
    /**
     * The overview's figures: the deliveries that arrived since the last view counted into the
     * hourly rollup first (its own transaction), then the figures in one snapshot.
     */
    overview: async (now: Date, query: OverviewQuery): Promise<OverviewFigures> => {
      const rollup = await updateRollup(sql, now);
      const figures = await sql.read((q) => overviewFigures(q, now, query, () => port.consoleFigures(q)));
      return { rollup, ...figures, destinations: await forwards.destinationSummaries(query.destinations) };
    },
    /** A page of events (the window rule of core/console-reads.ts). */
    events: (f: Parameters<typeof listEvents>[1]) => sql.read((q) => listEvents(q, f)),
    /** Every event the filter matches (no paging, no window): a bulk replay's count. */
    countEvents: (f: Parameters<typeof countEvents>[1]) => sql.read((q) => countEvents(q, f)),
    /** Up to `limit` matching ids below `before`, newest first (a bulk replay walks them in chunks). */
    eventIds: (f: Parameters<typeof eventIds>[1], before: number, limit: number) =>
      sql.read((q) => eventIds(q, f, before, limit)),
    /** One event, its raw body (text when valid UTF-8, else the bytes) and the messages it caused. */
    event: (id: number) =>
      sql.read(async (q) => {
        const found = await eventWithBody(q, id);
        return found && { ...found, forwards: await eventForwards(q, id) };
      }),
    deliveries: (f: Parameters<typeof listDeliveries>[1]) => sql.read((q) => listDeliveries(q, f)),
    /** Proposals per status (the funnel) and one page of a listing. */
    proposals: (listing: ProposalListing) =>
      sql.read(async (q) => ({
        counts: await countBy(q, 'proposals', 'status'),
        rows: await proposalPage(q, listing),
      })),
    /** Whether a proposal row or an event names `nu`. */
    proposalExists: (nu: number | string) => sql.read((q) => proposalExists(q, nu)),
    /** What the proposal page tells; undefined when nothing names this proposal. */
    proposalStory: (nu: number | string) => sql.read((q) => proposalStory(q, nu)),
    /** A page of averbações, newest tracked first; `next` is the `before` of the next page. */
    averbacoes: (f: Parameters<typeof listAverbacoes>[1]) => sql.read((q) => listAverbacoes(q, f)),
    replayEvents,
    forwards,
  };
}

/** What the commands read and do: the admin API's, and the few reads and writes only they have. */
export type CommandStore = ReturnType<typeof commandStore>;

export function commandStore<Q extends StoreQuery>(port: StorePort<Q>) {
  const { sql } = port;
  return {
    ...adminStore(port),
    /** The store as messages name it: the SQLite file, or PostgreSQL's host, port and database. */
    name: port.name,
    /** {@link StorePort.file}. */
    file: port.file,
    latestProposals: (statuses: readonly ProposalStatus[], limit: number) =>
      sql.read((q) => latestProposals(q, statuses, { limit })),
    stuckProposals: (cutoffs: readonly StuckCutoff[], limit: number) =>
      sql.read((q) => stuckProposals(q, cutoffs, { limit })),
    /** Everything `stats` shows, read at once. */
    stats: (cutoffs: readonly StuckCutoff[], destinations: readonly string[]): Promise<StoreFigures> =>
      sql.read(async (q) => ({
        ...(await storeFigures(q, cutoffs)),
        ...(await port.statsFigures(q, destinations)),
      })),
    /** Puts the events named (or every one with `status`) back in the queue, all or nothing. */
    replay: (wanted: { ids: readonly number[] } | { status: EventStatus }, now: string) =>
      port.replaying((q, hooks) => replayWanted(q, wanted, now, hooks)),
    /** Ends every console session and records `audit(ended)`, together; returns how many. */
    endSessions: (audit: (ended: number) => NewAuditEntry) => endSessionsAudited(sql, audit),
    /** {@link StorePort.listen}. */
    listen: (onChange: () => void) => port.listen(onChange),
    /** {@link StorePort.prune}. */
    prune: (cutoff: Date, now: Date) => port.prune(cutoff, now),
  };
}

export type { StoreFigures } from './store-reads';
export type { ForwardAdmin } from './forward-admin';
