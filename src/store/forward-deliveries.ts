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
import type { Db } from './database';

/**
 * The sender's statements on `forward_deliveries` / `forward_attempts` / `forward_destinations`
 * (migration 0007), on its own connection.
 */

export type {
  AttemptRecord,
  CircuitWrite,
  DeliveryNext,
  DestinationGauges,
  DestinationRow,
  DueDelivery,
  DueHead,
} from '../domain/forwarding/sender-store';

// eslint-disable-next-line max-lines-per-function -- one closure per table family: its prepared statements and the short methods that run them, read together
export function forwardDeliveries(db: Db) {
  // The pending rows of a destination in id order, keeping only the head of each line: a row with
  // an earlier pending row of the same order_key waits for it (contract §8, order). Ids and keys
  // only: the sender skips the heads it has in flight, and loads the message of the others alone.
  const due = db.prepare<[string, string, number], DueHead>(
    `SELECT d.id, d.order_key
     FROM forward_deliveries d
     WHERE d.destination = ? AND d.status = 'pending' AND d.next_attempt_at <= ?
       AND NOT EXISTS (SELECT 1 FROM forward_deliveries e
                       WHERE e.destination = d.destination AND e.order_key = d.order_key
                         AND e.status = 'pending' AND e.id < d.id)
     ORDER BY d.id LIMIT ?`,
  );
  // The heads `due` returned, with their messages. Still pending: another process (an operator) may
  // have changed one between the two reads.
  const dueByIds = db.prepare<[string], DueDelivery>(
    `SELECT d.id, d.message_id, d.destination, d.order_key, d.attempts, m.webhook_id, m.type, m.body,
       m.created_at AS message_created_at
     FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
     WHERE d.id IN (SELECT value FROM json_each(?)) AND d.status = 'pending'
     ORDER BY d.id`,
  );
  // Heads of lines only, as `due`: a row waiting behind a retry keeps the `next_attempt_at` it was
  // created with (in the past), and counting it would have the sender look again at once, forever.
  const nextDue = db.prepare<[string, string], { at: string | null }>(
    `SELECT min(d.next_attempt_at) AS at FROM forward_deliveries d
     WHERE d.destination = ? AND d.status = 'pending' AND d.next_attempt_at > ?
       AND NOT EXISTS (SELECT 1 FROM forward_deliveries e
                       WHERE e.destination = d.destination AND e.order_key = d.order_key
                         AND e.status = 'pending' AND e.id < d.id)`,
  );
  const insertAttempt = db.prepare(
    `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, http_status, error, outcome, answer)
     VALUES (@deliveryId, @attempt, @startedAt, @durationMs, @httpStatus, @error, @outcome, @answer)`,
  );
  // Guarded by status: a delivery an operator changed meanwhile (it cannot be pending and sent twice
  // here, but a replay may have reset it) keeps the operator's state.
  const delivered = db.prepare(
    `UPDATE forward_deliveries SET status = 'delivered', attempts = @attempt, last_status = @httpStatus,
       last_error = NULL, next_attempt_at = NULL, delivered_at = @at, updated_at = @at
     WHERE id = @deliveryId AND status = 'pending'`,
  );
  const retry = db.prepare(
    `UPDATE forward_deliveries SET attempts = @attempt, last_status = @httpStatus, last_error = @error,
       next_attempt_at = @nextAttemptAt, updated_at = @at
     WHERE id = @deliveryId AND status = 'pending'`,
  );
  const dead = db.prepare(
    `UPDATE forward_deliveries SET status = 'dead', attempts = @attempt, last_status = @httpStatus,
       last_error = @error, next_attempt_at = NULL, updated_at = @at
     WHERE id = @deliveryId AND status = 'pending'`,
  );
  const destinations = db.prepare<[], DestinationRow>('SELECT * FROM forward_destinations');
  const saveCircuit = db.prepare<[string, string | null, string]>(
    `INSERT INTO forward_destinations (name, circuit, updated_at) VALUES (?, ?, ?)
     ON CONFLICT (name) DO UPDATE SET circuit = excluded.circuit, updated_at = excluded.updated_at`,
  );

  // Index-only counts (forward_deliveries_status); the oldest pending is the lowest pending id.
  const gauges = db.prepare<[string], DestinationGauges>(
    `SELECT d.name AS destination,
       (SELECT count(*) FROM forward_deliveries WHERE destination = d.name AND status = 'pending') AS pending,
       (SELECT count(*) FROM forward_deliveries WHERE destination = d.name AND status = 'dead') AS dead,
       (SELECT created_at FROM forward_deliveries WHERE destination = d.name AND status = 'pending'
        ORDER BY id LIMIT 1) AS oldest_pending_at,
       coalesce((SELECT paused FROM forward_destinations WHERE name = d.name), 0) AS paused
     FROM (SELECT value AS name FROM json_each(?)) d`,
  );
  const record = db.transaction((records: readonly AttemptRecord[], circuits: readonly CircuitWrite[]) => {
    for (const r of records) {
      const row = {
        deliveryId: r.deliveryId,
        attempt: r.attempt,
        startedAt: r.startedAt,
        durationMs: r.durationMs,
        httpStatus: r.httpStatus,
        error: storedError(r),
        outcome: r.outcome,
        answer: r.answer,
        at: r.at,
      };
      insertAttempt.run(row);
      const lastError = deliveryLastError(r);
      if (r.next.status === 'delivered') delivered.run(row);
      else if (r.next.status === 'dead') dead.run({ ...row, error: lastError });
      else retry.run({ ...row, error: lastError, nextAttemptAt: r.next.nextAttemptAt });
    }
    for (const c of circuits) saveCircuit.run(c.name, c.circuit, c.at);
  });

  return {
    /** Up to `limit` deliveries of `destination` that may be attempted at `now` (heads of their lines). */
    due: (destination: string, now: string, limit: number): DueHead[] => due.all(destination, now, limit),
    /** Deliveries `due` returned, with their messages, in id order; those no longer pending are left out. */
    dueDeliveries: (ids: readonly number[]): DueDelivery[] =>
      ids.length === 0 ? [] : dueByIds.all(JSON.stringify(ids)),
    /**
     * The earliest `next_attempt_at` of the destination's heads of lines (as `due`) later than
     * `after` (every one when not given); null when none.
     */
    nextDueAt: (destination: string, after = ''): string | null =>
      nextDue.get(destination, after)?.at ?? null,
    /** Stores attempts and circuit changes in one transaction. */
    record: (records: readonly AttemptRecord[], circuits: readonly CircuitWrite[] = []): void =>
      record(records, circuits),
    /** Backlog, dead letters, oldest waiting delivery and pause flag of each named destination. */
    gauges: (names: readonly string[]): DestinationGauges[] => gauges.all(JSON.stringify(names)),
    /** Every destination an operator or the circuit breaker has touched. */
    destinations: (): DestinationRow[] => destinations.all(),
  };
}

export type ForwardDeliveries = ReturnType<typeof forwardDeliveries>;

/**
 * The sender's {@link SenderStore} on a SQLite connection: the statements above, run synchronously
 * (a locked file rejects with SQLite's `SQLITE_BUSY`, which the sender retries shortly).
 */
export function sqliteSenderStore(db: Db, statements = forwardDeliveries(db)): SenderStore {
  // async: a statement that throws rejects instead of throwing out of the caller.
  return {
    due: async (destination, now, limit) => statements.due(destination, now, limit),
    dueDeliveries: async (ids) => statements.dueDeliveries(ids),
    nextDueAt: async (destination, after) => statements.nextDueAt(destination, after),
    destinations: async () => statements.destinations(),
    record: async (records, circuits) => statements.record(records, circuits),
  };
}
