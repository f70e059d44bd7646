import type { PoolClient } from 'pg';
import { readSharedAnswers } from '../../cluster/pg-delivery-alarm';
import type { PgAdminLog } from '../../cluster/pg-admin-log';
import { pgLogQuery } from '../../cluster/pg-log-sql';
import { sqlOf } from '../../cluster/sql';
import { consoleLog, type LogSqlOf } from '../../core/console-log';
import type { AverbacaoListRow } from '../../core/console-reads';
import type { ProposalListRow } from '../../core/proposal-lists';
import { replayEvents } from '../../core/replay';
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
  type ProposalListing,
  type RegistryEventRow,
  type StoryEventRow,
  type StoryForwardRow,
  type TokenFingerprints,
} from '../../domain/console';
import { runOfAnswers } from '../../domain/delivery-alarm';
import type { DeliveryRow } from '../../domain/delivery';
import type { EventRow, ReplayResult } from '../../domain/event-status';
import type { AverbacaoRow, ProposalRow } from '../../domain/log-rows';
import { postgresDialect } from '../../domain/sql/dialect';
import { deliveryAlarmRepo } from '../../store/delivery-alarm';
import type { Store } from '../../store/store';
import { type AdminForwards, sqliteAdminLog } from '../admin/admin-log';
import { sqliteLogSql } from '../../store/log-sql';

/**
 * Everything the console's pages and actions read and write, whichever store holds the log: the
 * SQLite file ({@link sqliteConsoleLog}) or PostgreSQL in cluster mode ({@link pgConsoleLog},
 * shared by every replica), one implementation for both (core/console-log.ts). The pages render the
 * rows of either once: both give the SQLite log's shapes (domain/console.ts). Each call of the
 * PostgreSQL log rejects with a StorageError while PostgreSQL cannot answer this replica; the
 * console answers that with a 503 page.
 */
export interface ConsoleLog {
  sessions: ConsoleSessions;
  audit: {
    record(entry: NewAuditEntry): Promise<void>;
    /** A refused request, aggregated (domain/console.ts `refusalWrite`). */
    refuse(refusal: NewRefusal): Promise<void>;
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page(beforeId: number, limit: number): Promise<AuditRow[]>;
  };
  /** The sign-in throttle's counts (http/console/throttle.ts), shared by every process on the log. */
  signInFailures: SignInFailures;
  /** The overview's figures; counts the deliveries that arrived since the last view into the hourly rollup first. */
  overview(now: Date, query: OverviewQuery): Promise<OverviewFigures>;
  /** A page of events (the window rule of core/console-reads.ts). */
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
export type { AverbacaoListRow } from '../../core/console-reads';

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

/**
 * The SQLite file's console log: the console's store written once (core/console-log.ts) on the
 * file's connection, with the figures SQLite keeps its own way (the alarm's stored run). `sweep`
 * makes the in-process
 * pipeline pick a replay up at once, `nudge` the forwarding sender.
 */
export function sqliteConsoleLog(store: Store, wake: { sweep(): void; nudge(): void }): ConsoleLog {
  const admin = sqliteAdminLog(store, wake);
  const alarm = deliveryAlarmRepo(store.db);
  return {
    ...consoleLog(sqliteLogSql(store.db), {
      figures: async () => ({
        run: alarm.load(),
        lastDeliveryAt: alarm.lastDeliveryAt(),
        proposalsInFlight: () => alarm.proposalsInFlight(),
      }),
      destinationSummaries: (configured) => admin.forwards.destinationSummaries(configured),
    }),
    replayEvents: (ids, now) => admin.replayEvents(ids, now),
    forwards: admin.forwards,
  };
}

/**
 * Cluster mode's console log, shared by every replica: the console's store written once
 * (core/console-log.ts) on the admin log's runners (cluster/pg-admin-log.ts: the replica's pool, the
 * running() guard, the read timeout, StorageError while PostgreSQL cannot answer), with the
 * figures PostgreSQL keeps its own way (every replica's answers for the alarm), read in the same
 * snapshot. Its writes that the admin API also makes (the replay rule, core/replay.ts, with its
 * kicks; pause and resume) go through the admin log.
 */
export function pgConsoleLog(admin: PgAdminLog): ConsoleLog {
  const { read, writing } = admin.runners;
  // The snapshot's connection beside its statements, for the parts below.
  const on = (client: PoolClient) => ({ ...pgLogQuery(client), client });
  const sql: LogSqlOf<ReturnType<typeof on>> = {
    dialect: postgresDialect,
    read: (fn) => read((client) => fn(on(client))),
    write: (fn) => writing((client) => fn(on(client))),
  };
  return {
    ...consoleLog(sql, {
      figures: async ({ client }) => {
        const answers = await readSharedAnswers(sqlOf(client));
        return {
          run: runOfAnswers(answers.run),
          lastDeliveryAt: answers.lastDeliveryAt,
          proposalsInFlight: answers.proposalsInFlight,
        };
      },
      destinationSummaries: (configured) => admin.forwards.destinationSummaries(configured),
    }),
    replayEvents: (ids, now) => admin.replaying((q, hooks) => replayEvents(q, ids, now, hooks)),
    forwards: admin.forwards,
  };
}
