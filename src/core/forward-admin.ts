import { setImmediate as nextTurn } from 'node:timers/promises';
import {
  addReplayCounts,
  type AttemptRow,
  type BackfillCounts,
  type BackfillRange,
  CHUNK_ROWS,
  type DestinationCountRow,
  type DestinationStateRow,
  type DestinationSummary,
  destinationSummaries,
  type ForwardDetail,
  type ForwardFilter,
  type ForwardListFilter,
  type ForwardRow,
  listLimit,
  type ReplayCounts,
  replayCounts,
} from '../domain/forwarding/admin';
import type { Destination, MessageType } from '../domain/forwarding/destinations';
import { destinationWants, type MessageBody } from '../domain/forwarding/messages';
import { parseJsonOrUndefined } from '../domain/json';
import { canonicalNu } from '../domain/sql/dialect';
import { Conditions, inList } from '../domain/sql/read-statements';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';

/**
 * The operators' statements on the forwarding tables (contract §8), written once for both stores
 * (issue 24): list and show deliveries with their attempts, replay them by id or by filter,
 * backfill a destination with stored history, pause and resume destinations and summarise them.
 * The `forwards` commands, the `/admin/forwards*` and `/admin/destinations*` routes and the
 * console's forwarding actions all come here, on the SQLite file or on PostgreSQL ({@link StoreSql});
 * the shapes and rules are domain/forwarding/admin.ts's.
 *
 * Writes over many rows commit at most {@link CHUNK_ROWS} rows per transaction, and the event loop
 * turns between chunks: a replay of a hundred thousand dead letters never holds SQLite's write lock
 * (or PostgreSQL's row locks) for more than one short chunk, and ingest keeps answering meanwhile.
 */
export type ForwardAdmin = ReturnType<typeof forwardAdmin>;

/**
 * What a write that gave the sender work does besides its statements; the one thing the stores do
 * differently here. PostgreSQL notifies the outbox's channel inside the transaction (sent when it
 * commits: the sending replica, and the feed's long-polls, look at once). SQLite wakes the sender
 * thread after the commit: it reads on a connection of its own, so before the commit it would find
 * nothing.
 */
export interface SenderWake {
  inWrite?(q: StoreQuery): Promise<unknown>;
  afterWrite?(): void;
}

const ROW_COLUMNS = `d.id, d.message_id, d.destination, d.status, d.attempts, d.next_attempt_at, d.last_status,
  d.last_error, d.created_at, d.updated_at, d.delivered_at, m.webhook_id, m.type, m.event_id, m.evento,
  m.nu_proposta, m.request_id, m.order_key, m.created_at AS message_created_at`;
const FROM_JOINED = 'FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id';

const ATTEMPTS = `SELECT id, attempt, started_at, duration_ms, http_status, error, outcome, answer
  FROM forward_attempts WHERE delivery_id = $1 ORDER BY id`;

// Index-only (forward_deliveries_status), plus the pending rows for `retrying`.
const COUNTS = `SELECT destination, status, count(*) AS n FROM forward_deliveries GROUP BY destination, status
  UNION ALL
  SELECT destination, 'retrying', count(*) FROM forward_deliveries WHERE status = 'pending' AND attempts > 0
  GROUP BY destination`;

// The head of a destination's queue: its lowest pending id (forward_deliveries_pending).
const OLDEST_PENDING = `SELECT created_at FROM forward_deliveries WHERE destination = $1 AND status = 'pending'
  ORDER BY id LIMIT 1`;

// The replay rule (domain/forwarding/admin.ts): delivered or dead starts over, pending is due now
// with its attempt count kept. $1 is now, the ids follow.
const requeue = (count: number) => `UPDATE forward_deliveries SET
    attempts = CASE WHEN status = 'pending' THEN attempts ELSE 0 END,
    delivered_at = CASE WHEN status = 'pending' THEN delivered_at ELSE NULL END,
    status = 'pending', next_attempt_at = $1, updated_at = $1
  WHERE id IN ${inList(count, 2)}`;

// $1 the destination, $2 now, then each message's id and order key.
const insertDeliveries = (
  count: number,
) => `INSERT INTO forward_deliveries (message_id, destination, order_key,
    status, attempts, next_attempt_at, created_at, updated_at)
  VALUES ${Array.from({ length: count }, (_, i) => `($${3 + 2 * i}, $1, $${4 + 2 * i}, 'pending', 0, $2, $2, $2)`).join(', ')}
  ON CONFLICT (message_id, destination) DO NOTHING`;

/**
 * PostgreSQL locks the rows a replay is about to requeue: a sender may be recording an attempt on
 * one, and the counts must say what each was when it was requeued (a row changed meanwhile so that
 * it no longer matches is re-checked and skipped). SQLite has no FOR UPDATE and needs none: its
 * write transaction holds the file's one write lock.
 */
const locked = (q: StoreQuery, clause: 'UPDATE' | 'UPDATE OF d' = 'UPDATE'): string =>
  q.dialect.rowLock(clause);

/**
 * `nu_proposta` as the SQLite log holds it (an INTEGER column: an integer as a number), from
 * PostgreSQL's text: the relay writes an integer as its decimal.
 */
const forwardRow = (row: ForwardRow): ForwardRow => {
  const nu = row.nu_proposta;
  return { ...row, nu_proposta: typeof nu === 'string' ? canonicalNu(nu) : nu };
};

/**
 * A filter's `nu_proposta` as text: PostgreSQL's column is text, and SQLite's INTEGER column reads
 * `'4242'` as 4242 (its affinity), so one value serves both.
 */
const nuText = (nu: number | string | undefined): string | undefined =>
  nu === undefined ? undefined : String(nu);

/** `WHERE …` over `d` (deliveries) and `m` (messages) for the conditions given. */
function filterWhere(filter: ForwardListFilter, afterId?: number) {
  const retrying = filter.status === 'retrying';
  return new Conditions()
    .given('d.destination = ?', filter.destination)
    .given(
      retrying ? 'd.status = ? AND d.attempts > 0' : 'd.status = ?',
      retrying ? 'pending' : filter.status,
    )
    .given('m.nu_proposta = ?', nuText(filter.nuProposta))
    .given('m.type = ?', filter.type)
    .given('m.created_at >= ?', filter.since)
    .given('m.created_at < ?', filter.until)
    .given('d.id < ?', filter.beforeId)
    .given('d.id > ?', afterId);
}

function chunksOf<T>(items: readonly T[]): T[][] {
  const chunks: T[][] = [];
  for (let i = 0; i < items.length; i += CHUNK_ROWS) chunks.push(items.slice(i, i + CHUNK_ROWS));
  return chunks;
}

type Picked = { id: number; status: string };

/** The operators' statements on `log`; `wake` tells the sender about new work (see {@link SenderWake}). */
export function forwardAdmin(log: StoreSql, wake: SenderWake = {}) {
  return { ...reads(log), ...writes(log, wake) };
}

function reads(log: StoreSql) {
  return {
    /** Deliveries with their message's columns, newest first (keyset on the delivery id). */
    list: (filter: ForwardListFilter): Promise<ForwardRow[]> => {
      const w = filterWhere(filter);
      const sql = `SELECT ${ROW_COLUMNS} ${FROM_JOINED} ${w.where} ORDER BY d.id DESC LIMIT $${w.params.length + 1}`;
      return log.read(async (q) =>
        (await q.rows<ForwardRow>(sql, [...w.params, listLimit(filter)])).map(forwardRow),
      );
    },
    /** One delivery, its message's body and its attempts in order; undefined when there is none. */
    show: (id: number): Promise<ForwardDetail | undefined> =>
      log.read(async (q) => {
        const [row] = await q.rows<ForwardRow & { body: string }>(
          `SELECT ${ROW_COLUMNS}, m.body ${FROM_JOINED} WHERE d.id = $1`,
          [id],
        );
        if (row === undefined) return undefined;
        const { body, ...delivery } = row;
        return { delivery: forwardRow(delivery), body, attempts: await q.rows<AttemptRow>(ATTEMPTS, [id]) };
      }),
    /** The ids among these that name no delivery. */
    missing: (ids: readonly number[]): Promise<number[]> =>
      log.read(async (q) => {
        const known = new Set<number>();
        for (const chunk of chunksOf(ids)) {
          const found = await q.rows<{ id: number }>(
            `SELECT id FROM forward_deliveries WHERE id IN ${inList(chunk.length, 1)}`,
            chunk,
          );
          for (const { id } of found) known.add(id);
        }
        return ids.filter((id) => !known.has(id));
      }),
    /** How many deliveries a replay with this filter would touch, by their status now. */
    countWhere: (filter: ForwardFilter): Promise<ReplayCounts> => {
      const w = filterWhere(filter);
      const sql = `SELECT d.status, count(*) AS n ${FROM_JOINED} ${w.where} GROUP BY d.status`;
      return log.read(async (q) => replayCounts(await q.rows<{ status: string; n: number }>(sql, w.params)));
    },
    /**
     * Every configured destination, in configuration order, then every other name met in the
     * tables (`configured: false`, by name).
     */
    destinationSummaries: (configured: readonly Destination[]): Promise<DestinationSummary[]> =>
      log.read(async (q) => {
        const states = await q.rows<DestinationStateRow>(
          'SELECT name, paused, circuit FROM forward_destinations',
        );
        const counts = await q.rows<DestinationCountRow>(COUNTS);
        const oldest = new Map<string, string>();
        for (const { destination } of counts.filter((r) => r.status === 'pending')) {
          const [head] = await q.rows<{ created_at: string }>(OLDEST_PENDING, [destination]);
          if (head !== undefined) oldest.set(destination, head.created_at);
        }
        return destinationSummaries(configured, states, counts, (name) => oldest.get(name) ?? null);
      }),
  };
}

function writes(log: StoreSql, wake: SenderWake) {
  /** `fn` in one transaction; when it says it gave the sender work, the sender is woken. */
  const written = async <T>(fn: (q: StoreQuery) => Promise<{ value: T; work: boolean }>): Promise<T> => {
    const { value, work } = await log.write(async (q) => {
      const result = await fn(q);
      if (result.work) await wake.inWrite?.(q);
      return result;
    });
    if (work) wake.afterWrite?.();
    return value;
  };
  /** One transaction: the rows `pick` reads, requeued at `now`. */
  const requeued = (pick: (q: StoreQuery) => Promise<Picked[]>, now: string) =>
    written(async (q) => {
      const rows = await pick(q);
      if (rows.length > 0) await q.run(requeue(rows.length), [now, ...rows.map((r) => r.id)]);
      return { value: rows, work: rows.length > 0 };
    });
  const counted = (rows: readonly Picked[]) => replayCounts(rows.map((r) => ({ status: r.status, n: 1 })));
  return {
    /** Replays these deliveries (unknown ids are skipped; see `missing`), due at `now`. */
    async replay(ids: readonly number[], now: string): Promise<ReplayCounts> {
      const total = replayCounts([]);
      for (const chunk of chunksOf(ids)) {
        const rows = await requeued(
          (q) =>
            q.rows<Picked>(
              `SELECT id, status FROM forward_deliveries WHERE id IN ${inList(chunk.length, 1)} ORDER BY id${locked(q)}`,
              chunk,
            ),
          now,
        );
        addReplayCounts(total, counted(rows));
      }
      return total;
    },
    /** Replays every delivery the filter matches, in id order; the totals. */
    async replayWhere(filter: ForwardFilter, now: string): Promise<ReplayCounts> {
      const total = replayCounts([]);
      // Only an empty chunk ends it: PostgreSQL's lock re-checks the filter, so a chunk may be short.
      for (let afterId = 0; ; await nextTurn()) {
        const w = filterWhere(filter, afterId);
        const sql = `SELECT d.id, d.status ${FROM_JOINED} ${w.where} ORDER BY d.id LIMIT ${CHUNK_ROWS}`;
        const rows = await requeued(
          (q) => q.rows<Picked>(`${sql}${locked(q, 'UPDATE OF d')}`, w.params),
          now,
        );
        const last = rows[rows.length - 1];
        if (last === undefined) return total;
        addReplayCounts(total, counted(rows));
        afterId = last.id;
      }
    },
    /**
     * Gives `destination` a pending delivery (due at `now`) for every stored message in the range
     * that it wants and has none for yet, in message order. Twice creates nothing the second time.
     * The new rows queue behind the destination's pending deliveries: per-proposal order holds among
     * the backfilled messages, and relative to messages already sent, not to those of the same
     * proposal still waiting (they were queued first).
     */
    async backfill(destination: Destination, range: BackfillRange, now: string): Promise<BackfillCounts> {
      const total: BackfillCounts = { matched: 0, created: 0 };
      for (let afterId = 0; ; await nextTurn()) {
        const chunk = await written((q) => backfillChunk(q, destination, range, afterId, now));
        total.matched += chunk.matched;
        total.created += chunk.created;
        if (chunk.lastId === undefined || !chunk.full) return total;
        afterId = chunk.lastId;
      }
    },
    /** Pauses or resumes a destination for the sender (which re-reads the flag within a second). */
    setPaused: (name: string, paused: boolean, now: string): Promise<void> =>
      written(async (q) => {
        await q.run(
          `INSERT INTO forward_destinations (name, paused, updated_at) VALUES ($1, $2, $3)
           ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`,
          [name, paused, now],
        );
        return { value: undefined, work: !paused };
      }),
  };
}

interface StoredMessage {
  id: number;
  type: MessageType;
  evento: string | null;
  order_key: string;
  body: string;
}

/** One chunk of messages after `afterId`, those `destination` wants given a delivery. */
async function backfillChunk(
  q: StoreQuery,
  destination: Destination,
  range: BackfillRange,
  afterId: number,
  now: string,
) {
  const w = new Conditions()
    .given('id > ?', afterId)
    .given('nu_proposta = ?', nuText(range.nuProposta))
    .given('created_at >= ?', range.since)
    .given('created_at < ?', range.until);
  const rows = await q.rows<StoredMessage>(
    `SELECT id, type, evento, order_key, body FROM forward_messages ${w.where} ORDER BY id LIMIT ${CHUNK_ROWS}`,
    w.params,
  );
  const wanted = rows.filter((row) => {
    const body = parseJsonOrUndefined(row.body) as MessageBody | undefined;
    return body !== undefined && destinationWants(destination, { type: row.type, evento: row.evento, body });
  });
  const created =
    wanted.length === 0
      ? 0
      : await q.run(insertDeliveries(wanted.length), [
          destination.name,
          now,
          ...wanted.flatMap((r) => [r.id, r.order_key]),
        ]);
  const value = {
    matched: wanted.length,
    created,
    lastId: rows[rows.length - 1]?.id,
    full: rows.length === CHUNK_ROWS,
  };
  return { value, work: created > 0 };
}
