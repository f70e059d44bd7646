import {
  type AuditRow,
  type ConsoleAverbacaoFilter,
  type ConsoleDeliveryFilter,
  type ConsoleEventFilter,
  type ConsoleSessionRow,
  type ListPage,
  type NewAuditEntry,
  type NewConsoleSession,
  type NewRefusal,
  type OverviewFigures,
  type OverviewQuery,
  overviewSinceHour,
  silenceFigures,
  type ProposalListing,
  type RegistryEventRow,
  STORY_AVERBACOES,
  type StoryEventRow,
  type StoryForwardRow,
  type TokenFingerprints,
} from '../../domain/console';
import type { DeliveryRow } from '../../domain/delivery';
import type { EventRow, ReplayResult } from '../../domain/event-status';
import type { AverbacaoRow } from '../../store/averbacoes';
import type { AverbacaoListRow } from '../../store/console-averbacoes';
import { auditRepo } from '../../store/audit';
import { consoleAverbacoes } from '../../store/console-averbacoes';
import { consoleEvents } from '../../store/console-events';
import { consoleProposals } from '../../store/console-proposals';
import { deliveryRollup } from '../../store/console-rollup';
import { consoleSessionsRepo } from '../../store/console-sessions';
import { consoleThrottleRepo } from '../../store/console-throttle';
import type { Db } from '../../store/database';
import { deliveryAlarmRepo } from '../../store/delivery-alarm';
import { proposalLists } from '../../store/proposal-lists';
import type { ProposalListRow } from '../../store/proposal-lists';
import type { ProposalRow } from '../../store/proposals';
import type { Store } from '../../store/store';
import { type AdminForwards, sqliteAdminLog } from '../admin/admin-log';
import { forwardAdmin } from '../../core/forward-admin';
import { sqliteLogSql } from '../../store/log-sql';

/**
 * Everything the console's pages and actions read and write, whichever store holds the log: the
 * SQLite file ({@link sqliteConsoleLog}, over the synchronous store modules), or PostgreSQL in
 * cluster mode (src/cluster/pg-console-log.ts, shared by every replica). The pages render the rows
 * of either once: both give the SQLite log's shapes (domain/console.ts). Each call of the
 * PostgreSQL log rejects with a StorageError while PostgreSQL cannot answer this replica; the
 * console answers that with a 503 page.
 */
export interface ConsoleLog {
  sessions: ConsoleSessions;
  audit: {
    record(entry: NewAuditEntry): Promise<void>;
    /** A refused request, aggregated (store/audit.ts `refuse`). */
    refuse(refusal: NewRefusal): Promise<void>;
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page(beforeId: number, limit: number): Promise<AuditRow[]>;
  };
  /** The sign-in throttle's counts (http/console/throttle.ts), shared by every process on the log. */
  signInFailures: SignInFailures;
  /** The overview's figures; counts the deliveries that arrived since the last view into the hourly rollup first. */
  overview(now: Date, query: OverviewQuery): Promise<OverviewFigures>;
  /** A page of events (the window rule of store/console-events.ts). */
  events(filter: ConsoleEventFilter): Promise<ListPage<EventRow>>;
  /** Every event the filter matches (no paging, no window): a bulk replay's count. */
  countEvents(filter: ConsoleEventFilter): Promise<number>;
  /** Up to `limit` matching ids below `before`, newest first (a bulk replay walks them in chunks). */
  eventIds(filter: ConsoleEventFilter, before: number, limit: number): Promise<number[]>;
  /** One event, its raw body (text when valid UTF-8, else the bytes) and the messages it caused. */
  event(id: number): Promise<ConsoleEvent | undefined>;
  deliveries(filter: ConsoleDeliveryFilter): Promise<ListPage<DeliveryRow>>;
  /** Proposals per status (the funnel) and one page of a listing. */
  proposals(listing: ProposalListing): Promise<{ counts: Record<string, number>; rows: ProposalListRow[] }>;
  /** Whether a proposal row or an event names `nu`. */
  proposalExists(nu: number | string): Promise<boolean>;
  /** What the proposal page tells; undefined when nothing names this proposal. */
  proposalStory(nu: number | string): Promise<ProposalStoryRows | undefined>;
  /** A page of averbações, newest tracked first; `next` is the `before` of the next page. */
  averbacoes(filter: ConsoleAverbacaoFilter): Promise<{ rows: AverbacaoListRow[]; next: number | null }>;
  /** The replay rule of `/admin` and the commands; makes processing look at once. */
  replayEvents(ids: readonly number[], now: string): Promise<ReplayResult>;
  /** The forwarding tables, the admin API's statements (contract §8); the writes wake the sender. */
  forwards: AdminForwards;
}

export type { OverviewFigures, OverviewQuery, ProposalListing, RelaySpoolRow } from '../../domain/console';

export interface ConsoleSessions {
  create(session: NewConsoleSession): Promise<void>;
  /** The session unless it is unknown or expired at `now`. */
  live(idHash: string, now: string): Promise<ConsoleSessionRow | undefined>;
  touch(idHash: string, now: string): Promise<void>;
  remove(idHash: string): Promise<void>;
  /** Removes every session expired at `now`; returns how many. */
  pruneExpired(now: string): Promise<number>;
  /** Removes every session not opened by its role's configured token (rotated or removed); how many. */
  endOthers(fps: TokenFingerprints): Promise<number>;
  /** Removes every session; returns how many. */
  endAll(): Promise<number>;
}

export interface SignInFailures {
  /** The address's wrong tokens in the window that began after `windowStart`, if any. */
  current(address: string, windowStart: string): Promise<{ since: string; failures: number } | undefined>;
  /** One more, at `now`; a window that began at or before `windowStart` begins again. */
  failed(address: string, now: string, windowStart: string): Promise<void>;
  succeeded(address: string): Promise<void>;
}

export interface ConsoleEvent {
  event: EventRow;
  body: string | Buffer | null;
  forwards: StoryForwardRow[];
}

export interface ProposalStoryRows {
  proposal: ProposalRow | undefined;
  events: StoryEventRow[];
  averbacoes: { row: AverbacaoRow; answers: RegistryEventRow[] }[];
  forwards: StoryForwardRow[];
}

/** Every statement the SQLite console runs, prepared once when the console is mounted. */
export function consoleQueries(db: Db) {
  return {
    events: consoleEvents(db),
    proposals: consoleProposals(db),
    averbacoes: consoleAverbacoes(db),
    rollup: deliveryRollup(db),
    lists: proposalLists(db),
    forwards: forwardAdmin(sqliteLogSql(db)),
    alarm: deliveryAlarmRepo(db),
    audit: auditRepo(db),
    sessions: consoleSessionsRepo(db),
    throttle: consoleThrottleRepo(db),
  };
}

export type ConsoleQueries = ReturnType<typeof consoleQueries>;

/**
 * The SQLite file's console log: the synchronous store modules the console has always read, in
 * the same order, so SQLite mode's pages do not change. `sweep` makes the in-process pipeline pick
 * a replay up at once, `nudge` the forwarding sender.
 */
export function sqliteConsoleLog(store: Store, wake: { sweep(): void; nudge(): void }): ConsoleLog {
  const q = consoleQueries(store.db);
  const admin = sqliteAdminLog(store, wake);
  return {
    sessions: promising(q.sessions),
    audit: promising(q.audit),
    signInFailures: promising(q.throttle),
    overview: async (now, query) => sqliteOverview(store, q, now, query),
    events: async (filter) => q.events.list(filter),
    countEvents: async (filter) => q.events.countMatching(filter),
    eventIds: async (filter, before, limit) => q.events.idsMatching(filter, before, limit),
    event: async (id) => {
      const event = store.events.get(id);
      return event && { event, body: store.events.body(id), forwards: q.proposals.eventForwards(id) };
    },
    deliveries: async (filter) => q.events.deliveries(filter),
    proposals: async (listing) => {
      const rows =
        listing.kind === 'stuck'
          ? q.lists.stuck(listing.cutoffs, { after: listing.after, limit: listing.limit })
          : q.lists.latest(listing.statuses, { before: listing.before, limit: listing.limit });
      return { counts: store.proposals.countByStatus(), rows };
    },
    proposalExists: async (nu) => store.proposals.get(nu) !== undefined || q.proposals.events(nu).length > 0,
    proposalStory: async (nu) => {
      const proposal = store.proposals.get(nu);
      const events = q.proposals.events(nu);
      if (proposal === undefined && events.length === 0) return undefined;
      const averbacoes = store.averbacoes
        .list({ nuProposta: nu, limit: STORY_AVERBACOES })
        .map((row) => ({ row, answers: q.proposals.registryEvents(row.request_id) }));
      return { proposal, events, averbacoes, forwards: q.proposals.forwards(nu) };
    },
    averbacoes: async (filter) => q.averbacoes.list(filter),
    replayEvents: (ids, now) => admin.replayEvents(ids, now),
    forwards: admin.forwards,
  };
}

/** A synchronous repository's methods as the async port's: same names, same arguments. */
type Promising<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<R> : never;
};

function promising<T extends object>(repo: T): Promising<T> {
  const methods = Object.entries(repo).map(([name, fn]) => [
    name,
    async (...args: unknown[]) => (fn as (...a: unknown[]) => unknown)(...args),
  ]);
  return Object.fromEntries(methods) as Promising<T>;
}

async function sqliteOverview(
  store: Store,
  q: ConsoleQueries,
  now: Date,
  query: OverviewQuery,
): Promise<OverviewFigures> {
  const rollup = q.rollup.update(now);
  return {
    rollup,
    hours: q.rollup.since(overviewSinceHour(now)),
    ...silenceFigures(now, q.alarm.lastDeliveryAt(), query, () => q.alarm.proposalsInFlight()),
    run: q.alarm.load(),
    stuckByStatus: q.lists.stuckCounts(query.stuckCutoffs),
    events: {
      pending: q.averbacoes.countEvents('pending'),
      failed: q.averbacoes.countEvents('failed'),
      dead: q.averbacoes.countEvents('dead'),
      oldestUnprocessedAt: store.events.oldestUnprocessedAt(),
    },
    averbacoes: { waiting: store.averbacoes.counts().waiting, staleWaiting: q.averbacoes.staleWaiting() },
    destinations: await q.forwards.destinationSummaries(query.destinations),
    relaySpools: null,
  };
}
