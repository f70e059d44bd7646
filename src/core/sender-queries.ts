import {
  type AttemptRecord,
  type CircuitWrite,
  type DestinationGauges,
  type DestinationRow,
  deliveryLastError,
  type DueDelivery,
  type DueHead,
  type SenderStore,
  storedError,
} from '../domain/forwarding/sender-store';
import { type Dialect, perDialect } from '../domain/sql/dialect';
import { type StoreQuery, type StoreSql, loneRows } from '../domain/sql/store-sql';

/**
 * The forwarding sender's outbox (contract §8; migrations/0007, migrations-pg/0003), written once
 * for both stores (issue 24): the {@link SenderStore} of forwarding/sender.ts, and each
 * destination's gauges for `/metrics` and `stats`. SQLite mode runs it in the sender thread on a
 * connection of its own; cluster mode on the pool of the replica holding the destination's lock
 * (runtime/cluster/forwarder.ts), so these reads see no other sender's writes. Operators' writes (replay,
 * pause) are guarded against in both.
 *
 * The sender's reads run for every message sent: each is one statement, run alone
 * ({@link StoreSql.lone}: no BEGIN … COMMIT around it on SQLite). What the two stores do differently is
 * in their dialect (domain/sql/dialect.ts): a batch of records as one statement (PostgreSQL's
 * arrays) or one run per row (SQLite), a list of names as one value, text without NUL.
 */

/**
 * A column of a batch of rows: its name, its type in PostgreSQL (the array `unnest` reads), and its
 * value for a row.
 */
type Column<T> = readonly [name: string, pgType: string, value: (row: T, text: Text) => unknown];

/** Text as the store can keep it (the dialect's `text`). */
type Text = (value: string | null) => string | null;

/** Heads of lines only: a row with an earlier pending row of the same order_key waits for it (contract §8, order). */
const HEAD_OF_LINE = `NOT EXISTS (SELECT 1 FROM forward_deliveries e
  WHERE e.destination = d.destination AND e.order_key = d.order_key AND e.status = 'pending' AND e.id < d.id)`;

/** The columns of a batch: referenced in the statements in this order (SQLite binds by position). */
const ATTEMPT_COLUMNS: readonly Column<AttemptRecord>[] = [
  ['delivery_id', 'bigint', (r) => r.deliveryId],
  ['attempt', 'int', (r) => r.attempt],
  ['started_at', 'timestamptz', (r) => r.startedAt],
  ['duration_ms', 'float8', (r) => r.durationMs],
  ['http_status', 'int', (r) => r.httpStatus],
  ['error', 'text', (r, text) => text(storedError(r))],
  ['outcome', 'text', (r) => r.outcome],
  ['answer', 'text', (r, text) => text(r.answer)],
];
const DELIVERY_COLUMNS: readonly Column<AttemptRecord>[] = [
  ['status', 'text', (r) => r.next.status],
  ['attempt', 'int', (r) => r.attempt],
  ['http_status', 'int', (r) => r.httpStatus],
  ['last_error', 'text', (r, text) => text(deliveryLastError(r))],
  ['next_attempt_at', 'timestamptz', (r) => (r.next.status === 'pending' ? r.next.nextAttemptAt : null)],
  ['delivered_at', 'timestamptz', (r) => (r.next.status === 'delivered' ? r.at : null)],
  ['at', 'timestamptz', (r) => r.at],
  ['id', 'bigint', (r) => r.deliveryId],
];
const CIRCUIT_COLUMNS: readonly Column<CircuitWrite>[] = [
  ['name', 'text', (c) => c.name],
  ['circuit', 'text', (c) => c.circuit],
  ['updated_at', 'timestamptz', (c) => c.at],
];

/** Every statement of the sender's store, written once, in the dialect's words. */
function statements(dialect: Dialect) {
  const attempt = dialect.batch(ATTEMPT_COLUMNS);
  const delivery = dialect.batch(DELIVERY_COLUMNS);
  const circuit = dialect.batch(CIRCUIT_COLUMNS);
  const columns = (list: readonly Column<never>[]) => list.map(([name]) => name).join(', ');
  return {
    // The pending rows of a destination in id order, heads of lines only. Ids and keys only: the
    // sender skips the heads it has in flight, and loads the message of the others alone.
    due: `SELECT d.id, d.order_key FROM forward_deliveries d
      WHERE d.destination = $1 AND d.status = 'pending' AND d.next_attempt_at <= $2 AND ${HEAD_OF_LINE}
      ORDER BY d.id LIMIT $3`,
    // Still pending: an operator may have changed one between `due` and this read.
    dueByIds: `SELECT d.id, d.message_id, d.destination, d.order_key, d.attempts, m.webhook_id, m.type, m.body,
        m.created_at AS message_created_at, m.trace_context
      FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
      WHERE ${dialect.inIds('d.id', '$1')} AND d.status = 'pending'
      ORDER BY d.id`,
    // Heads of lines only, as `due`: a row waiting behind a retry keeps the `next_attempt_at` it was
    // created with (in the past), and counting it would have the sender look again at once, forever.
    nextDue: `SELECT min(d.next_attempt_at) AS at FROM forward_deliveries d
      WHERE d.destination = $1 AND d.status = 'pending' AND d.next_attempt_at > $2 AND ${HEAD_OF_LINE}`,
    destinations: 'SELECT name, paused, circuit, updated_at FROM forward_destinations',
    // Once per attempt: a batch written again because its COMMIT went unanswered (the connection
    // lost as PostgreSQL restarted, the commit durable all the same) must not record its attempts
    // twice. An attempt is its delivery, its number and when it started (a replayed delivery counts
    // from 1 again, at another time); the probe is on forward_attempts_delivery.
    insertAttempts: `INSERT INTO forward_attempts (${columns(ATTEMPT_COLUMNS)})
      SELECT ${ATTEMPT_COLUMNS.map(([name]) => attempt.col(name)).join(', ')} ${attempt.from}
      WHERE NOT EXISTS (SELECT 1 FROM forward_attempts a WHERE a.delivery_id = ${attempt.col('delivery_id')}
        AND a.attempt = ${attempt.col('attempt')} AND a.started_at = ${attempt.col('started_at')})`,
    // One statement for the three outcomes (delivered, retry, dead): `delivered_at` is given only
    // for a delivery. Guarded by status: a delivery an operator changed meanwhile (a replay) keeps
    // the operator's state.
    updateDeliveries: `UPDATE forward_deliveries AS d SET status = ${delivery.col('status')},
        attempts = ${delivery.col('attempt')}, last_status = ${delivery.col('http_status')},
        last_error = ${delivery.col('last_error')}, next_attempt_at = ${delivery.col('next_attempt_at')},
        delivered_at = coalesce(${delivery.col('delivered_at')}, d.delivered_at), updated_at = ${delivery.col('at')}
      ${delivery.from}
      WHERE d.id = ${delivery.col('id')} AND d.status = 'pending'`,
    // WHERE true: SQLite reads an upsert after INSERT … SELECT only with a WHERE clause.
    saveCircuits: `INSERT INTO forward_destinations (${columns(CIRCUIT_COLUMNS)})
      SELECT ${CIRCUIT_COLUMNS.map(([name]) => circuit.col(name)).join(', ')} ${circuit.from} WHERE true
      ON CONFLICT (name) DO UPDATE SET circuit = excluded.circuit, updated_at = excluded.updated_at`,
    // Index-only counts (forward_deliveries_status); the oldest pending is the lowest pending id
    // (two index probes, not a scan).
    gauges: `SELECT n.name AS destination,
        (SELECT count(*) FROM forward_deliveries WHERE destination = n.name AND status = 'pending') AS pending,
        (SELECT count(*) FROM forward_deliveries WHERE destination = n.name AND status = 'dead') AS dead,
        (SELECT created_at FROM forward_deliveries WHERE destination = n.name AND status = 'pending'
          ORDER BY id LIMIT 1) AS oldest_pending_at,
        coalesce((SELECT paused FROM forward_destinations WHERE name = n.name), false) AS paused
      FROM ${dialect.names.table('$1')}
      ORDER BY n.ord`,
  };
}

/** Built once per dialect: each statement is one text, prepared once by the store that runs it. */
const STATEMENTS = perDialect(statements);

/** The sender's store on `log`: its reads alone ({@link StoreSql.lone}), its records in one transaction. */
export function senderStore(log: StoreSql): SenderStore {
  const s = STATEMENTS(log.dialect);
  return {
    due: (destination, now, limit) => loneRows<DueHead>(log, s.due, [destination, now, limit]),
    dueDeliveries: async (ids) =>
      ids.length === 0 ? [] : loneRows<DueDelivery>(log, s.dueByIds, [log.dialect.idList(ids)]),
    nextDueAt: async (destination, after) =>
      (await loneRows<{ at: string | null }>(log, s.nextDue, [destination, after]))[0]?.at ?? null,
    destinations: () => loneRows<DestinationRow>(log, s.destinations),
    record: async (records, circuits) => {
      if (records.length === 0 && circuits.length === 0) return;
      await log.write((q) => writeRecords(q, records, circuits));
    },
  };
}

/** Attempts, the deliveries' next states and the circuits: a statement each per batch (per row on SQLite). */
async function writeRecords(
  q: StoreQuery,
  records: readonly AttemptRecord[],
  circuits: readonly CircuitWrite[],
): Promise<void> {
  const { dialect } = q;
  const s = STATEMENTS(dialect);
  const text: Text = (value) => dialect.text(value);
  const values =
    <T>(columns: readonly Column<T>[]) =>
    (row: T) =>
      columns.map(([, , value]) => value(row, text));
  for (const params of dialect.batchParams(records, values(ATTEMPT_COLUMNS)))
    await q.run(s.insertAttempts, params);
  for (const params of dialect.batchParams(records, values(DELIVERY_COLUMNS)))
    await q.run(s.updateDeliveries, params);
  // One row per destination, the last: PostgreSQL's ON CONFLICT DO UPDATE refuses to touch a row
  // twice in one statement.
  const last = [...new Map(circuits.map((c) => [c.name, c])).values()];
  for (const params of dialect.batchParams(last, values(CIRCUIT_COLUMNS)))
    await q.run(s.saveCircuits, params);
}

/**
 * Backlog, dead letters, oldest waiting delivery and pause flag of each named destination, in the
 * order named: the statement and its values, for a caller that prepares it itself (SQLite's
 * `/metrics`, read synchronously on the pipeline's connection).
 */
export function destinationGaugesQuery(
  dialect: Dialect,
  names: readonly string[],
): { text: string; params: unknown[] } {
  return { text: STATEMENTS(dialect).gauges, params: [dialect.names.param(names)] };
}

/** {@link destinationGaugesQuery}'s rows on `q` (none for no names). */
export async function destinationGauges(
  q: StoreQuery,
  names: readonly string[],
): Promise<DestinationGauges[]> {
  if (names.length === 0) return [];
  const { text, params } = destinationGaugesQuery(q.dialect, names);
  return q.rows<DestinationGauges>(text, params);
}

/**
 * `stats`' forwarding figures: the configured destinations in their order, then every other one
 * an operator or the circuit breaker touched, by name.
 */
export async function forwardingFigures(
  q: StoreQuery,
  configured: readonly string[],
): Promise<DestinationGauges[]> {
  const touched = await q.rows<{ name: string }>('SELECT name FROM forward_destinations');
  // Sorted here, not in SQL: PostgreSQL's default collation is not SQLite's code-point order.
  const others = touched.map((r) => r.name).sort();
  return destinationGauges(q, [...new Set([...configured, ...others])]);
}
