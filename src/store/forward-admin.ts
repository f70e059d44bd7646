import {
  addReplayCounts,
  type BackfillCounts,
  type BackfillRange,
  CHUNK_ROWS,
  type DestinationCountRow,
  type DestinationStateRow,
  type DestinationSummary,
  destinationSummaries,
  FEED_DEFAULT_TYPES,
  type ForwardDetail,
  type ForwardFilter,
  type ForwardListFilter,
  type ForwardRow,
  type AttemptRow,
  listLimit,
  type ReplayCounts,
  replayCounts,
} from '../domain/forwarding/admin';
import type { Destination, MessageType } from '../domain/forwarding/destinations';
import { destinationWants, type FeedPage, type MessageBody } from '../domain/forwarding/messages';
import { parseJsonOrUndefined } from '../domain/json';
import type { Db } from './database';
import { whereClause } from './sql';

/**
 * The operators' statements on the forwarding tables (contract §8, migration 0007): list and show
 * deliveries with their attempts, replay them one by one or by filter, backfill a destination with
 * stored history, pause and resume destinations, summarise them, and read the change feed. The
 * `forwards` command and the `/admin/forwards*`, `/admin/destinations*` and `/admin/feed` routes are
 * thin wrappers over these.
 *
 * Writes over many rows go in transactions of at most {@link CHUNK_ROWS} rows: a replay of a
 * hundred thousand dead letters never holds the file's write lock for more than one short chunk,
 * so ingest (possibly in another process) keeps answering between chunks. The `…Steps` generators
 * commit one chunk per step, so a caller on the event loop can yield between them.
 */

// The shapes and rules shared with cluster mode (cluster/pg-forward-admin.ts) live in
// domain/forwarding/admin.ts; re-exported here for this module's callers.
export {
  type AttemptRow,
  type BackfillCounts,
  type BackfillRange,
  CHUNK_ROWS,
  DELIVERY_STATUS_FILTERS,
  type DeliveryStatusFilter,
  type DestinationSummary,
  FEED_DEFAULT_TYPES,
  type ForwardDetail,
  type ForwardFilter,
  type ForwardListFilter,
  type ForwardRow,
  isEmptyFilter,
  isMessageType,
  parseInstant,
  type ReplayCounts,
  type ShownForward,
  shownForward,
  shownForwardRow,
} from '../domain/forwarding/admin';
export type { FeedPage } from '../domain/forwarding/messages';

const CURSOR_TAG = 'f1';

/**
 * The change feed's cursor: opaque to clients (base64url of a version tag and the message id), so
 * its form can change with a new tag while old cursors are still read.
 */
export function encodeFeedCursor(lastId: number): string {
  return Buffer.from(`${CURSOR_TAG}:${lastId}`, 'utf8').toString('base64url');
}

/** The message id a cursor stands for, or null when it is not one this code wrote. */
export function decodeFeedCursor(cursor: string): number | null {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(cursor)) return null;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^f1:(0|[1-9]\d{0,15})$/.exec(text);
  if (!match || encodeFeedCursor(Number(match[1])) !== cursor) return null;
  const id = Number(match[1]);
  return Number.isSafeInteger(id) ? id : null;
}

const ROW_COLUMNS = `d.id, d.message_id, d.destination, d.status, d.attempts, d.next_attempt_at, d.last_status,
  d.last_error, d.created_at, d.updated_at, d.delivered_at, m.webhook_id, m.type, m.event_id, m.evento,
  m.nu_proposta, m.request_id, m.order_key, m.created_at AS message_created_at`;
const FROM_JOINED = 'FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id';

/** `WHERE …` over `d` (deliveries) and `m` (messages) for the conditions given. */
function filterWhere(filter: ForwardListFilter, afterId?: number) {
  const status: [string, string | undefined] =
    filter.status === 'retrying'
      ? ['d.status = ? AND d.attempts > 0', 'pending']
      : ['d.status = ?', filter.status];
  return whereClause([
    ['d.destination = ?', filter.destination],
    status,
    ['m.nu_proposta = ?', filter.nuProposta],
    ['m.type = ?', filter.type],
    ['m.created_at >= ?', filter.since],
    ['m.created_at < ?', filter.until],
    ['d.id < ?', filter.beforeId],
    ['d.id > ?', afterId],
  ]);
}

/** The operators' statements; see the module's comment. */
export function forwardAdmin(db: Db) {
  return { ...listing(db), ...replays(db), ...backfills(db), ...destinations(db), ...feed(db) };
}

export type ForwardAdmin = ReturnType<typeof forwardAdmin>;

function listing(db: Db) {
  const byId = db.prepare<[number], ForwardRow & { body: string }>(
    `SELECT ${ROW_COLUMNS}, m.body ${FROM_JOINED} WHERE d.id = ?`,
  );
  const attemptsOf = db.prepare<[number], AttemptRow>(
    `SELECT id, attempt, started_at, duration_ms, http_status, error, outcome, answer
     FROM forward_attempts WHERE delivery_id = ? ORDER BY id`,
  );
  return {
    /** Deliveries with their message's columns, newest first (keyset on the delivery id). */
    list(filter: ForwardListFilter = {}): ForwardRow[] {
      const where = filterWhere(filter);
      const limit = listLimit(filter);
      const sql = `SELECT ${ROW_COLUMNS} ${FROM_JOINED} ${where.sql} ORDER BY d.id DESC LIMIT ?`;
      return db.prepare<(string | number)[], ForwardRow>(sql).all(...where.params, limit);
    },
    /** One delivery, its message's body and its attempts in order; undefined when there is none. */
    show(deliveryId: number): ForwardDetail | undefined {
      const row = byId.get(deliveryId);
      if (row === undefined) return undefined;
      const { body, ...delivery } = row;
      return { delivery, body, attempts: attemptsOf.all(deliveryId) };
    },
    /** How many deliveries a replay with this filter would touch, by their status now. */
    countWhere(filter: ForwardFilter): ReplayCounts {
      const where = filterWhere(filter);
      const sql = `SELECT d.status, count(*) AS n ${FROM_JOINED} ${where.sql} GROUP BY d.status`;
      const rows = db.prepare<(string | number)[], { status: string; n: number }>(sql).all(...where.params);
      return replayCounts(rows);
    },
  };
}

function replays(db: Db) {
  const statusOf = db.prepare<[number], { status: string }>(
    'SELECT status FROM forward_deliveries WHERE id = ?',
  );
  // Delivered or dead: a fresh start (attempts are counted again from 1; forward_attempts keeps the
  // history). Pending: due now, its attempt count kept, so its retry schedule goes on.
  const requeue = db.prepare<[{ now: string; id: number }]>(
    `UPDATE forward_deliveries SET
       attempts = CASE WHEN status = 'pending' THEN attempts ELSE 0 END,
       delivered_at = CASE WHEN status = 'pending' THEN delivered_at ELSE NULL END,
       status = 'pending', next_attempt_at = @now, updated_at = @now
     WHERE id = @id`,
  );
  const chunkOf = (filter: ForwardFilter, afterId: number) => {
    const where = filterWhere(filter, afterId);
    const sql = `SELECT d.id, d.status ${FROM_JOINED} ${where.sql} ORDER BY d.id LIMIT ${CHUNK_ROWS}`;
    return db.prepare<(string | number)[], { id: number; status: string }>(sql).all(...where.params);
  };
  const requeueAll = db.transaction((rows: readonly { id: number; status: string }[], now: string) => {
    for (const row of rows) requeue.run({ now, id: row.id });
    return replayCounts(rows.map((r) => ({ status: r.status, n: 1 })));
  });
  const byIds = db.transaction((ids: readonly number[], now: string) => {
    const rows: { id: number; status: string }[] = [];
    for (const id of ids) {
      const row = statusOf.get(id);
      if (row !== undefined) rows.push({ id, status: row.status });
    }
    return requeueAll(rows, now);
  });
  return {
    /** The ids among these that name no delivery. */
    missing: (ids: readonly number[]): number[] => ids.filter((id) => statusOf.get(id) === undefined),
    /** Replays these deliveries (unknown ids are skipped; see `missing`), due at `now`. */
    replay(ids: readonly number[], now: string): ReplayCounts {
      const total = replayCounts([]);
      for (let i = 0; i < ids.length; i += CHUNK_ROWS)
        addReplayCounts(total, byIds(ids.slice(i, i + CHUNK_ROWS), now));
      return total;
    },
    /** Replays every delivery the filter matches, one committed chunk per step; returns the totals. */
    *replayWhereSteps(filter: ForwardFilter, now: string): Generator<ReplayCounts, ReplayCounts> {
      const total = replayCounts([]);
      let afterId = 0;
      for (;;) {
        const rows = chunkOf(filter, afterId);
        if (rows.length === 0) return total;
        addReplayCounts(total, requeueAll(rows, now));
        afterId = (rows[rows.length - 1] as { id: number }).id;
        if (rows.length < CHUNK_ROWS) return total;
        yield total;
      }
    },
  };
}

type StoredMessage = {
  id: number;
  type: MessageType;
  evento: string | null;
  order_key: string;
  body: string;
};

function backfills(db: Db) {
  const insert = db.prepare<[{ messageId: number; destination: string; orderKey: string; now: string }]>(
    `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at,
       created_at, updated_at)
     VALUES (@messageId, @destination, @orderKey, 'pending', 0, @now, @now, @now)
     ON CONFLICT (message_id, destination) DO NOTHING`,
  );
  const chunkOf = (range: BackfillRange, afterId: number): StoredMessage[] => {
    const where = whereClause([
      ['id > ?', afterId],
      ['nu_proposta = ?', range.nuProposta],
      ['created_at >= ?', range.since],
      ['created_at < ?', range.until],
    ]);
    const sql = `SELECT id, type, evento, order_key, body FROM forward_messages ${where.sql}
      ORDER BY id LIMIT ${CHUNK_ROWS}`;
    return db.prepare<(string | number)[], StoredMessage>(sql).all(...where.params);
  };
  const insertWanted = db.transaction(
    (destination: Destination, rows: readonly StoredMessage[], now: string) => {
      const counts: BackfillCounts = { matched: 0, created: 0 };
      for (const row of rows) {
        const body = parseJsonOrUndefined(row.body) as MessageBody | undefined;
        if (
          body === undefined ||
          !destinationWants(destination, { type: row.type, evento: row.evento, body })
        ) {
          continue;
        }
        counts.matched += 1;
        counts.created += insert.run({
          messageId: row.id,
          destination: destination.name,
          orderKey: row.order_key,
          now,
        }).changes;
      }
      return counts;
    },
  );
  return {
    /**
     * Gives `destination` a pending delivery (due at `now`) for every stored message in the range
     * that it wants and has none for yet, in message order, one committed chunk per step. Running it
     * twice creates nothing the second time. The new rows queue behind the destination's pending
     * deliveries: per-proposal order holds among the backfilled messages, and relative to messages
     * already sent, not to those of the same proposal still waiting (they were queued first).
     */
    *backfillSteps(
      destination: Destination,
      range: BackfillRange,
      now: string,
    ): Generator<BackfillCounts, BackfillCounts> {
      const total: BackfillCounts = { matched: 0, created: 0 };
      let afterId = 0;
      for (;;) {
        const rows = chunkOf(range, afterId);
        if (rows.length === 0) return total;
        const chunk = insertWanted(destination, rows, now);
        total.matched += chunk.matched;
        total.created += chunk.created;
        afterId = (rows[rows.length - 1] as StoredMessage).id;
        if (rows.length < CHUNK_ROWS) return total;
        yield total;
      }
    },
  };
}

function destinations(db: Db) {
  const upsertPaused = db.prepare<[{ name: string; paused: number; now: string }]>(
    `INSERT INTO forward_destinations (name, paused, updated_at) VALUES (@name, @paused, @now)
     ON CONFLICT (name) DO UPDATE SET paused = @paused, updated_at = @now`,
  );
  // Index-only (forward_deliveries_status), plus the pending rows for `retrying`.
  const counts = db.prepare<[], DestinationCountRow>(
    `SELECT destination, status, count(*) AS n FROM forward_deliveries GROUP BY destination, status
     UNION ALL
     SELECT destination, 'retrying', count(*) FROM forward_deliveries WHERE status = 'pending' AND attempts > 0
     GROUP BY destination`,
  );
  const oldestPending = db.prepare<[string], { created_at: string }>(
    `SELECT created_at FROM forward_deliveries WHERE destination = ? AND status = 'pending' ORDER BY id LIMIT 1`,
  );
  const table = db.prepare<[], DestinationStateRow>('SELECT name, paused, circuit FROM forward_destinations');
  return {
    /** Pauses or resumes a destination for the sender (another process's sees it within a second). */
    setPaused(name: string, paused: boolean, now: string): void {
      upsertPaused.run({ name, paused: paused ? 1 : 0, now });
    },
    /** Whether an operator paused the destination (its configuration may pause it too). */
    pausedByOperator: (name: string): boolean => table.all().some((r) => r.name === name && r.paused === 1),
    /**
     * Every configured destination, in configuration order, then every other name met in the
     * tables (`configured: false`, by name).
     */
    destinationSummaries(configured: readonly Destination[]): DestinationSummary[] {
      return destinationSummaries(
        configured,
        table.all(),
        counts.all(),
        (name) => oldestPending.get(name)?.created_at ?? null,
      );
    },
  };
}

function feed(db: Db) {
  const page = db.prepare<[number, string, number], { id: number; body: string }>(
    `SELECT id, body FROM forward_messages
     WHERE id > ? AND type IN (SELECT value FROM json_each(?)) ORDER BY id LIMIT ?`,
  );
  const newest = db.prepare<[], { id: number | null }>('SELECT max(id) AS id FROM forward_messages');
  // One read transaction: the page and the newest id come from the same snapshot, so a page that
  // is not full proves nothing of these types lies between its last message and that id.
  const read = db.transaction((afterId: number, limit: number, types: readonly MessageType[]): FeedPage => {
    const messages = page.all(afterId, JSON.stringify(types), limit);
    const last = messages[messages.length - 1];
    if (messages.length === limit && last !== undefined) return { messages, lastId: last.id };
    return { messages, lastId: Math.max(afterId, newest.get()?.id ?? 0) };
  });
  return {
    /**
     * Up to `limit` messages of `types` with an id above `afterId`, in id order: commit order, since
     * SQLite commits one write transaction at a time and a message's id is taken inside it.
     */
    feed(afterId: number, limit: number, types: readonly MessageType[] = FEED_DEFAULT_TYPES): FeedPage {
      return read(afterId, limit, types);
    },
  };
}
