import type { Client } from 'pg';
import { type EventStatus, isReplayable, type ReplayResult } from '../domain/event-status';
import { type Engine, startEngine } from './engine';
import { holdKeys } from './kick-lock';
import { workKeyOf } from './relay';
import { type Sql, sqlOf } from './sql';

/**
 * Replay in cluster mode: the rule of SQLite mode's `replayEvents` (store/pipeline-queries.ts) on
 * PostgreSQL's `events`. The events become `pending`, due `now`, with a fresh attempt count, and a
 * kick of each one's work key is queued in the same transaction (docs/cluster.md §5.2): committed
 * together, so a replayed event is never left without a kick, nor a kick sent for a replay that
 * rolled back. A kick of a key that already has one queued is absorbed by it (pg-boss `stately`).
 *
 * All or nothing: when any id is unknown or not replayable (`ignored`, `invalid`), nothing changes
 * and the result says which. Runs in the caller's transaction (`tx`).
 */
export async function replayEvents(
  tx: Sql,
  ids: readonly number[],
  now: string,
  kick: (sql: Sql, keys: readonly string[]) => Promise<void>,
): Promise<ReplayResult> {
  // Their keys first (an event's key never changes), held before any row is locked (kick-lock.ts):
  // a kick running now on one of them finishes first, and the status read is the one replaced.
  const keyed = await tx.query<{ id: string; nu_proposta: string | null; request_id: string | null }>(
    'SELECT id, nu_proposta, request_id FROM events WHERE id = ANY($1::bigint[])',
    [[...ids]],
  );
  await holdKeys(tx, keyed.map(workKeyOf));
  const rows = await tx.query<{
    id: string;
    status: EventStatus;
    nu_proposta: string | null;
    request_id: string | null;
  }>(
    'SELECT id, status, nu_proposta, request_id FROM events WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE',
    [[...ids]],
  );
  const byId = new Map(rows.map((r) => [Number(r.id), r]));
  const result: ReplayResult = { queued: [], unknown: [], notReplayable: [] };
  for (const id of ids) {
    const row = byId.get(id);
    if (row === undefined) result.unknown.push(id);
    else if (!isReplayable(row.status)) result.notReplayable.push({ id, status: row.status });
  }
  if (result.unknown.length > 0 || result.notReplayable.length > 0) return result;
  await tx.query(
    `UPDATE events SET status = 'pending', attempts = 0, next_attempt_at = $2::timestamptz, processed_at = NULL
     WHERE id = ANY($1::bigint[])`,
    [[...ids], now],
  );
  await kick(tx, [...new Set(rows.map(workKeyOf))]);
  result.queued = [...ids];
  return result;
}

/**
 * `use` in one transaction on `client` (a command's own connection, pg-reads.ts
 * `withPgConnection`: errors name host, port and database, never the password), with a pg-boss
 * started for the purpose (no workers: it only queues jobs in that transaction) and stopped at the
 * end; committed when `use` says so, else rolled back. For the operators' commands in cluster mode
 * (`replay`, `track`).
 */
export async function inEngineTransaction<T>(
  client: Client,
  databaseUrl: string,
  use: (engine: Engine) => Promise<{ result: T; commit: boolean }>,
): Promise<T> {
  const engine = await startEngine(databaseUrl, { max: 2, logger: { error() {}, warn() {} } });
  try {
    await client.query('BEGIN');
    try {
      const { result, commit } = await use(engine);
      await client.query(commit ? 'COMMIT' : 'ROLLBACK');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  } finally {
    await engine.stop(2000).catch(() => undefined);
  }
}

/** The `replay` command in cluster mode, on its connection: the events named, or every one with `status`. */
export async function replayOnPostgres(
  client: Client,
  databaseUrl: string,
  wanted: { ids: readonly number[] } | { status: EventStatus },
  now: string,
): Promise<ReplayResult> {
  return inEngineTransaction(client, databaseUrl, async (engine) => {
    const sql = sqlOf(client);
    const ids =
      'status' in wanted
        ? (
            await sql.query<{ id: string }>('SELECT id FROM events WHERE status = $1 ORDER BY id', [
              wanted.status,
            ])
          ).map((r) => Number(r.id))
        : wanted.ids;
    const result: ReplayResult =
      ids.length === 0
        ? { queued: [], unknown: [], notReplayable: [] }
        : await replayEvents(sql, ids, now, (tx, keys) => engine.kick(tx, keys));
    return { result, commit: result.queued.length > 0 };
  });
}
