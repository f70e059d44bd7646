import {
  type HourCount,
  hourOf,
  ROLLUP_CHUNK_ROWS,
  ROLLUP_KEEP_MS as KEEP_MS,
  ROLLUP_STATE as STATE,
  type RollupResult,
} from '../domain/console';
import type { Db } from './database';
import { isLockBusy } from './database-errors';

/**
 * The overview's deliveries per hour by outcome (migration 0008: `console_delivery_hours`), kept
 * current by the console itself: each call counts only the `deliveries` rows with an id above the
 * stored watermark (a rowid range, so a page view costs what arrived since the previous one, never
 * a scan of the whole log), adds them to their UTC hour and moves the watermark, in one IMMEDIATE
 * transaction (two processes on one file never count a row twice). Nothing runs on the ingest path.
 *
 * `deliveries` ids follow arrival: a row is stored with the next rowid when its group commit runs,
 * and deliveries are never deleted, so every row below the watermark has been counted.
 */

// The shapes and constants shared with cluster mode (cluster/pg-console-rollup.ts): domain/console.ts.
export { type HourCount, hourOf, ROLLUP_CHUNK_ROWS, type RollupResult } from '../domain/console';

export function deliveryRollup(db: Db) {
  const state = db.prepare<[string], { last_id: number }>(
    'SELECT last_id FROM console_rollup_state WHERE name = ?',
  );
  const maxId = db.prepare<[], { id: number | null }>('SELECT max(id) AS id FROM deliveries');
  // The first delivery of the window, by the received_at index: a first run starts there.
  const firstSince = db.prepare<[string], { id: number }>(
    'SELECT id FROM deliveries WHERE received_at >= ? ORDER BY received_at LIMIT 1',
  );
  const count = db.prepare<[number, number], HourCount>(
    `SELECT substr(received_at, 1, 13) AS hour, outcome, count(*) AS n FROM deliveries
     WHERE id > ? AND id <= ? GROUP BY substr(received_at, 1, 13), outcome`,
  );
  const add = db.prepare<[string, string, number]>(
    `INSERT INTO console_delivery_hours (hour, outcome, n) VALUES (?, ?, ?)
     ON CONFLICT (hour, outcome) DO UPDATE SET n = n + excluded.n`,
  );
  const save = db.prepare<[string, number, string]>(
    `INSERT INTO console_rollup_state (name, last_id, updated_at) VALUES (?, ?, ?)
     ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id, updated_at = excluded.updated_at`,
  );
  const dropOld = db.prepare<[string]>('DELETE FROM console_delivery_hours WHERE hour < ?');
  const hours = db.prepare<[string], HourCount>(
    'SELECT hour, outcome, n FROM console_delivery_hours WHERE hour >= ? ORDER BY hour',
  );

  const catchUp = db.transaction((now: Date, top: number): number => {
    const since = new Date(now.getTime() - KEEP_MS);
    const from = state.get(STATE)?.last_id ?? (firstSince.get(since.toISOString())?.id ?? top + 1) - 1;
    const to = Math.min(top, from + ROLLUP_CHUNK_ROWS);
    for (const row of count.all(from, to)) add.run(row.hour, row.outcome, row.n);
    save.run(STATE, to, now.toISOString());
    dropOld.run(hourOf(since.getTime()));
    return top - to;
  });

  return {
    /** Counts the deliveries that arrived since the last call (up to ROLLUP_CHUNK_ROWS of them). */
    update(now: Date): RollupResult {
      const top = maxId.get()?.id ?? 0;
      const last = state.get(STATE)?.last_id;
      if (last !== undefined && last >= top) return { behind: 0, locked: false };
      try {
        return { behind: catchUp.immediate(now, top), locked: false };
      } catch (err) {
        if (!isLockBusy(err)) throw err;
        return { behind: top - (last ?? 0), locked: true };
      }
    },
    /** The counts of every hour from `sinceHour` on (`2026-11-21T13`), oldest first. */
    since: (sinceHour: string): HourCount[] => hours.all(sinceHour),
  };
}

export type DeliveryRollup = ReturnType<typeof deliveryRollup>;
