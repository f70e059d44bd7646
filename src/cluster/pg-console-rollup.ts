import {
  type HourCount,
  type RollupPosition,
  ROLLUP_STATE,
  rollupStep,
  rollupWindow,
} from '../domain/console';
import { type PgReader, rows } from './pg-reads';
import type { Sql } from './sql';

/**
 * The overview's deliveries per hour by outcome in cluster mode (migrations-pg/0004
 * `console_delivery_hours`), kept current by the console as in SQLite (store/console-rollup.ts):
 * each view counts only the `deliveries` rows with an id above the stored watermark, adds them to
 * their UTC hour and moves the watermark, in one transaction. Nothing runs on the relay's path.
 *
 * Every replica's console updates the same rows, and two may render the overview at the same
 * moment. Each update therefore first takes a transaction-scoped advisory lock
 * ({@link ROLLUP_LOCK_KEY}) and only then reads the watermark: the second replica waits for the
 * first's commit (READ COMMITTED: its next statement sees it), finds the rows counted, and counts
 * only what came after. The additions are `n = n + excluded.n` (ON CONFLICT), so a row of hours is
 * never overwritten either. A wait longer than {@link LOCK_WAIT} gives up: the page is shown with
 * what is counted, as SQLite's does when another connection holds the file's write lock.
 *
 * `deliveries.id` follows commit order: the relays insert under one advisory lock
 * (relay.ts RELAY_LOCK_KEY), so no row commits below the watermark once it moved past.
 */

/** The advisory-lock key of the rollup's updates (ASCII "consigRU"). */
export const ROLLUP_LOCK_KEY = 0x636f6e7369675255n;

/** The longest an update waits for another replica's; then the page shows what is counted. */
const LOCK_WAIT = '2s';

/** PostgreSQL's "lock_not_available": lock_timeout ran out. */
const LOCK_NOT_AVAILABLE = '55P03';

/** Where the watermark is (null before the first update), and the newest delivery's id. */
export async function rollupPosition(sql: Sql): Promise<RollupPosition> {
  // bigint comes back as text: ids stay far below 2^53.
  const [row] = await sql.query<{ last: string | null; top: string | null }>(
    `SELECT (SELECT last_id FROM console_rollup_state WHERE name = $1) AS last,
            (SELECT max(id) FROM deliveries) AS top`,
    [ROLLUP_STATE],
  );
  return { last: row?.last == null ? null : Number(row.last), top: Number(row?.top ?? 0) };
}

/**
 * Counts the deliveries that arrived since the last update (up to ROLLUP_CHUNK_ROWS of them) in
 * `tx`, a transaction of its own; returns how many are left. Throws what PostgreSQL throws (a
 * lock wait over LOCK_WAIT included: see {@link isRollupBusy}).
 */
export async function updateRollup(tx: Sql, now: Date): Promise<number> {
  await tx.query(`SET LOCAL lock_timeout = '${LOCK_WAIT}'`);
  await tx.query('SELECT pg_advisory_xact_lock($1)', [ROLLUP_LOCK_KEY.toString()]);
  // Read under the lock: another replica may have moved the watermark while this one waited.
  const at = await rollupPosition(tx);
  const window = rollupWindow(now);
  let first: number | null = null;
  if (at.last === null) {
    const [row] = await tx.query<{ id: string | null }>(
      'SELECT min(id) AS id FROM deliveries WHERE received_at >= $1::timestamptz',
      [window.since],
    );
    first = row?.id == null ? null : Number(row.id);
  }
  const { from, to, behind } = rollupStep(at, first);
  await tx.query(
    `INSERT INTO console_delivery_hours (hour, outcome, n)
     SELECT to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24'), outcome, count(*) FROM deliveries
     WHERE id > $1 AND id <= $2 GROUP BY 1, 2
     ON CONFLICT (hour, outcome) DO UPDATE SET n = console_delivery_hours.n + excluded.n`,
    [from, to],
  );
  await tx.query(
    `INSERT INTO console_rollup_state (name, last_id, updated_at) VALUES ($1, $2, $3::timestamptz)
     ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id, updated_at = excluded.updated_at`,
    [ROLLUP_STATE, to, now.toISOString()],
  );
  await tx.query('DELETE FROM console_delivery_hours WHERE hour < $1', [window.keepFrom]);
  return behind;
}

/** Whether an update gave up waiting for another replica's (the page then shows what is counted). */
export function isRollupBusy(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE;
}

/** The counts of every hour from `sinceHour` on (`2026-11-21T13`), oldest first. */
export function readRollupHours(db: PgReader, sinceHour: string): Promise<HourCount[]> {
  return rows<HourCount>(
    db,
    'SELECT hour, outcome, n FROM console_delivery_hours WHERE hour >= $1 ORDER BY hour, outcome COLLATE "C"',
    [sinceHour],
  );
}
