import { trackRegistration } from '../../registry/tracking';
import type { ErrorRequestHandler } from 'express';
import { feedReader } from '../../core/feed';
import { forwardAdmin, type ForwardAdmin } from '../../core/forward-admin';
import { StorageError } from '../../domain/errors';
import type { ReplayResult } from '../../domain/event-status';
import type { PgAdminLog } from '../../cluster/pg-admin-log';
import { type AverbacaoFilter, type DeliveryFilter, type EventFilter, logReads } from '../../core/log-reads';
import { replayEvents } from '../../core/replay';
import type { DeliveryRow } from '../../domain/delivery';
import type { EventRow } from '../../domain/event-status';
import type { AverbacaoRow, ProposalRow, TimelineRow } from '../../domain/log-rows';
import { sqliteLogSql } from '../../store/log-sql';
import type { Store } from '../../store/store';
import { HttpError } from '../errors';
import type { FeedReader } from './feed-waiters';

/**
 * What the admin routes read and write, whichever store holds the log: the SQLite file
 * ({@link sqliteAdminLog}), or PostgreSQL in cluster mode (src/cluster/pg-admin-log.ts, which the
 * ClusterNode provides, composed by {@link pgAdminPort}). The reads and the replay rule are written
 * once for both (core/log-reads.ts, core/replay.ts); the routes parse the request and shape the
 * answer once for both; the stores return the same rows (the SQLite log's shapes: ISO-8601 text
 * times, 0/1 flags, an integer `nu_proposta` as a number).
 */
export interface AdminLog {
  /** `events`, newest first (by id). */
  events(filter: EventFilter): Promise<readonly EventRow[]>;
  /** One event and its raw body: text when it is valid UTF-8, else the bytes; undefined when none. */
  event(id: number): Promise<{ event: EventRow; body: string | Buffer | null } | undefined>;
  /** Puts events back in the queue, all or nothing (core/replay.ts), and makes processing look at once. */
  replayEvents(ids: readonly number[], now: string): Promise<ReplayResult>;
  /** `deliveries`, newest first. */
  deliveries(filter: DeliveryFilter): Promise<readonly DeliveryRow[]>;
  /** A proposal (undefined when it has no row) and every event of it, processed or not. */
  proposal(
    nu: number | string,
  ): Promise<{ proposal: ProposalRow | undefined; timeline: readonly TimelineRow[] }>;
  /** Tracked registrations, the most recently created first. */
  averbacoes(filter: AverbacaoFilter): Promise<readonly AverbacaoRow[]>;
  averbacao(requestId: string): Promise<AverbacaoRow | undefined>;
  /**
   * Tracks a registration declared here or started through the service's client (`queued`, first
   * poll after `graceMs`); one already tracked only gets its missing fields. `created`: it was new.
   */
  track(
    t: {
      requestId: string;
      correlationId: string | null;
      nuProposta: number | string | null;
      via: 'declared' | 'started';
    },
    now: Date,
    graceMs: number,
  ): Promise<{ created: boolean; averbacao: AverbacaoRow | undefined }>;
  /** The forwarding tables (contract §8). */
  forwards: AdminForwards;
  /** A page of the change feed. */
  feed: FeedReader;
}

export type { AverbacaoFilter } from '../../core/log-reads';

/** The operators' statements on the forwarding tables (core/forward-admin.ts, for both stores). */
export type AdminForwards = ForwardAdmin;

/**
 * The SQLite file's log. `sweep` makes the in-process pipeline pick a replay up at once, `nudge`
 * the forwarding sender (both optional: without them the next sweep or poll finds the work).
 */
export function sqliteAdminLog(
  store: Store,
  wake: { sweep?: (() => void) | undefined; nudge?: (() => void) | undefined } = {},
): AdminLog {
  const { averbacoes } = store;
  const sql = sqliteLogSql(store.db);
  return {
    ...logReads(sql),
    replayEvents: async (ids, now) => {
      const result = await sql.write((q) => replayEvents(q, ids, now));
      if (result.queued.length > 0) wake.sweep?.();
      return result;
    },
    track: async (t, now, graceMs) => ({
      created: trackRegistration(averbacoes, t, now, graceMs),
      averbacao: averbacoes.get(t.requestId),
    }),
    // The sender thread reads on its own connection: woken once a write has committed.
    forwards: forwardAdmin(sql, { afterWrite: () => wake.nudge?.() }),
    feed: feedReader(sql),
  };
}

/**
 * Cluster mode's admin log: the same reads and replay rule on PostgreSQL's log through the
 * replica's pool (cluster/pg-admin-log.ts: the running() guard, the read timeout, StorageError while
 * PostgreSQL cannot answer), the replay with its kicks in its transaction.
 */
export function pgAdminPort(admin: PgAdminLog): AdminLog {
  return {
    ...logReads(admin.logSql),
    replayEvents: (ids, now) => admin.replaying((q, hooks) => replayEvents(q, ids, now, hooks)),
    track: admin.track,
    forwards: admin.forwards,
    feed: admin.feed,
  };
}

/** What a route says when PostgreSQL does not answer this replica (the client asks again). */
export const LOG_UNAVAILABLE =
  'the log (PostgreSQL) does not answer this replica now; ask again shortly (a feed cursor you hold stays valid)';

/**
 * Cluster mode: a read or write the log could not do because PostgreSQL is away (a StorageError,
 * src/cluster/pg-admin-log.ts) is answered 503 `log_unavailable` with a Retry-After, never a 500.
 */
export const logUnavailableAs503: ErrorRequestHandler = (err: unknown, _req, _res, next) => {
  next(err instanceof StorageError ? new HttpError(503, 'log_unavailable', LOG_UNAVAILABLE) : err);
};
