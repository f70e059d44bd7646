import {
  type ConsoleDeliveryFilter,
  type ConsoleEventFilter,
  hasUnindexedCondition,
  type JsonLeaf,
  type ListPage,
  pageOf,
  scanCapFor,
  windowLow,
  windowPage,
} from '../domain/console';
import type { DeliveryRow } from './deliveries';
import type { Db } from './database';
import type { EventRow } from './events';
import { whereClause } from './sql';

/**
 * The console's reads of `events` and `deliveries`: listings newest first with keyset paging
 * (`id < before`) that stay fast at millions of rows.
 *
 * - The conditions an index serves (`status`, `nu_proposta`, and the time range turned into an id
 *   range) choose the rows walked; every other condition (`evento`, `kind`, the JSON match on the
 *   body) is checked on at most {@link SCAN_CAP} of those rows per page. When that window ends
 *   before the page is full, the result says where it stopped, and the next page goes on from
 *   there: a search never costs more than one window per page view, and the page says so.
 * - A time range becomes an id range: events are stored in arrival order (the rule retention relies
 *   on, store/retention.ts), so the first id at or after an instant is found by a binary search on
 *   the primary key (about 20 lookups at a million rows), with no index on `received_at` to pay at
 *   every ingest. The exact `received_at` conditions are applied too.
 */

// The shapes and rules shared with cluster mode (cluster/pg-console-reads.ts) live in
// domain/console.ts; re-exported here for this module's callers.
export {
  type ConsoleEventFilter,
  JSON_SCAN_CAP,
  type JsonLeaf,
  type ListPage,
  SCAN_CAP,
  scanCapFor,
} from '../domain/console';

const EVENT_COLUMNS = `e.id, e.dedup_key, e.webhook_id, e.kind, e.evento, e.nu_proposta, e.request_id,
  e.registry_status, e.tentativa, e.received_at, e.body_bytes, e.status, e.attempts, e.next_attempt_at,
  e.last_error, e.processed_at, e.duplicates, e.last_duplicate_at`;

// A body that is not JSON text (a BLOB kept for a quarantined delivery, invalid JSON) matches no
// JSON leaf instead of failing the query: json_extract would throw on it.
const JSON_VALUE = `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN json_extract(e.body, ?) END`;
const JSON_TYPE = `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN json_type(e.body, ?) END`;

function jsonConditions(leaves: readonly JsonLeaf[]): { sql: string[]; params: (string | number)[] } {
  const sql: string[] = [];
  const params: (string | number)[] = [];
  for (const leaf of leaves) {
    if (leaf.value === null) {
      sql.push(`${JSON_TYPE} = 'null'`);
      params.push(leaf.path);
    } else if (typeof leaf.value === 'boolean') {
      sql.push(`${JSON_TYPE} = ?`);
      params.push(leaf.path, leaf.value ? 'true' : 'false');
    } else {
      sql.push(`${JSON_VALUE} = ?`);
      params.push(leaf.path, leaf.value);
    }
  }
  return { sql, params };
}

/** The first id whose row has `received_at >= at` in a table stored in arrival order, or max+1. */
function firstIdAtOrAfter(db: Db, table: 'events', at: string): number {
  // Two statements: SQLite answers min() or max() alone with one seek, both together with a scan.
  const lowest = db.prepare<[], { id: number | null }>(`SELECT min(id) AS id FROM ${table}`);
  const highest = db.prepare<[], { id: number | null }>(`SELECT max(id) AS id FROM ${table}`);
  const probe = db.prepare<[number], { id: number; received_at: string }>(
    `SELECT id, received_at FROM ${table} WHERE id >= ? ORDER BY id LIMIT 1`,
  );
  const lo = lowest.get()?.id ?? null;
  const hi = highest.get()?.id ?? null;
  if (lo === null || hi === null) return 1;
  let [low, high] = [lo, hi + 1];
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    const row = probe.get(mid);
    // Ids from mid up to the row found do not exist: the row stands for them all.
    if (row === undefined || row.received_at >= at) high = mid;
    else low = row.id + 1;
  }
  return low;
}

export function consoleEvents(db: Db) {
  return {
    /** One page of events (see the module's comment for the bounds). */
    list(filter: ConsoleEventFilter): ListPage<EventRow> {
      return listEvents(db, filter);
    },
    /** Ids of every event the filter matches (no paging, no window): for a bulk replay's count and run. */
    countMatching(filter: ConsoleEventFilter): number {
      const q = eventQuery(db, filter);
      const sql = `SELECT count(*) AS n FROM events e ${q.where}`;
      return db.prepare<(string | number)[], { n: number }>(sql).get(...q.params)?.n ?? 0;
    },
    /** Up to `limit` matching ids below `before`, newest first (a bulk replay walks them in chunks). */
    idsMatching(filter: ConsoleEventFilter, before: number, limit: number): number[] {
      const q = eventQuery(db, { ...filter, before });
      const sql = `SELECT e.id FROM events e ${q.where} ORDER BY e.id DESC LIMIT ?`;
      return db
        .prepare<(string | number)[], { id: number }>(sql)
        .all(...q.params, limit)
        .map((r) => r.id);
    },
    /** One page of deliveries, newest first: `outcome` and the time range (received_at index). */
    deliveries(filter: ConsoleDeliveryFilter) {
      return listDeliveries(db, filter);
    },
  };
}

export type ConsoleEvents = ReturnType<typeof consoleEvents>;

/** WHERE over `e` for the whole filter, the time range as an id range plus the exact times. */
function eventQuery(
  db: Db,
  f: ConsoleEventFilter,
  atLeastId?: number,
): { where: string; params: (string | number)[] } {
  const fromTime = f.from === undefined ? undefined : firstIdAtOrAfter(db, 'events', f.from);
  const fromId = atLeastId === undefined ? fromTime : Math.max(atLeastId, fromTime ?? 0);
  const toId = f.to === undefined ? undefined : firstIdAtOrAfter(db, 'events', f.to);
  // Always bounded above, so that a walk of the primary key is a range (newest first from there).
  const upper = Math.min(f.before ?? Number.MAX_SAFE_INTEGER, toId ?? Number.MAX_SAFE_INTEGER);
  const indexed = whereClause([
    ['e.status = ?', f.status],
    ['e.nu_proposta = ?', f.nuProposta],
    ['e.id >= ?', fromId],
    ['e.id < ?', upper],
    ['e.received_at >= ?', f.from],
    ['e.received_at < ?', f.to],
    ['e.evento = ?', f.evento],
    ['e.kind = ?', f.kind],
  ]);
  const json = jsonConditions(f.json ?? []);
  const parts = [indexed.sql.replace(/^WHERE /, ''), ...json.sql].filter((s) => s !== '');
  return {
    where: parts.length > 0 ? `WHERE ${parts.join(' AND ')}` : '',
    params: [...indexed.params, ...json.params],
  };
}

function listEvents(db: Db, f: ConsoleEventFilter): ListPage<EventRow> {
  const limit = f.limit ?? 50;
  const select = (filter: ConsoleEventFilter, atLeastId?: number) => {
    const q = eventQuery(db, filter, atLeastId);
    const sql = `SELECT ${EVENT_COLUMNS} FROM events e ${q.where} ORDER BY e.id DESC LIMIT ?`;
    return db.prepare<(string | number)[], EventRow>(sql).all(...q.params, limit + 1);
  };
  if (!hasUnindexedCondition(f) || f.nuProposta !== undefined) return pageOf(select(f), limit, null);
  // The window: the newest `cap` entries of the driving index (status, or the primary key) below
  // the cursor, read from the index alone; the page is then searched inside it, newest first.
  const cap = scanCapFor(f);
  const driving = eventQuery(db, { status: f.status, from: f.from, to: f.to, before: f.before });
  // One entry past the window says whether it was cut; that entry is then where the next page starts.
  const edge = db
    .prepare<(string | number)[], { n: number; low: number | null }>(
      `SELECT count(*) AS n, min(id) AS low FROM (SELECT e.id FROM events e ${driving.where} ORDER BY e.id DESC LIMIT ${cap + 1})`,
    )
    .get(...driving.params);
  const low = windowLow(edge, cap);
  return windowPage(select(f, low), limit, low);
}

/**
 * Without a time range, newest by id (the rowid, or `deliveries_outcome_id`). With one, newest by
 * `received_at` over its index, as PostgreSQL lists them (cluster/pg-reads.ts readDeliveries): ids
 * follow the commit, not the arrival (a slow request's row comes after a quicker one's), so an id
 * range taken from the times would miss rows at its ends.
 */
function listDeliveries(db: Db, f: ConsoleDeliveryFilter): ListPage<DeliveryRow> {
  const limit = f.limit ?? 50;
  const ranged = f.from !== undefined || f.to !== undefined;
  const where = ranged
    ? whereClause([
        // `+`: the received_at index drives, never a sort of every row of an outcome.
        ['+outcome = ?', f.outcome],
        ['received_at >= ?', f.from],
        ['received_at < ?', f.to],
        ['(received_at, id) < (SELECT received_at, id FROM deliveries WHERE id = ?)', f.before],
      ])
    : whereClause([
        ['outcome = ?', f.outcome],
        ['id < ?', f.before],
      ]);
  const order = ranged ? 'received_at DESC, id DESC' : 'id DESC';
  const sql = `SELECT * FROM deliveries ${where.sql} ORDER BY ${order} LIMIT ?`;
  const rows = db.prepare<(string | number)[], DeliveryRow>(sql).all(...where.params, limit + 1);
  return pageOf(rows, limit, null);
}
