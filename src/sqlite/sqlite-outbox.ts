import { serializeMessage, type OutgoingMessage } from '../domain/forwarding/messages';
import type { Db } from './database';

/**
 * The outbox's writes (contract §8, migration 0007), run by the event step inside the transaction
 * that processes the event (sqlite/sqlite-step-ops.ts): its messages are stored with one delivery row per
 * destination that wants them (what the event left behind is read back by the step itself). A message is stored once per event and
 * type (UNIQUE (event_id, type)), so processing an event again (a replay, a retry after a crash)
 * adds nothing.
 */

export function forwardOutbox(db: Db) {
  // The inserts stay SQLite's own: one message at a time, as the pipeline stores them, where
  // PostgreSQL stores a turn's whole batch with `unnest` under the outbox's lock (postgres/pg-outbox.ts
  // storeOutbox), which orders ids by commit for the change feed; SQLite's one writer needs no lock.
  const insertMessage = db.prepare<unknown[], { id: number }>(
    `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body,
       trace_context)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (event_id, type) DO NOTHING
     RETURNING id`,
  );
  const insertDelivery = db.prepare(
    `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at, created_at, updated_at)
     VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)
     ON CONFLICT (message_id, destination) DO NOTHING`,
  );

  return {
    /**
     * Stores a message and its delivery rows (due at once). Returns the message's row id, or null
     * when the event already has a message of this type (nothing is written then).
     */
    insert(
      message: OutgoingMessage,
      destinations: readonly string[],
      traceContext: string | null = null,
    ): number | null {
      const row = insertMessage.get(
        message.webhookId,
        message.type,
        message.eventId,
        message.evento,
        message.nuProposta,
        message.requestId,
        message.orderKey,
        message.createdAt,
        serializeMessage(message),
        traceContext,
      );
      if (row === undefined) return null;
      for (const name of destinations) {
        insertDelivery.run(
          row.id,
          name,
          message.orderKey,
          message.createdAt,
          message.createdAt,
          message.createdAt,
        );
      }
      return row.id;
    },
  };
}
