import type { Pool } from 'pg';
import type {
  AttemptRecord,
  CircuitWrite,
  DestinationGauges,
  DestinationRow,
  DueDelivery,
  DueHead,
  SenderStore,
} from '../domain/forwarding/sender-store';
import { deliveryLastError, storedError } from '../domain/forwarding/sender-store';
import { checkOut, iso, type Sql, sqlOf } from './sql';

/**
 * The forwarding sender's outbox in cluster mode (contract §8, `migrations-pg/0003_forwarding.sql`):
 * the statements of SQLite's store/forward-deliveries.ts, with the same meaning, on PostgreSQL. Only
 * the replica holding a destination's lock (forwarder.ts) sends it, so these reads see no other
 * sender's writes; operators' writes (replay, pause) are guarded against as in SQLite mode.
 *
 * Rows come back in SQLite's shapes: ids as numbers (bigserial fits a double for 2^53 rows), times
 * as ISO strings, `paused` as 0/1.
 */

/** The sender's store, and the figures `/metrics` shows per destination. */
export interface PgForwardStore extends SenderStore {
  /** Backlog, dead letters, oldest waiting delivery and pause flag of each named destination, in that order. */
  gauges(names: readonly string[]): Promise<DestinationGauges[]>;
}

/** Heads of lines only: a row with an earlier pending row of the same order_key waits for it (contract §8, order). */
const HEAD_OF_LINE = `NOT EXISTS (SELECT 1 FROM forward_deliveries e
  WHERE e.destination = d.destination AND e.order_key = d.order_key AND e.status = 'pending' AND e.id < d.id)`;

const DUE = `SELECT d.id, d.order_key FROM forward_deliveries d
  WHERE d.destination = $1 AND d.status = 'pending' AND d.next_attempt_at <= $2::timestamptz AND ${HEAD_OF_LINE}
  ORDER BY d.id LIMIT $3`;

// Still pending: an operator may have changed one between `due` and this read.
const DUE_BY_IDS = `SELECT d.id, d.message_id, d.destination, d.order_key, d.attempts, m.webhook_id, m.type, m.body,
    m.created_at AS message_created_at
  FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
  WHERE d.id = ANY($1::bigint[]) AND d.status = 'pending'
  ORDER BY d.id`;

// Heads of lines only, as DUE: a row waiting behind a retry keeps the `next_attempt_at` it was
// created with (in the past), and counting it would have the sender look again at once, forever.
const NEXT_DUE = `SELECT min(d.next_attempt_at) AS at FROM forward_deliveries d
  WHERE d.destination = $1 AND d.status = 'pending' AND d.next_attempt_at > $2::timestamptz AND ${HEAD_OF_LINE}`;

const INSERT_ATTEMPTS = `INSERT INTO forward_attempts
    (delivery_id, attempt, started_at, duration_ms, http_status, error, outcome, answer)
  SELECT * FROM unnest($1::bigint[], $2::int[], $3::timestamptz[], $4::float8[], $5::int[], $6::text[], $7::text[],
    $8::text[])`;

// One statement for the three outcomes, each setting what SQLite's delivered / retry / dead
// statements set. Guarded by status: a delivery an operator changed meanwhile (a replay) keeps the
// operator's state.
const UPDATE_DELIVERIES = `UPDATE forward_deliveries d SET
    status = u.status, attempts = u.attempt, last_status = u.http_status, last_error = u.last_error,
    next_attempt_at = u.next_attempt_at,
    delivered_at = CASE WHEN u.status = 'delivered' THEN u.at ELSE d.delivered_at END,
    updated_at = u.at
  FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[], $5::text[], $6::timestamptz[], $7::timestamptz[])
    AS u(id, status, attempt, http_status, last_error, next_attempt_at, at)
  WHERE d.id = u.id AND d.status = 'pending'`;

const SAVE_CIRCUITS = `INSERT INTO forward_destinations (name, circuit, updated_at)
  SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
  ON CONFLICT (name) DO UPDATE SET circuit = excluded.circuit, updated_at = excluded.updated_at`;

/**
 * Each named destination's backlog, dead letters, oldest pending `created_at` and pause flag, in
 * the order named (`$1`: the names). The oldest pending is the lowest pending id, as in SQLite
 * (two index probes, not a scan). Also `stats`' figures (pg-reads.ts).
 */
export const FORWARD_GAUGES_SQL = `SELECT n.name AS destination,
    (SELECT count(*) FROM forward_deliveries WHERE destination = n.name AND status = 'pending') AS pending,
    (SELECT count(*) FROM forward_deliveries WHERE destination = n.name AND status = 'dead') AS dead,
    (SELECT created_at FROM forward_deliveries WHERE destination = n.name AND status = 'pending'
      ORDER BY id LIMIT 1) AS oldest_pending_at,
    coalesce((SELECT paused FROM forward_destinations WHERE name = n.name), false) AS paused
  FROM unnest($1::text[]) WITH ORDINALITY AS n(name, ord)
  ORDER BY n.ord`;

/** PostgreSQL's text holds no NUL; an answer's first KB may (it is kept, lossy, as in SQLite). */
function pgText(value: string | null): string | null {
  return value === null ? null : value.replaceAll('\u0000', '');
}

interface DueDeliveryRow extends Omit<DueDelivery, 'id' | 'message_id' | 'message_created_at'> {
  id: string;
  message_id: string;
  message_created_at: Date;
}

/** The sender's store on `pool` (the caller's; it must have an 'error' listener). */
export function pgForwardStore(pool: Pool): PgForwardStore {
  const sql = sqlOf(pool);
  return {
    async due(destination, now, limit): Promise<DueHead[]> {
      const rows = await sql.query<{ id: string; order_key: string }>(DUE, [destination, now, limit]);
      return rows.map((r) => ({ id: Number(r.id), order_key: r.order_key }));
    },

    async dueDeliveries(ids): Promise<DueDelivery[]> {
      if (ids.length === 0) return [];
      const rows = await sql.query<DueDeliveryRow>(DUE_BY_IDS, [ids]);
      return rows.map((r) => ({
        ...r,
        id: Number(r.id),
        message_id: Number(r.message_id),
        message_created_at: iso(r.message_created_at)!,
      }));
    },

    async nextDueAt(destination, after): Promise<string | null> {
      const [row] = await sql.query<{ at: Date | null }>(NEXT_DUE, [destination, after]);
      return iso(row?.at ?? null);
    },

    async destinations(): Promise<DestinationRow[]> {
      const rows = await sql.query<{
        name: string;
        paused: boolean;
        circuit: string | null;
        updated_at: Date;
      }>('SELECT name, paused, circuit, updated_at FROM forward_destinations');
      return rows.map((r) => ({
        name: r.name,
        paused: r.paused ? 1 : 0,
        circuit: r.circuit,
        updated_at: iso(r.updated_at)!,
      }));
    },

    record: (records, circuits) => transaction(pool, (tx) => writeRecords(tx, records, circuits)),

    async gauges(names): Promise<DestinationGauges[]> {
      const rows = await sql.query<{
        destination: string;
        pending: string;
        dead: string;
        oldest_pending_at: Date | null;
        paused: boolean;
      }>(FORWARD_GAUGES_SQL, [names]);
      return rows.map((r) => ({
        destination: r.destination,
        pending: Number(r.pending),
        dead: Number(r.dead),
        oldest_pending_at: iso(r.oldest_pending_at),
        paused: r.paused ? 1 : 0,
      }));
    },
  };
}

/** Attempts, the deliveries' next states and the circuits: three statements, whatever the batch's size. */
async function writeRecords(
  tx: Sql,
  records: readonly AttemptRecord[],
  circuits: readonly CircuitWrite[],
): Promise<void> {
  if (records.length > 0) {
    const col = <T>(f: (r: AttemptRecord) => T): T[] => records.map(f);
    const error = (r: AttemptRecord) => pgText(storedError(r));
    await tx.query(INSERT_ATTEMPTS, [
      col((r) => r.deliveryId),
      col((r) => r.attempt),
      col((r) => r.startedAt),
      col((r) => r.durationMs),
      col((r) => r.httpStatus),
      col(error),
      col((r) => r.outcome),
      col((r) => pgText(r.answer)),
    ]);
    await tx.query(UPDATE_DELIVERIES, [
      col((r) => r.deliveryId),
      col((r) => r.next.status),
      col((r) => r.attempt),
      col((r) => r.httpStatus),
      col((r) => pgText(deliveryLastError(r))),
      col((r) => (r.next.status === 'pending' ? r.next.nextAttemptAt : null)),
      col((r) => r.at),
    ]);
  }
  if (circuits.length > 0) {
    // One row per destination: ON CONFLICT DO UPDATE refuses to touch a row twice in one statement.
    const last = [...new Map(circuits.map((c) => [c.name, c])).values()];
    await tx.query(SAVE_CIRCUITS, [
      last.map((c) => c.name),
      last.map((c) => c.circuit),
      last.map((c) => c.at),
    ]);
  }
}

/** Runs `fn` in one transaction on a client of its own (checkOut: a dropped connection cannot crash the process). */
async function transaction(pool: Pool, fn: (tx: Sql) => Promise<void>): Promise<void> {
  const client = await checkOut(pool);
  let ok = false;
  try {
    await client.query('BEGIN');
    await fn(sqlOf(client));
    await client.query('COMMIT');
    ok = true;
  } finally {
    if (!ok) await client.query('ROLLBACK').catch(() => undefined);
    // A client that failed mid-transaction may be broken (the server went away): not reused.
    client.release(!ok);
  }
}
