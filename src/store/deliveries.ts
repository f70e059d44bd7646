import type { DeliveryOutcome, DeliveryRow, NewDelivery } from '../domain/delivery';
import type { Db } from './database';
import { clampLimit, whereClause } from './sql';

/** The `deliveries` audit table (contract §5): one row per HTTP request to a webhook route. */

export type { DeliveryOutcome } from '../domain/delivery';

export type { NewDelivery } from '../domain/delivery';

export type { DeliveryRow } from '../domain/delivery';

export interface DeliveryFilter {
  outcome?: string | undefined;
  limit?: number | undefined;
  beforeId?: number | undefined;
}

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
  const countByOutcome = db.prepare<[], { outcome: DeliveryOutcome; n: number }>(
    'SELECT outcome, count(*) AS n FROM deliveries GROUP BY outcome',
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
    list(filter: DeliveryFilter = {}): DeliveryRow[] {
      const where = whereClause([
        ['outcome = ?', filter.outcome],
        ['id < ?', filter.beforeId],
      ]);
      const sql = `SELECT * FROM deliveries ${where.sql} ORDER BY id DESC LIMIT ?`;
      return db.prepare<(string | number)[], DeliveryRow>(sql).all(...where.params, clampLimit(filter.limit));
    },
    countByOutcome(): Record<string, number> {
      return Object.fromEntries(countByOutcome.all().map((r) => [r.outcome, r.n]));
    },
  };
}

export type DeliveriesRepo = ReturnType<typeof deliveriesRepo>;
