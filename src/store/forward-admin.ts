import type { CircuitState } from '../domain/forwarding/circuit';
import { type Destination, MESSAGE_TYPES, type MessageType } from '../domain/forwarding/destinations';
import { destinationWants, type MessageBody } from '../domain/forwarding/messages';
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

/** Rows written per transaction by replays and backfills. */
export const CHUNK_ROWS = 1000;

/** A delivery's status as filters name it; `retrying` is `pending` after at least one attempt. */
export const DELIVERY_STATUS_FILTERS = ['pending', 'retrying', 'delivered', 'dead'] as const;
export type DeliveryStatusFilter = (typeof DELIVERY_STATUS_FILTERS)[number];

/** What the change feed serves when no `types` are asked for: the receiver's own understanding. */
export const FEED_DEFAULT_TYPES: readonly MessageType[] = ['proposal.changed', 'averbacao.result'];

/**
 * Which deliveries a replay (or a count) means. Times are ISO instants (see {@link parseInstant})
 * compared with the message's `created_at`: `since` inclusive, `until` exclusive.
 */
export interface ForwardFilter {
  destination?: string | undefined;
  status?: DeliveryStatusFilter | undefined;
  nuProposta?: number | string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

/** A listing's filter: a replay's, plus the message type and keyset paging. */
export interface ForwardListFilter extends ForwardFilter {
  type?: MessageType | undefined;
  /** Deliveries with an id below this one (paging backwards from the newest). */
  beforeId?: number | undefined;
  /** @default 50 (at most 1000) */
  limit?: number | undefined;
}

/** A delivery and the columns of its message that say what it is. */
export interface ForwardRow {
  id: number;
  message_id: number;
  destination: string;
  status: 'pending' | 'delivered' | 'dead';
  attempts: number;
  next_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
  delivered_at: string | null;
  webhook_id: string;
  type: MessageType;
  event_id: number;
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  order_key: string;
  message_created_at: string;
}

export interface AttemptRow {
  id: number;
  attempt: number;
  started_at: string;
  duration_ms: number;
  http_status: number | null;
  error: string | null;
  outcome: 'delivered' | 'permanent' | 'temporary';
  /** The first KB of the answer's body. */
  answer: string | null;
}

/** One delivery, its message's stored body (CPF in full) and every attempt in order. */
export interface ForwardDetail {
  delivery: ForwardRow;
  body: string;
  attempts: AttemptRow[];
}

/** What a replay did, by the status each delivery had before. */
export interface ReplayCounts {
  replayed: number;
  by_status: { pending: number; delivered: number; dead: number };
}

/** The messages a backfill looks at: all of them when nothing is given. */
export interface BackfillRange {
  nuProposta?: number | string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

export interface BackfillCounts {
  /** Messages in the range that the destination wants. */
  matched: number;
  /** Of those, the ones that had no delivery row for it and got one. */
  created: number;
}

/** One destination as an operator sees it: never its secrets. */
export interface DestinationSummary {
  name: string;
  /** False for a name met in the tables that no longer is in the configuration. */
  configured: boolean;
  /** The configured URL, its query string hidden (`?…`: it may carry a token); null when not configured. */
  url: string | null;
  types: readonly string[] | null;
  eventos: readonly string[] | null;
  has_filter: boolean | null;
  full_cpf: boolean | null;
  /** Paused in the configuration file or by an operator: its messages accumulate. */
  paused: boolean;
  paused_in_config: boolean;
  paused_by_operator: boolean;
  counts: { pending: number; retrying: number; delivered: number; dead: number };
  /** `created_at` of the first pending delivery (the head of the queue); null when none. */
  oldest_pending_at: string | null;
  /** As the sender last stored it; closed when it never stored one. */
  circuit: CircuitState;
}

/** A page of the change feed: the stored bodies in id order, and the id to go on after. */
export interface FeedPage {
  messages: { id: number; body: string }[];
  /**
   * The last message returned; when the page is not full, the newest message the read saw, of any
   * type, so that a follower asking only for some types does not scan the others again.
   */
  lastId: number;
}

/** Whether a replay filter names nothing: refused by the commands and routes (it would mean every delivery). */
export function isEmptyFilter(filter: ForwardFilter): boolean {
  return [filter.destination, filter.status, filter.nuProposta, filter.since, filter.until].every(
    (value) => value === undefined || value === '',
  );
}

const INSTANT = /^(\d{4})-(\d{2})-(\d{2})(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/**
 * An ISO 8601 date (`2026-11-21`, midnight UTC) or date-time with its zone
 * (`2026-11-21T10:00:00-03:00`, `…Z`) as the stored timestamps write it (`toISOString`), or null
 * when it is neither. A date-time without a zone is refused: it would mean the server's zone.
 */
export function parseInstant(text: string): string | null {
  const match = INSTANT.exec(text);
  if (!match) return null;
  const [y, m, d] = [Number(match[1]), Number(match[2]), Number(match[3])];
  const day = new Date(Date.UTC(y, m - 1, d));
  // Date.parse rolls 2026-02-30 over to March; a date that does not exist is a typo.
  if (day.getUTCFullYear() !== y || day.getUTCMonth() !== m - 1 || day.getUTCDate() !== d) return null;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

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

/** Runs a `…Steps` generator to its end in one go (the commands: nothing else waits on their loop). */
export function drain<T>(steps: Generator<T, T>): T {
  let step = steps.next();
  while (!step.done) step = steps.next();
  return step.value;
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
      const limit = Math.max(1, Math.min(filter.limit ?? 50, 1000));
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
      return countsOf(rows);
    },
  };
}

function countsOf(rows: readonly { status: string; n: number }[]): ReplayCounts {
  const counts: ReplayCounts = { replayed: 0, by_status: { pending: 0, delivered: 0, dead: 0 } };
  for (const { status, n } of rows) {
    if (status === 'pending' || status === 'delivered' || status === 'dead') counts.by_status[status] += n;
    counts.replayed += n;
  }
  return counts;
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
    return countsOf(rows.map((r) => ({ status: r.status, n: 1 })));
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
      const total = countsOf([]);
      for (let i = 0; i < ids.length; i += CHUNK_ROWS) add(total, byIds(ids.slice(i, i + CHUNK_ROWS), now));
      return total;
    },
    /** Replays every delivery the filter matches, one committed chunk per step; returns the totals. */
    *replayWhereSteps(filter: ForwardFilter, now: string): Generator<ReplayCounts, ReplayCounts> {
      const total = countsOf([]);
      let afterId = 0;
      for (;;) {
        const rows = chunkOf(filter, afterId);
        if (rows.length === 0) return total;
        add(total, requeueAll(rows, now));
        afterId = (rows[rows.length - 1] as { id: number }).id;
        if (rows.length < CHUNK_ROWS) return total;
        yield total;
      }
    },
  };
}

function add(total: ReplayCounts, chunk: ReplayCounts): void {
  total.replayed += chunk.replayed;
  total.by_status.pending += chunk.by_status.pending;
  total.by_status.delivered += chunk.by_status.delivered;
  total.by_status.dead += chunk.by_status.dead;
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

type CountRow = { destination: string; status: string; n: number };
type TableRow = { name: string; paused: number; circuit: string | null };

function destinations(db: Db) {
  const upsertPaused = db.prepare<[{ name: string; paused: number; now: string }]>(
    `INSERT INTO forward_destinations (name, paused, updated_at) VALUES (@name, @paused, @now)
     ON CONFLICT (name) DO UPDATE SET paused = @paused, updated_at = @now`,
  );
  // Index-only (forward_deliveries_status), plus the pending rows for `retrying`.
  const counts = db.prepare<[], CountRow>(
    `SELECT destination, status, count(*) AS n FROM forward_deliveries GROUP BY destination, status
     UNION ALL
     SELECT destination, 'retrying', count(*) FROM forward_deliveries WHERE status = 'pending' AND attempts > 0
     GROUP BY destination`,
  );
  const oldestPending = db.prepare<[string], { created_at: string }>(
    `SELECT created_at FROM forward_deliveries WHERE destination = ? AND status = 'pending' ORDER BY id LIMIT 1`,
  );
  const table = db.prepare<[], TableRow>('SELECT name, paused, circuit FROM forward_destinations');
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
      const rows = table.all();
      const countRows = counts.all();
      const names = [
        ...new Set([
          ...configured.map((d) => d.name),
          ...[...rows.map((r) => r.name), ...countRows.map((r) => r.destination)].sort(),
        ]),
      ];
      return names.map((name) => {
        const destination = configured.find((d) => d.name === name);
        const row = rows.find((r) => r.name === name);
        const mine = countRows.filter((r) => r.destination === name);
        return summary(name, destination, row, mine, oldestPending.get(name)?.created_at ?? null);
      });
    },
  };
}

function summary(
  name: string,
  destination: Destination | undefined,
  row: TableRow | undefined,
  countRows: readonly CountRow[],
  oldestPendingAt: string | null,
): DestinationSummary {
  const count = (status: string) => countRows.find((r) => r.status === status)?.n ?? 0;
  const pausedInConfig = destination?.paused ?? false;
  const pausedByOperator = row?.paused === 1;
  return {
    name,
    configured: destination !== undefined,
    url: destination === undefined ? null : withoutQuery(destination.url),
    types: destination?.types ?? null,
    eventos: destination?.eventos ?? null,
    has_filter: destination === undefined ? null : destination.filter !== null,
    full_cpf: destination?.fullCpf ?? null,
    paused: pausedInConfig || pausedByOperator,
    paused_in_config: pausedInConfig,
    paused_by_operator: pausedByOperator,
    counts: {
      pending: count('pending'),
      retrying: count('retrying'),
      delivered: count('delivered'),
      dead: count('dead'),
    },
    oldest_pending_at: oldestPendingAt,
    circuit: parseCircuit(row?.circuit ?? null),
  };
}

function withoutQuery(url: string): string {
  const at = url.indexOf('?');
  return at === -1 ? url : `${url.slice(0, at)}?…`;
}

function parseCircuit(text: string | null): CircuitState {
  const parsed = text === null ? undefined : parseJsonOrUndefined(text);
  const state = (parsed as { state?: unknown } | undefined)?.state;
  return state === 'open' || state === 'half_open' || state === 'closed'
    ? (parsed as CircuitState)
    : { state: 'closed', failures: 0 };
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

/** Whether `value` names a message type (`event.received`, `proposal.changed`, `averbacao.result`). */
export function isMessageType(value: string): value is MessageType {
  return (MESSAGE_TYPES as readonly string[]).includes(value);
}
