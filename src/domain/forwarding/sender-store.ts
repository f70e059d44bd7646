/**
 * What the forwarding sender (forwarding/sender.ts) reads from and writes to the outbox (contract
 * §8), written once for both stores in core/sender-queries.ts (on SQLite in SQLite mode, on
 * PostgreSQL in cluster mode). The row shapes are the ones it returns in both.
 */

/** The head of a (destination, order_key) line that is due: enough to skip it when in flight. */
export interface DueHead {
  id: number;
  order_key: string;
}

/** A delivery that may be attempted now: the head of its (destination, order_key) line, due. */
export interface DueDelivery {
  id: number;
  message_id: number;
  destination: string;
  order_key: string;
  attempts: number;
  webhook_id: string;
  type: string;
  /** The stored body (CPF in full). */
  body: string;
  /** When the message was stored (for the delivery latency). */
  message_created_at: string;
  /** Tracing: the context of the processing that stored the message (src/domain/tracing.ts). */
  trace_context: string | null;
}

/** What became of one delivery after an attempt. */
export type DeliveryNext =
  { status: 'delivered' } | { status: 'pending'; nextAttemptAt: string } | { status: 'dead' };

/** One attempt, as the sender recorded it. */
export interface AttemptRecord {
  deliveryId: number;
  /** 1-based, counted since the delivery was created or last replayed. */
  attempt: number;
  startedAt: string;
  durationMs: number;
  httpStatus: number | null;
  /** `timeout: …` / `network: …`; null when the destination answered. */
  error: string | null;
  outcome: 'delivered' | 'permanent' | 'temporary';
  /** The first KB of the answer's body. */
  answer: string | null;
  next: DeliveryNext;
  at: string;
}

/** How much of an attempt's error text is kept, in the attempt's row and in the delivery's. */
export const STORED_ERROR_CHARS = 1000;

/** An attempt's error as both stores keep it: its first {@link STORED_ERROR_CHARS} characters. */
export function storedError(r: Pick<AttemptRecord, 'error'>): string | null {
  return r.error === null ? null : r.error.slice(0, STORED_ERROR_CHARS);
}

/** The delivery's `last_error` after an attempt: the error, else `HTTP <status>`; none once delivered. */
export function deliveryLastError(r: Pick<AttemptRecord, 'error' | 'httpStatus' | 'next'>): string | null {
  if (r.next.status === 'delivered') return null;
  return storedError(r) ?? `HTTP ${r.httpStatus}`;
}

/** A destination's circuit state to keep (JSON, or null when closed). */
export interface CircuitWrite {
  name: string;
  circuit: string | null;
  at: string;
}

/** What `/metrics` shows of one destination's outbox. */
export interface DestinationGauges {
  destination: string;
  pending: number;
  dead: number;
  oldest_pending_at: string | null;
  /** 1 while paused (SQLite's 0/1; PostgreSQL's boolean is read as such). */
  paused: number;
}

/** A row of `forward_destinations`: what an operator (pause) or the circuit breaker changed. */
export interface DestinationRow {
  name: string;
  /** 0/1 (PostgreSQL's boolean is read as such). */
  paused: number;
  circuit: string | null;
  updated_at: string;
}

/**
 * The sender's outbox, whatever holds it. Every method rejects with the database's error (the
 * sender retries: a locked SQLite file, PostgreSQL restarting). Times are ISO-8601 strings.
 */
export interface SenderStore {
  /**
   * Up to `limit` deliveries of `destination` that may be attempted at `now`, in id order: pending,
   * due, and the head of their (destination, order_key) line (contract §8, order).
   */
  due(destination: string, now: string, limit: number): Promise<DueHead[]>;
  /**
   * The deliveries `due` returned, with their messages, in id order: one call for several (a round
   * trip each is too slow on PostgreSQL). Only those still pending: an operator may have changed
   * one between the two reads.
   */
  dueDeliveries(ids: readonly number[]): Promise<DueDelivery[]>;
  /** The earliest `next_attempt_at` of the destination's heads of lines (as `due`) later than `after`; null when none. */
  nextDueAt(destination: string, after: string): Promise<string | null>;
  /** Every destination an operator or the circuit breaker has touched. */
  destinations(): Promise<DestinationRow[]>;
  /**
   * Stores attempts (each delivery's next state, guarded by `status = 'pending'`: a delivery an
   * operator changed meanwhile keeps the operator's state) and circuit changes, in one transaction.
   */
  record(records: readonly AttemptRecord[], circuits: readonly CircuitWrite[]): Promise<void>;
}
