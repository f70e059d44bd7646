/**
 * One row of a replica's spool as cluster mode's relay reads it (contract §10): a delivery and the
 * event it stored. The shape the SQLite side (sqlite/spool.ts) produces and the relay
 * (runtime/cluster/relay.ts) writes to PostgreSQL; here so that neither layer imports the other.
 */

/** One spooled delivery and, when it stored an event (accepted, quarantined), that event. */
export interface SpoolRow {
  id: number;
  received_at: string;
  /**
   * PostgreSQL's time when the request arrived, as the replica estimated it (runtime/cluster/order-clock.ts,
   * migrations/0012): what its event is ordered by. null before the relay's first heartbeat, and in
   * a spool written by an older version or in SQLite mode (received_at stands for it).
   */
  order_at?: string | null;
  path: string;
  outcome: string;
  http_status: number;
  dedup_key: string | null;
  duration_ms: number;
  body_bytes: number | null;
  secret_index: number | null;
  remote_addr: string | null;
  detail: string | null;
  /** The event's columns: null unless the delivery stored it (outcome accepted or quarantined). */
  event: SpoolEvent | null;
}

export interface SpoolEvent {
  webhook_id: string | null;
  kind: 'event' | 'registry' | 'poll';
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  registry_status: string | null;
  tentativa: number | null;
  received_at: string;
  body: Buffer | null;
  body_bytes: number;
  status: string;
  last_error: string | null;
  /** The delivery's trace context (src/domain/tracing.ts); null when tracing was off. */
  trace_context: string | null;
}
