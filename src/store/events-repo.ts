import type { EventStatus, NewEvent } from '../domain/event-status';
import type { Db } from './database';

/** The `events` table (contract §5): prepared statements, nothing else. */

export type { NewEvent } from '../domain/event-status';

export function eventsRepo(db: Db) {
  const insert = db.prepare<
    [
      string,
      string | null,
      string,
      string | null,
      number | string | null,
      string | null,
      string | null,
      number | null,
      string,
      string | Buffer,
      number,
      string,
      string | null,
      string | null,
    ],
    { id: number }
  >(`INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa,
       received_at, body, body_bytes, status, last_error, trace_context)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (dedup_key) DO NOTHING
     RETURNING id`);
  const bumpDuplicate = db.prepare<[string, string], { id: number; status: EventStatus }>(
    'UPDATE events SET duplicates = duplicates + 1, last_duplicate_at = ? WHERE dedup_key = ? RETURNING id, status',
  );

  return {
    /** Inserts the event unless its dedup key is known; then counts the duplicate instead. */
    insertOrCountDuplicate(e: NewEvent): { id: number; duplicate: boolean; status: EventStatus } {
      const row = insert.get(
        e.dedupKey,
        e.webhookId,
        e.kind,
        e.evento,
        e.nuProposta,
        e.requestId,
        e.registryStatus,
        e.tentativa,
        e.receivedAt,
        e.body,
        e.bodyBytes,
        e.status,
        e.lastError,
        e.traceContext ?? null,
      );
      if (row) return { id: row.id, duplicate: false, status: e.status };
      const dup = bumpDuplicate.get(e.receivedAt, e.dedupKey);
      if (!dup) throw new Error(`dedup key conflict without a row: ${e.dedupKey}`);
      return { id: dup.id, duplicate: true, status: dup.status };
    },
  };
}

export type EventsRepo = ReturnType<typeof eventsRepo>;
