import type { NewDelivery } from '../domain/delivery';
import type { Db } from './database';

/** The `deliveries` audit table (contract §5): one row per HTTP request to a webhook route. */

export function deliveriesRepo(db: Db) {
  const insert = db.prepare<
    [
      string,
      string,
      string,
      number,
      string | null,
      number | null,
      number,
      number | null,
      number | null,
      string | null,
      string | null,
      string | null,
    ]
  >(
    `INSERT INTO deliveries (received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes,
       secret_index, remote_addr, detail, order_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  return {
    insert(d: NewDelivery): void {
      insert.run(
        d.receivedAt,
        d.path,
        d.outcome,
        d.httpStatus,
        d.dedupKey,
        d.eventId,
        d.durationMs,
        d.bodyBytes,
        d.secretIndex,
        d.remoteAddr,
        d.detail,
        d.orderAt ?? null,
      );
    },
  };
}

export type DeliveriesRepo = ReturnType<typeof deliveriesRepo>;
