import { trackRegistration } from '../../registry/tracking';
import type { ErrorRequestHandler } from 'express';
import { feedReader } from '../../core/feed';
import { forwardAdmin, type ForwardAdmin } from '../../core/forward-admin';
import { StorageError } from '../../domain/errors';
import type { ReplayResult } from '../../domain/event-status';
import type { AverbacaoRow } from '../../store/averbacoes';
import type { DeliveryFilter, DeliveryRow } from '../../store/deliveries';
import type { EventFilter, EventRow } from '../../store/events';
import { sqliteLogSql } from '../../store/log-sql';
import { replayEvents } from '../../store/pipeline-queries';
import type { ProposalRow, TimelineRow } from '../../store/proposals';
import type { Store } from '../../store/store';
import { HttpError } from '../errors';
import type { FeedReader } from './feed-waiters';

/**
 * What the admin routes read and write, whichever store holds the log: the SQLite file
 * ({@link sqliteAdminLog}), or PostgreSQL in cluster mode (src/cluster/pg-admin-log.ts, which the
 * ClusterNode provides). The routes parse the request and shape the answer once for both; the
 * stores return the same rows (the SQLite log's shapes: ISO-8601 text times, 0/1 flags, an integer
 * `nu_proposta` as a number).
 */
export interface AdminLog {
  /** `events`, newest first (by id). */
  events(filter: EventFilter): Promise<readonly EventRow[]>;
  /** One event and its raw body: text when it is valid UTF-8, else the bytes; undefined when none. */
  event(id: number): Promise<{ event: EventRow; body: string | Buffer | null } | undefined>;
  /**
   * Puts events back in the queue, all or nothing (the replay rule of store/pipeline-queries.ts
   * `replayEvents`), and makes processing look at once.
   */
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

export interface AverbacaoFilter {
  status?: string | undefined;
  stale?: boolean | undefined;
  nuProposta?: number | string | undefined;
  limit?: number | undefined;
}

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
  const { events, deliveries, proposals, averbacoes } = store;
  const log = sqliteLogSql(store.db);
  return {
    events: async (filter) => events.list(filter),
    event: async (id) => {
      const event = events.get(id);
      return event && { event, body: events.body(id) };
    },
    replayEvents: async (ids, now) => {
      const result = replayEvents(store.db, ids, now);
      if (result.queued.length > 0) wake.sweep?.();
      return result;
    },
    deliveries: async (filter) => deliveries.list(filter),
    proposal: async (nu) => ({ proposal: proposals.get(nu), timeline: proposals.timeline(nu) }),
    averbacoes: async (filter) => averbacoes.list(filter),
    averbacao: async (requestId) => averbacoes.get(requestId),
    track: async (t, now, graceMs) => ({
      created: trackRegistration(averbacoes, t, now, graceMs),
      averbacao: averbacoes.get(t.requestId),
    }),
    // The sender thread reads on its own connection: woken once a write has committed.
    forwards: forwardAdmin(log, { afterWrite: () => wake.nudge?.() }),
    feed: feedReader(log),
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
