import {
  COUNT_CAP,
  type HourCount,
  type OverviewFigures,
  type OverviewQuery,
  overviewSinceHour,
  type RelaySpoolRow,
  rollupBusy,
  rollupCaughtUp,
  type RollupPosition,
  type RollupResult,
  ROLLUP_STATE,
  rollupStep,
  rollupWindow,
  silenceFigures,
} from '../domain/console';
import type { DeliveryAlarmState } from '../domain/delivery-alarm';
import { isLockBusy } from '../domain/errors';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import { oldestUnprocessedAt } from './store-reads';
import { stuckCounts } from './proposal-lists';

/**
 * The overview's deliveries per hour by outcome (`console_delivery_hours`), kept current by the
 * console itself: each view counts only the `deliveries` rows with an id above the stored watermark
 * (a range of the primary key, so a view costs what arrived since the previous one, never a scan of
 * the log), adds them to their UTC hour and moves the watermark, in one transaction. Nothing runs
 * on the ingest's or the relay's path.
 *
 * Two writers never count a row twice: SQLite's transaction holds the file's write lock; on
 * PostgreSQL, where every replica's console updates the same rows, each update first takes a
 * transaction-scoped advisory lock ({@link ROLLUP_LOCK_KEY}) and only then reads the watermark (the
 * second replica waits for the first's commit, and counts only what came after). A wait past the
 * lock's timeout gives up: the page shows what is counted (`locked`).
 *
 * `deliveries.id` follows arrival: SQLite stores a row with the next rowid when its group commit
 * runs; PostgreSQL's relays insert under one advisory lock (relay.ts RELAY_LOCK_KEY). Deliveries are
 * never deleted, so every row below the watermark has been counted.
 */

/** The advisory-lock key of the rollup's updates on PostgreSQL (ASCII "consigRU"). */
export const ROLLUP_LOCK_KEY = 0x636f6e7369675255n;

/** The longest an update waits for another replica's on PostgreSQL; then the page shows what is counted. */
const LOCK_WAIT = '2s';

/** Where the watermark is (null before the first update), and the newest delivery's id. */
async function rollupPosition(q: StoreQuery): Promise<RollupPosition> {
  const [row] = await q.rows<{ last: number | null; top: number | null }>(
    `SELECT (SELECT last_id FROM console_rollup_state WHERE name = $1) AS last, (SELECT max(id) FROM deliveries) AS top`,
    [ROLLUP_STATE],
  );
  return { last: row?.last ?? null, top: row?.top ?? 0 };
}

/** Counts the deliveries that arrived since the last update (up to ROLLUP_CHUNK_ROWS); how many are left. */
async function catchUp(q: StoreQuery, now: Date): Promise<number> {
  // PostgreSQL's advisory lock, held to the commit (SQLite's write transaction is alone already).
  for (const s of q.dialect.transactionLock(ROLLUP_LOCK_KEY, LOCK_WAIT)) await q.rows(s.text, s.params);
  // Read under the lock: another writer may have moved the watermark while this one waited.
  const at = await rollupPosition(q);
  const window = rollupWindow(now);
  let first: number | null = null;
  if (at.last === null) {
    // A first run starts at the window: the lowest id received in it (domain/console.ts rollupStep).
    const [row] = await q.rows<{ id: number | null }>(
      'SELECT min(id) AS id FROM deliveries WHERE received_at >= $1',
      [window.since],
    );
    first = row?.id ?? null;
  }
  const { from, to, behind } = rollupStep(at, first);
  await q.run(
    `INSERT INTO console_delivery_hours (hour, outcome, n)
     SELECT ${q.dialect.utcHour('received_at')}, outcome, count(*) FROM deliveries WHERE id > $1 AND id <= $2 GROUP BY 1, 2
     ON CONFLICT (hour, outcome) DO UPDATE SET n = console_delivery_hours.n + excluded.n`,
    [from, to],
  );
  await q.run(
    `INSERT INTO console_rollup_state (name, last_id, updated_at) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id, updated_at = excluded.updated_at`,
    [ROLLUP_STATE, to, now.toISOString()],
  );
  await q.run('DELETE FROM console_delivery_hours WHERE hour < $1', [window.keepFrom]);
  return behind;
}

/** One rollup update when there is something to count; another writer's held too long: shown as is. */
export async function updateRollup(sql: StoreSql, now: Date): Promise<RollupResult> {
  const at = await sql.read(rollupPosition);
  if (rollupCaughtUp(at)) return { behind: 0, locked: false };
  try {
    return { behind: await sql.write((q) => catchUp(q, now)), locked: false };
  } catch (err) {
    if (!isLockBusy(err)) throw err;
    return rollupBusy(at);
  }
}

/** The counts of every hour from `sinceHour` on (`2026-11-21T13`), oldest first. */
export function rollupHours(q: StoreQuery, sinceHour: string): Promise<HourCount[]> {
  return q.rows<HourCount>(
    `SELECT hour, outcome, n FROM console_delivery_hours WHERE hour >= $1 ORDER BY hour, ${q.dialect.bytewise('outcome')}`,
    [sinceHour],
  );
}

/** The `n` of a count. */
async function count(q: StoreQuery, text: string, params: readonly unknown[] = []): Promise<number> {
  const [row] = await q.rows<{ n: number }>(text, params);
  return row?.n ?? 0;
}

/** Events at `$1`, counted up to COUNT_CAP over the (status, id) index. */
const EVENTS_AT = `SELECT count(*) AS n FROM (SELECT 1 FROM events WHERE status = $1 LIMIT ${COUNT_CAP}) x`;

/**
 * What the overview shows beside the console's own figures, as each store keeps it: the
 * deactivation alarm's run and the silence (SQLite: the stored run, delivery_alarm; cluster mode:
 * every replica's answers).
 */
export interface AlarmFigures {
  run: DeliveryAlarmState;
  /** Epoch ms of the latest request to a webhook route, or null. */
  lastDeliveryAt: number | null;
  proposalsInFlight: number | (() => number);
}

/**
 * The overview's figures but the rollup's update and the destinations, read with `q` (one
 * snapshot): the console's own, then `store`'s (read in the same snapshot).
 */
export async function overviewFigures(
  q: StoreQuery,
  now: Date,
  query: OverviewQuery,
  store: () => Promise<AlarmFigures>,
): Promise<Omit<OverviewFigures, 'rollup' | 'destinations'>> {
  const hours = await rollupHours(q, overviewSinceHour(now));
  const events = {
    pending: await count(q, EVENTS_AT, ['pending']),
    failed: await count(q, EVENTS_AT, ['failed']),
    dead: await count(q, EVENTS_AT, ['dead']),
  };
  const averbacoes = {
    waiting: await count(q, 'SELECT count(*) AS n FROM averbacoes WHERE next_poll_at IS NOT NULL'),
    // Registrations given up on (stale) and still without a final answer.
    staleWaiting: await count(
      q,
      `SELECT count(*) AS n FROM averbacoes WHERE status IN ('queued', 'processing') AND stale = $1`,
      [true],
    ),
  };
  const s = await store();
  const inFlight = s.proposalsInFlight;
  return {
    hours,
    ...silenceFigures(now, s.lastDeliveryAt, query, typeof inFlight === 'number' ? () => inFlight : inFlight),
    run: s.run,
    // The gauges `/metrics` and `stats` read too (store-reads.ts, proposal-lists.ts).
    stuckByStatus: await stuckCounts(q, query.stuckCutoffs),
    events: { ...events, oldestUnprocessedAt: await oldestUnprocessedAt(q) },
    averbacoes,
    relaySpools: await relaySpools(q),
  };
}

/**
 * One row per spool that ever relayed, by replica (migrations-pg/0002 `relay_spools`): cluster
 * mode only, where replicas relay their spools to PostgreSQL (the dialect's `relaysSpools`); null
 * on SQLite, which has no relay.
 */
async function relaySpools(q: StoreQuery): Promise<RelaySpoolRow[] | null> {
  if (!q.dialect.relaysSpools) return null;
  return q.rows<RelaySpoolRow>(
    `SELECT spool, replica, relayed_through, last_relayed_at, last_received_at FROM relay_spools
     ORDER BY ${q.dialect.bytewise('replica')}, ${q.dialect.bytewise('spool')}`,
  );
}
