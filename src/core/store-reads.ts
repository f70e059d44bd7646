import type { EventRow } from '../domain/event-status';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import { clampLimit } from '../domain/list-limit';
import type { AverbacaoRow, ProposalRow, TimelineRow } from '../domain/log-rows';
import {
  AVERBACAO,
  type AverbacaoFilter,
  averbacoesQuery,
  type EventFilter,
  eventsQuery,
  PROPOSAL,
  TIMELINE,
} from '../domain/sql/read-statements';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import type { StuckCutoff } from '../domain/stuck';
import { countBy, eventWithBody, listDeliveries, logNu } from './console-reads';
import { stuckCounts } from './proposal-lists';

/**
 * The log's reads for the admin API and the commands, written once for both stores (issue 24)
 * against {@link StoreSql}: the rows in the SQLite log's shapes, so that the routes and the renderers
 * serve both. Filters are the SQLite store's: `nu_proposta` an integer or text, `limit` optional
 * (1–10 000, 50 when not given).
 */

export interface DeliveryFilter {
  outcome?: string | undefined;
  /** The rows after delivery `beforeId` in the listing's order (the last row of the previous page). */
  beforeId?: number | undefined;
  limit?: number | undefined;
}

/** The admin API's and the commands' reads, each in one snapshot of `sql`. */
export function storeReads(sql: Pick<StoreSql, 'read'>) {
  return {
    /** `events`, newest first (by id). */
    events: (f: EventFilter) =>
      sql.read(async (q) => {
        const nu = f.nuProposta === undefined ? undefined : q.dialect.storedNu(f.nuProposta);
        const query = eventsQuery({ ...f, nuProposta: nu, limit: clampLimit(f.limit) });
        return (await q.rows<EventRow>(query.text, query.params)).map((r) => logNu(q.dialect, r));
      }),
    /** One event and its raw body: text when it is valid UTF-8, else the bytes; undefined when none. */
    event: (id: number) => sql.read((q) => eventWithBody(q, id)),
    /**
     * `deliveries`, newest first: SQLite by id, PostgreSQL by `received_at` (its ids are the relays'
     * order, which interleaves the replicas' spools): the console's rule (console-reads.ts
     * `listDeliveries`), the one place that difference is stated.
     */
    deliveries: (f: DeliveryFilter) =>
      sql.read(async (q) => {
        const filter = { outcome: f.outcome, before: f.beforeId, limit: clampLimit(f.limit) };
        return (await listDeliveries(q, filter)).rows;
      }),
    /** A proposal (undefined when it has no row) and every event of it, processed or not. */
    proposal: (nu: number | string) =>
      sql.read(async (q) => {
        const key = q.dialect.storedNu(nu);
        const [row] = await q.rows<ProposalRow>(PROPOSAL, [key]);
        const timeline = await q.rows<TimelineRow>(TIMELINE, [key]);
        return { proposal: row && logNu(q.dialect, row), timeline };
      }),
    /** Tracked registrations, the most recently created first. */
    averbacoes: (f: AverbacaoFilter) =>
      sql.read(async (q) => {
        const nu = f.nuProposta === undefined ? undefined : q.dialect.storedNu(f.nuProposta);
        const query = averbacoesQuery({ ...f, nuProposta: nu, limit: clampLimit(f.limit) });
        return (await q.rows<AverbacaoRow>(query.text, query.params)).map((r) => logNu(q.dialect, r));
      }),
    /** One tracked registration, or undefined when `requestId` is not tracked. */
    averbacao: (requestId: string) =>
      sql.read(async (q) => {
        const [row] = await q.rows<AverbacaoRow>(AVERBACAO, [requestId]);
        return row && logNu(q.dialect, row);
      }),
  };
}

// ---- stats ---------------------------------------------------------------------------------------

/**
 * What `stats` shows. `forwarding` is null on a PostgreSQL schema that has no forwarding tables
 * yet; `replicas` (who answered the deliveries) only in cluster mode. `databaseBytes`, `replicas`
 * and `forwarding` are each store's own (a file's size, the cluster's replicas, the sender's store).
 */
export interface StoreFigures {
  databaseBytes: number;
  eventsByStatus: Record<string, number>;
  eventsByKind: Record<string, number>;
  duplicatesTotal: number;
  deliveriesByOutcome: Record<string, number>;
  proposalsByStatus: Record<string, number>;
  /** Per cutoff's status, in the cutoffs' order, 0 included. */
  proposalsStuckByStatus: Record<string, number>;
  /** Over the answers the service waited for a commit (accepted, duplicate, quarantined). */
  ackMs: { avg: number | null; max: number | null };
  lastDeliveryAt: string | null;
  replicas?: ReplicaDeliveries[];
  /**
   * Per destination (the configured ones in their order, then the others an operator or the
   * circuit breaker touched, by name): backlog, dead letters, oldest waiting delivery, and whether
   * an operator paused it (0/1).
   */
  forwarding: DestinationGauges[] | null;
}

/** Deliveries answered by one replica (cluster mode). */
export interface ReplicaDeliveries {
  replica: string;
  deliveries: number;
  last_received_at: string | null;
}

/** The figures of `stats` both stores keep alike, read with `q` (the caller's one snapshot). */
export async function storeFigures(
  q: StoreQuery,
  cutoffs: readonly StuckCutoff[],
): Promise<Omit<StoreFigures, 'databaseBytes' | 'replicas' | 'forwarding'>> {
  const one = async <T>(text: string): Promise<T> => (await q.rows<T>(text))[0] as T;
  const eventsByStatus = await countBy(q, 'events', 'status');
  const eventsByKind = await countBy(q, 'events', 'kind');
  const dups = await one<{ n: number | null }>('SELECT sum(duplicates) AS n FROM events');
  const deliveriesByOutcome = await countBy(q, 'deliveries', 'outcome');
  const proposalsByStatus = await countBy(q, 'proposals', 'status');
  const proposalsStuckByStatus = await stuckCounts(q, cutoffs);
  const ackMs = await one<{ avg: number | null; max: number | null }>(
    `SELECT avg(duration_ms) AS avg, max(duration_ms) AS max FROM deliveries
     WHERE outcome IN ('accepted', 'duplicate', 'quarantined')`,
  );
  // One seek on the received_at index in both stores.
  const last = await one<{ at: string | null }>('SELECT max(received_at) AS at FROM deliveries');
  return {
    eventsByStatus,
    eventsByKind,
    duplicatesTotal: dups.n ?? 0,
    deliveriesByOutcome,
    proposalsByStatus,
    proposalsStuckByStatus,
    ackMs: { avg: ackMs.avg, max: ackMs.max },
    lastDeliveryAt: last.at,
  };
}

/**
 * `received_at` of the oldest stored event the pipeline has not finished (pending, or failed and
 * waiting for its retry; oldest = first stored), null when there is none: the first row of each
 * status on the (status, id) index, so two seeks whatever the backlog. A replayed event counts from
 * when it was first received.
 */
export async function oldestUnprocessedAt(q: StoreQuery): Promise<string | null> {
  const [row] = await q.rows<{ at: string | null }>(
    `SELECT min(at) AS at FROM (
       SELECT (SELECT received_at FROM events WHERE status = 'pending' ORDER BY id LIMIT 1) AS at
       UNION ALL
       SELECT (SELECT received_at FROM events WHERE status = 'failed' ORDER BY id LIMIT 1) AS at) x`,
  );
  return row?.at ?? null;
}
