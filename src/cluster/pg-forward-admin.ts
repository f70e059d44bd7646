import type { Pool } from 'pg';
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
  FEED_DEFAULT_TYPES,
  type ForwardDetail,
  type ForwardFilter,
  type ForwardListFilter,
  type ForwardRow,
  listLimit,
  type ReplayCounts,
  replayCounts,
} from '../domain/forwarding/admin';
import type { Destination, MessageType } from '../domain/forwarding/destinations';
import { destinationWants, type FeedPage, type MessageBody } from '../domain/forwarding/messages';
import { parseJsonOrUndefined } from '../domain/json';
import { readFeedPage } from './pg-feed';
import { OUTBOX_CHANNEL } from './pg-outbox';
import { canonicalNu, checkOut, iso, type Sql, sqlOf } from './sql';

/**
 * The operators' statements on the forwarding tables in cluster mode (contract §8,
 * migrations-pg/0003_forwarding.sql): those of SQLite's store/forward-admin.ts, with the same rules
 * (domain/forwarding/admin.ts) and the same shapes — ids as numbers, times as ISO-8601 text,
 * `nu_proposta` an integer when it is one — so the `forwards` and `feed` commands show either store
 * through one formatter.
 *
 * Replays and backfills commit at most {@link CHUNK_ROWS} rows per transaction, and each such
 * transaction (and a resume) notifies {@link OUTBOX_CHANNEL}: the replica sending the destination
 * LISTENs there and looks at once, rather than at its next poll.
 */

/** Where the statements run: reads on `sql`, writes in `transaction`s. */
export interface PgAdminDb {
  sql: Sql;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it rejects. */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
}

/**
 * One connection (a command's own): its transactions are BEGIN … COMMIT on it. Inside a read-only
 * transaction already open on it (a read command's snapshot) only the reads may be called.
 */
export function adminDbOfClient(client: {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}): PgAdminDb {
  const sql = sqlOf(client);
  return {
    sql,
    async transaction(fn) {
      await sql.query('BEGIN');
      try {
        const result = await fn(sql);
        await sql.query('COMMIT');
        return result;
      } catch (err) {
        await sql.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
    },
  };
}

/** A pool (the caller's, with an 'error' listener): each transaction on a client of its own. */
export function adminDbOfPool(pool: Pool): PgAdminDb {
  return {
    sql: sqlOf(pool),
    async transaction(fn) {
      const client = await checkOut(pool);
      let ok = false;
      try {
        const tx = sqlOf(client);
        await tx.query('BEGIN');
        const result = await fn(tx);
        await tx.query('COMMIT');
        ok = true;
        return result;
      } finally {
        if (!ok) await client.query('ROLLBACK').catch(() => undefined);
        // A client that failed mid-transaction may be broken (the server went away): not reused.
        client.release(!ok);
      }
    },
  };
}

/** The operators' statements; see the module's comment. */
export function pgForwardAdmin(db: PgAdminDb) {
  return { ...listing(db.sql), ...replays(db), ...backfills(db), ...destinations(db), ...feed(db.sql) };
}

export type PgForwardAdmin = ReturnType<typeof pgForwardAdmin>;

/** Wakes the sending replica (and the feed's long-polls): sent when the transaction commits. */
async function notifySender(tx: Sql): Promise<void> {
  await tx.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, '']);
}

// ---- reading -------------------------------------------------------------------------------------

const ROW_COLUMNS = `d.id, d.message_id, d.destination, d.status, d.attempts, d.next_attempt_at, d.last_status,
  d.last_error, d.created_at, d.updated_at, d.delivered_at, m.webhook_id, m.type, m.event_id, m.evento,
  m.nu_proposta, m.request_id, m.order_key, m.created_at AS message_created_at`;
const FROM_JOINED = 'FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id';

/** A row as node-postgres returns it: bigint as text, timestamptz as Date. */
interface PgForwardRow {
  id: string;
  message_id: string;
  destination: string;
  status: ForwardRow['status'];
  attempts: number;
  next_attempt_at: Date | null;
  last_status: number | null;
  last_error: string | null;
  created_at: Date;
  updated_at: Date;
  delivered_at: Date | null;
  webhook_id: string;
  type: MessageType;
  event_id: string;
  evento: string | null;
  nu_proposta: string | null;
  request_id: string | null;
  order_key: string;
  message_created_at: Date;
}

/** SQLite's shape, key for key in its order (the `--json` output of both modes is the same). */
function forwardRow(r: PgForwardRow): ForwardRow {
  return {
    id: Number(r.id),
    message_id: Number(r.message_id),
    destination: r.destination,
    status: r.status,
    attempts: r.attempts,
    next_attempt_at: iso(r.next_attempt_at),
    last_status: r.last_status,
    last_error: r.last_error,
    created_at: iso(r.created_at) as string,
    updated_at: iso(r.updated_at) as string,
    delivered_at: iso(r.delivered_at),
    webhook_id: r.webhook_id,
    type: r.type,
    event_id: Number(r.event_id),
    evento: r.evento,
    nu_proposta: r.nu_proposta === null ? null : canonicalNu(r.nu_proposta),
    request_id: r.request_id,
    order_key: r.order_key,
    message_created_at: iso(r.message_created_at) as string,
  };
}

interface PgAttemptRow extends Omit<AttemptRow, 'id' | 'started_at'> {
  id: string;
  started_at: Date;
}

function attemptRow(r: PgAttemptRow): AttemptRow {
  return {
    id: Number(r.id),
    attempt: r.attempt,
    started_at: iso(r.started_at) as string,
    duration_ms: r.duration_ms,
    http_status: r.http_status,
    error: r.error,
    outcome: r.outcome,
    answer: r.answer,
  };
}

/**
 * `WHERE …` over `d` (deliveries) and `m` (messages) for the conditions given (undefined or '' = no
 * condition), its placeholders numbered from $1.
 */
function filterWhere(filter: ForwardListFilter, afterId?: number): { sql: string; params: unknown[] } {
  const nu = filter.nuProposta === undefined ? undefined : String(filter.nuProposta);
  return where([
    ['d.destination = ?', filter.destination],
    filter.status === 'retrying'
      ? ['d.status = ? AND d.attempts > 0', 'pending']
      : ['d.status = ?', filter.status],
    // text in PostgreSQL: parseNuProposta's 4242 is '4242', as the relay writes it.
    ['m.nu_proposta = ?', nu],
    ['m.type = ?', filter.type],
    ['m.created_at >= ?::timestamptz', filter.since],
    ['m.created_at < ?::timestamptz', filter.until],
    ['d.id < ?', filter.beforeId],
    ['d.id > ?', afterId],
  ]);
}

/** `WHERE a = $1 AND b >= $2` from `a = ?`-style conditions whose value is given. */
function where(conditions: readonly [string, string | number | undefined][]): {
  sql: string;
  params: unknown[];
} {
  const parts: string[] = [];
  const params: unknown[] = [];
  for (const [condition, value] of conditions) {
    if (value === undefined || value === '') continue;
    params.push(value);
    parts.push(condition.replace('?', `$${params.length}`));
  }
  return { sql: parts.length ? `WHERE ${parts.join(' AND ')}` : '', params };
}

function listing(sql: Sql) {
  return {
    /** Deliveries with their message's columns, newest first (keyset on the delivery id). */
    async list(filter: ForwardListFilter = {}): Promise<ForwardRow[]> {
      const w = filterWhere(filter);
      const rows = await sql.query<PgForwardRow>(
        `SELECT ${ROW_COLUMNS} ${FROM_JOINED} ${w.sql} ORDER BY d.id DESC LIMIT $${w.params.length + 1}`,
        [...w.params, listLimit(filter)],
      );
      return rows.map(forwardRow);
    },
    /** One delivery, its message's body and its attempts in order; undefined when there is none. */
    async show(deliveryId: number): Promise<ForwardDetail | undefined> {
      const [row] = await sql.query<PgForwardRow & { body: string }>(
        `SELECT ${ROW_COLUMNS}, m.body ${FROM_JOINED} WHERE d.id = $1`,
        [deliveryId],
      );
      if (row === undefined) return undefined;
      const attempts = await sql.query<PgAttemptRow>(
        `SELECT id, attempt, started_at, duration_ms, http_status, error, outcome, answer
         FROM forward_attempts WHERE delivery_id = $1 ORDER BY id`,
        [deliveryId],
      );
      return { delivery: forwardRow(row), body: row.body, attempts: attempts.map(attemptRow) };
    },
    /** How many deliveries a replay with this filter would touch, by their status now. */
    async countWhere(filter: ForwardFilter): Promise<ReplayCounts> {
      const w = filterWhere(filter);
      const rows = await sql.query<{ status: string; n: string }>(
        `SELECT d.status, count(*) AS n ${FROM_JOINED} ${w.sql} GROUP BY d.status`,
        w.params,
      );
      return replayCounts(rows.map((r) => ({ status: r.status, n: Number(r.n) })));
    },
    /** The ids among these that name no delivery. */
    async missing(ids: readonly number[]): Promise<number[]> {
      const found = await sql.query<{ id: string }>(
        'SELECT id FROM forward_deliveries WHERE id = ANY($1::bigint[])',
        [[...ids]],
      );
      const known = new Set(found.map((r) => Number(r.id)));
      return ids.filter((id) => !known.has(id));
    },
  };
}

// ---- replays -------------------------------------------------------------------------------------

// Delivered or dead: a fresh start. Pending: due now, its attempt count kept (domain/forwarding/admin.ts).
const REQUEUE = `UPDATE forward_deliveries SET
    attempts = CASE WHEN status = 'pending' THEN attempts ELSE 0 END,
    delivered_at = CASE WHEN status = 'pending' THEN delivered_at ELSE NULL END,
    status = 'pending', next_attempt_at = $2::timestamptz, updated_at = $2::timestamptz
  WHERE id = ANY($1::bigint[])`;

/** Requeues rows already locked by the caller's transaction; counts them by the status they had. */
async function requeue(tx: Sql, rows: readonly { id: string; status: string }[], now: string) {
  if (rows.length === 0) return replayCounts([]);
  await tx.query(REQUEUE, [rows.map((r) => r.id), now]);
  await notifySender(tx);
  return replayCounts(rows.map((r) => ({ status: r.status, n: 1 })));
}

function replays(db: PgAdminDb) {
  return {
    /** Replays these deliveries (unknown ids are skipped; see `missing`), due at `now`. */
    async replay(ids: readonly number[], now: string): Promise<ReplayCounts> {
      const total = replayCounts([]);
      for (let i = 0; i < ids.length; i += CHUNK_ROWS) {
        const chunk = ids.slice(i, i + CHUNK_ROWS);
        const counts = await db.transaction(async (tx) => {
          // Locked, so the counts say what each one was when it was requeued (a sender may be
          // recording an attempt on it right now).
          const rows = await tx.query<{ id: string; status: string }>(
            'SELECT id, status FROM forward_deliveries WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE',
            [chunk],
          );
          return requeue(tx, rows, now);
        });
        addReplayCounts(total, counts);
      }
      return total;
    },
    /**
     * Replays every delivery the filter matches, one committed transaction of at most
     * {@link CHUNK_ROWS} at a time, in id order; returns the totals. A row that a sender changed
     * meanwhile so that it no longer matches is skipped (FOR UPDATE re-checks the filter, and may
     * so return a short chunk: only an empty one ends the loop).
     */
    async replayWhere(filter: ForwardFilter, now: string): Promise<ReplayCounts> {
      const total = replayCounts([]);
      let afterId = 0;
      for (;;) {
        const w = filterWhere(filter, afterId);
        const step = await db.transaction(async (tx) => {
          const locked = await tx.query<{ id: string; status: string }>(
            `SELECT d.id, d.status ${FROM_JOINED} ${w.sql} ORDER BY d.id LIMIT ${CHUNK_ROWS} FOR UPDATE OF d`,
            w.params,
          );
          return { counts: await requeue(tx, locked, now), last: locked[locked.length - 1] };
        });
        if (step.last === undefined) return total;
        addReplayCounts(total, step.counts);
        afterId = Number(step.last.id);
      }
    },
  };
}

// ---- backfill ------------------------------------------------------------------------------------

interface StoredMessage {
  id: string;
  type: MessageType;
  evento: string | null;
  order_key: string;
  body: string;
}

const INSERT_DELIVERIES = `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts,
    next_attempt_at, created_at, updated_at)
  SELECT m, $3, k, 'pending', 0, $4::timestamptz, $4::timestamptz, $4::timestamptz
  FROM unnest($1::bigint[], $2::text[]) AS x(m, k)
  ON CONFLICT (message_id, destination) DO NOTHING
  RETURNING id`;

function backfills(db: PgAdminDb) {
  /** One chunk of messages after `afterId`, the wanted ones given a delivery, in one transaction. */
  const chunk = (destination: Destination, range: BackfillRange, afterId: number, now: string) =>
    db.transaction(async (tx) => {
      const w = where([
        ['id > ?', afterId],
        ['nu_proposta = ?', range.nuProposta === undefined ? undefined : String(range.nuProposta)],
        ['created_at >= ?::timestamptz', range.since],
        ['created_at < ?::timestamptz', range.until],
      ]);
      const rows = await tx.query<StoredMessage>(
        `SELECT id, type, evento, order_key, body FROM forward_messages ${w.sql} ORDER BY id LIMIT ${CHUNK_ROWS}`,
        w.params,
      );
      const wanted = rows.filter((row) => {
        const body = parseJsonOrUndefined(row.body) as MessageBody | undefined;
        return (
          body !== undefined && destinationWants(destination, { type: row.type, evento: row.evento, body })
        );
      });
      const created =
        wanted.length === 0
          ? []
          : await tx.query(INSERT_DELIVERIES, [
              wanted.map((r) => r.id),
              wanted.map((r) => r.order_key),
              destination.name,
              now,
            ]);
      if (created.length > 0) await notifySender(tx);
      const last = rows[rows.length - 1];
      return {
        counts: { matched: wanted.length, created: created.length },
        lastId: last && Number(last.id),
        full: rows.length === CHUNK_ROWS,
      };
    });
  return {
    /**
     * Gives `destination` a pending delivery (due at `now`) for every stored message in the range
     * that it wants and has none for yet, in message order, one committed chunk at a time. Twice
     * creates nothing the second time; the new rows queue behind the destination's pending ones
     * (as in SQLite mode, store/forward-admin.ts).
     */
    async backfill(destination: Destination, range: BackfillRange, now: string): Promise<BackfillCounts> {
      const total: BackfillCounts = { matched: 0, created: 0 };
      let afterId = 0;
      for (;;) {
        const step = await chunk(destination, range, afterId, now);
        total.matched += step.counts.matched;
        total.created += step.counts.created;
        if (step.lastId === undefined || !step.full) return total;
        afterId = step.lastId;
      }
    },
  };
}

// ---- destinations --------------------------------------------------------------------------------

// Index-only (forward_deliveries_status), plus the pending rows for `retrying`.
const COUNTS = `SELECT destination, status, count(*) AS n FROM forward_deliveries GROUP BY destination, status
  UNION ALL
  SELECT destination, 'retrying', count(*) FROM forward_deliveries WHERE status = 'pending' AND attempts > 0
  GROUP BY destination`;

// The head of each destination's queue: its lowest pending id (forward_deliveries_pending).
const OLDEST_PENDING = `SELECT n.name, (SELECT created_at FROM forward_deliveries
    WHERE destination = n.name AND status = 'pending' ORDER BY id LIMIT 1) AS at
  FROM unnest($1::text[]) AS n(name)`;

function destinations(db: PgAdminDb) {
  const states = async (): Promise<DestinationStateRow[]> => {
    const rows = await db.sql.query<{ name: string; paused: boolean; circuit: string | null }>(
      'SELECT name, paused, circuit FROM forward_destinations ORDER BY name COLLATE "C"',
    );
    return rows.map((r) => ({ name: r.name, paused: r.paused ? 1 : 0, circuit: r.circuit }));
  };
  return {
    /**
     * Pauses or resumes a destination for the sender. A resume notifies the sending replica; either
     * way it re-reads the flag within a second.
     */
    async setPaused(name: string, paused: boolean, now: string): Promise<void> {
      await db.transaction(async (tx) => {
        await tx.query(
          `INSERT INTO forward_destinations (name, paused, updated_at) VALUES ($1, $2, $3::timestamptz)
           ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`,
          [name, paused, now],
        );
        if (!paused) await notifySender(tx);
      });
    },
    /** Whether an operator paused the destination (its configuration may pause it too). */
    async pausedByOperator(name: string): Promise<boolean> {
      return (await states()).some((r) => r.name === name && r.paused === 1);
    },
    /**
     * Every configured destination, in configuration order, then every other name met in the
     * tables (`configured: false`, by name).
     */
    async destinationSummaries(configured: readonly Destination[]): Promise<DestinationSummary[]> {
      const stateRows = await states();
      const counted = await db.sql.query<{ destination: string; status: string; n: string }>(COUNTS);
      const countRows: DestinationCountRow[] = counted.map((r) => ({ ...r, n: Number(r.n) }));
      const names = [
        ...new Set([
          ...configured.map((d) => d.name),
          ...stateRows.map((r) => r.name),
          ...countRows.map((r) => r.destination),
        ]),
      ];
      const oldest = await db.sql.query<{ name: string; at: Date | null }>(OLDEST_PENDING, [names]);
      const at = new Map(oldest.map((r) => [r.name, iso(r.at)]));
      return destinationSummaries(configured, stateRows, countRows, (name) => at.get(name) ?? null);
    },
  };
}

// ---- feed ----------------------------------------------------------------------------------------

function feed(sql: Sql) {
  return {
    /** Up to `limit` messages of `types` with an id above `afterId`, in commit order (pg-feed.ts). */
    feed(
      afterId: number,
      limit: number,
      types: readonly MessageType[] = FEED_DEFAULT_TYPES,
    ): Promise<FeedPage> {
      return readFeedPage(sql, afterId, limit, types);
    },
  };
}
