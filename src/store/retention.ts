import { BODY_PRUNABLE_STATUSES, isBodyPrunable, isMessagePrunable } from '../domain/retention';
import type { Db } from './database';

/**
 * Removes the raw bodies of finished events received before `cutoff`, keeping their rows and dedup
 * keys (the rule: domain/retention.ts, shared with PostgreSQL's cluster/pg-retention.ts). Works in
 * short transactions of `batch` rows walking the primary key from the oldest, so the receiver's
 * writes are never held up for long.
 */
export function pruneBodies(
  db: Db,
  cutoff: Date,
  now: Date,
  batch = 2000,
): { pruned: number; scannedTo: number } {
  const next = db.prepare<
    [number, number],
    { id: number; received_at: string; status: string; has_body: number }
  >(
    `SELECT id, received_at, status, body IS NOT NULL AS has_body FROM events WHERE id > ? ORDER BY id LIMIT ?`,
  );
  const prune = db.prepare<[string, number, ...string[]]>(
    `UPDATE events SET body = NULL, body_pruned_at = ? WHERE id = ?
     AND status IN (${BODY_PRUNABLE_STATUSES.map(() => '?').join(', ')})`,
  );
  const cutoffIso = cutoff.toISOString();
  const at = now.toISOString();
  let lastId = 0;
  let pruned = 0;
  for (;;) {
    const rows = next.all(lastId, batch);
    if (rows.length === 0) break;
    let reachedCutoff = false;
    db.transaction(() => {
      for (const row of rows) {
        // Events are stored in arrival order: the first one newer than the cutoff ends the walk.
        if (row.received_at >= cutoffIso) {
          reachedCutoff = true;
          break;
        }
        lastId = row.id;
        if (row.has_body && isBodyPrunable(row.status))
          pruned += prune.run(at, row.id, ...BODY_PRUNABLE_STATUSES).changes;
      }
    })();
    if (reachedCutoff || rows.length < batch) break;
  }
  return { pruned, scannedTo: lastId };
}

/**
 * Removes forwarded messages created before `cutoff` whose every delivery is `delivered`
 * (domain/retention.ts `isMessagePrunable`), with their delivery rows and attempts. A message with a delivery still pending or dead stays whole (it
 * may still be sent or replayed), and so does every message newer than the cutoff. The change feed
 * then starts after the removed messages: a cursor older than them simply reads on from the first
 * one kept. Short transactions of `batch` messages, oldest first.
 */
export function pruneForwarded(db: Db, cutoff: Date, batch = 500): { pruned: number } {
  const next = db.prepare<[number, string, number], { id: number }>(
    `SELECT id FROM forward_messages WHERE id > ? AND created_at < ? ORDER BY id LIMIT ?`,
  );
  const statuses = db.prepare<[number], { status: string }>(
    'SELECT status FROM forward_deliveries WHERE message_id = ?',
  );
  const deleteAttempts = db.prepare<[number]>(
    `DELETE FROM forward_attempts WHERE delivery_id IN (SELECT id FROM forward_deliveries WHERE message_id = ?)`,
  );
  const deleteDeliveries = db.prepare<[number]>('DELETE FROM forward_deliveries WHERE message_id = ?');
  const deleteMessage = db.prepare<[number]>('DELETE FROM forward_messages WHERE id = ?');
  const cutoffIso = cutoff.toISOString();
  let lastId = 0;
  let pruned = 0;
  for (;;) {
    const rows = next.all(lastId, cutoffIso, batch);
    if (rows.length === 0) break;
    db.transaction(() => {
      for (const { id } of rows) {
        lastId = id;
        if (!isMessagePrunable(statuses.all(id).map((d) => d.status))) continue;
        deleteAttempts.run(id);
        deleteDeliveries.run(id);
        pruned += deleteMessage.run(id).changes;
      }
    })();
    if (rows.length < batch) break;
  }
  return { pruned };
}
