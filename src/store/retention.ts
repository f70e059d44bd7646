import {
  BODY_PRUNABLE_STATUSES,
  bodyWalkStep,
  type PruneSummary,
  RETENTION_BATCH,
  removableMessages,
} from '../domain/retention';
import type { Db } from './database';

/**
 * RETENTION_DAYS and `prune` on SQLite: applies domain/retention.ts (what goes, what stays, the
 * batch sizes), as cluster/pg-retention.ts does on PostgreSQL. What is SQLite's own is the walk: by
 * primary key from the oldest, in arrival order, in short transactions, so the receiver's writes are
 * never held up for long. The statements differ from PostgreSQL's (a statement per row under the
 * file's write lock here; one per batch with row locks and arrays there), so they are not shared.
 */

/** One pass: bodies, then messages (the order of domain/retention.ts). */
export function pruneSqlite(db: Db, cutoff: Date, now: Date): PruneSummary {
  const { pruned } = pruneBodies(db, cutoff, now);
  const { pruned: forwarded } = pruneForwarded(db, cutoff);
  return { pruned, forwarded, cutoff: cutoff.toISOString() };
}

/**
 * Removes the raw bodies of finished events received before `cutoff`, keeping their rows and dedup
 * keys, `batch` rows per transaction.
 */
export function pruneBodies(
  db: Db,
  cutoff: Date,
  now: Date,
  batch: number = RETENTION_BATCH.sqlite.bodies,
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
        const step = bodyWalkStep(
          { receivedAt: row.received_at, status: row.status, hasBody: row.has_body === 1 },
          cutoffIso,
        );
        // Events are stored in arrival order: the first one newer than the cutoff ends the walk.
        if (step === 'end') {
          reachedCutoff = true;
          break;
        }
        lastId = row.id;
        if (step === 'prune') pruned += prune.run(at, row.id, ...BODY_PRUNABLE_STATUSES).changes;
      }
    })();
    if (reachedCutoff || rows.length < batch) break;
  }
  return { pruned, scannedTo: lastId };
}

/**
 * Removes forwarded messages created before `cutoff` whose every delivery is `delivered`, with their
 * delivery rows and attempts; a message with a delivery still pending or dead stays whole (it may
 * still be sent or replayed), and so does every message newer than the cutoff. The change feed then
 * starts after the removed messages: a cursor older than them simply reads on from the first one
 * kept. Short transactions of `batch` messages, oldest first.
 */
export function pruneForwarded(
  db: Db,
  cutoff: Date,
  batch: number = RETENTION_BATCH.sqlite.messages,
): { pruned: number } {
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
    const ids = next.all(lastId, cutoffIso, batch).map((r) => r.id);
    if (ids.length === 0) break;
    db.transaction(() => {
      const deliveries = ids.flatMap((id) =>
        statuses.all(id).map((d) => ({ messageId: id, status: d.status })),
      );
      for (const id of removableMessages(ids, deliveries)) {
        deleteAttempts.run(id);
        deleteDeliveries.run(id);
        pruned += deleteMessage.run(id).changes;
      }
    })();
    lastId = ids[ids.length - 1]!;
    if (ids.length < batch) break;
  }
  return { pruned };
}
