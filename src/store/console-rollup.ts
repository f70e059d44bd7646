import {
  type HourCount,
  rollupBusy,
  rollupCaughtUp,
  type RollupPosition,
  type RollupResult,
  rollupStep,
  rollupWindow,
  ROLLUP_STATE as STATE,
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

export function deliveryRollup(db: Db) {
  const position = db.prepare<[string], { last: number | null; top: number | null }>(
    `SELECT (SELECT last_id FROM console_rollup_state WHERE name = ?) AS last, (SELECT max(id) FROM deliveries) AS top`,
  );
  // A first run starts at the window: the lowest id received in it (domain/console.ts rollupStep).
  const firstInWindow = db.prepare<[string], { id: number | null }>(
    'SELECT min(id) AS id FROM deliveries WHERE received_at >= ?',
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
    'SELECT hour, outcome, n FROM console_delivery_hours WHERE hour >= ? ORDER BY hour, outcome',
  );
  const positionNow = (): RollupPosition => {
    const row = position.get(STATE);
    return { last: row?.last ?? null, top: row?.top ?? 0 };
  };

  const catchUp = db.transaction((now: Date): number => {
    const at = positionNow();
    const window = rollupWindow(now);
    const first = at.last === null ? (firstInWindow.get(window.since)?.id ?? null) : null;
    const { from, to, behind } = rollupStep(at, first);
    for (const row of count.all(from, to)) add.run(row.hour, row.outcome, row.n);
    save.run(STATE, to, now.toISOString());
    dropOld.run(window.keepFrom);
    return behind;
  });

  return {
    /** Counts the deliveries that arrived since the last call (up to ROLLUP_CHUNK_ROWS of them). */
    update(now: Date): RollupResult {
      const at = positionNow();
      if (rollupCaughtUp(at)) return { behind: 0, locked: false };
      try {
        return { behind: catchUp.immediate(now), locked: false };
      } catch (err) {
        if (!isLockBusy(err)) throw err;
        return rollupBusy(at);
      }
    },
    /** The counts of every hour from `sinceHour` on (`2026-11-21T13`), oldest first. */
    since: (sinceHour: string): HourCount[] => hours.all(sinceHour),
  };
}

export type DeliveryRollup = ReturnType<typeof deliveryRollup>;
