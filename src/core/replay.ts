import {
  type EventStatus,
  isReplayable,
  type ReplayedEvent,
  type ReplayHooks,
  type ReplayResult,
} from '../domain/event-status';
import type { StoreQuery } from '../domain/sql/store-sql';

/**
 * The replay rule, written once for both stores (issue 24): the events named become `pending`, due
 * `now`, with a fresh attempt count and no `processed_at`. All or nothing: when any id is unknown or
 * not replayable (`ignored`, `invalid`), nothing changes and the result says which. Runs in the
 * caller's transaction (`StoreSql.write`, or a command's own on PostgreSQL).
 *
 * What processing needs to see a replay is each store's: SQLite's in-process pipeline is swept
 * after the commit; PostgreSQL holds the events' work keys before their rows are locked and queues
 * a turn of each key in the same transaction ({@link ReplayHooks}, postgres/pg-port.ts).
 */

export async function replayEvents(
  q: StoreQuery,
  ids: readonly number[],
  now: string,
  hooks: ReplayHooks = {},
): Promise<ReplayResult> {
  const result: ReplayResult = { queued: [], unknown: [], notReplayable: [] };
  if (ids.length === 0) return result;
  const select = `SELECT id, status, nu_proposta, request_id FROM events WHERE ${q.dialect.inIds('id', '$1')} ORDER BY id`;
  const list = q.dialect.idList(ids);
  // The keys first (an event's key never changes), held before any row is locked (postgres/pg-locks.ts): a
  // turn running now on one of them finishes first, and the status read is the one replaced.
  if (hooks.hold) await hooks.hold(await q.rows<ReplayedEvent>(select, [list]));
  // Locked (SQLite's write transaction holds the whole file already).
  const rows = await q.rows<ReplayedEvent>(`${select}${q.dialect.rowLock('UPDATE')}`, [list]);
  const byId = new Map(rows.map((r) => [Number(r.id), r]));
  for (const id of ids) {
    const row = byId.get(id);
    if (row === undefined) result.unknown.push(id);
    else if (!isReplayable(row.status)) result.notReplayable.push({ id, status: row.status });
  }
  if (result.unknown.length > 0 || result.notReplayable.length > 0) return result;
  await q.run(
    `UPDATE events SET status = 'pending', attempts = 0, next_attempt_at = $2, processed_at = NULL
     WHERE ${q.dialect.inIds('id', '$1')}`,
    [list, now],
  );
  await hooks.queued?.(rows);
  result.queued = [...ids];
  return result;
}

/** The events named, or every one with `status` (oldest first), replayed as {@link replayEvents}. */
export async function replayWanted(
  q: StoreQuery,
  wanted: { ids: readonly number[] } | { status: EventStatus },
  now: string,
  hooks?: ReplayHooks,
): Promise<ReplayResult> {
  const ids =
    'status' in wanted
      ? (
          await q.rows<{ id: number }>('SELECT id FROM events WHERE status = $1 ORDER BY id', [wanted.status])
        ).map((r) => r.id)
      : wanted.ids;
  return replayEvents(q, ids, now, hooks);
}
