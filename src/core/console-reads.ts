import {
  averbacaoPage,
  type ConsoleAverbacaoFilter,
  type ConsoleDeliveryFilter,
  type ConsoleEventFilter,
  hasUnindexedCondition,
  type ListPage,
  pageOf,
  type RegistryEventRow,
  scanCapFor,
  STORY_AVERBACOES,
  STORY_CAP,
  type StoryEventRow,
  type StoryForwardRow,
  windowLow,
  windowPage,
} from '../domain/console';
import { decodeUtf8, type DeliveryRow } from '../domain/delivery';
import type { EventRow } from '../domain/event-status';
import type { AverbacaoRow, ProposalRow } from '../domain/log-rows';
import {
  AVERBACAO_COLUMNS,
  averbacoesQuery,
  Conditions,
  EVENT_COLUMNS,
  PROPOSAL,
} from '../domain/sql/read-statements';
import type { Dialect } from '../domain/sql/dialect';
import type { StoreQuery } from '../domain/sql/store-sql';

/**
 * The console's reads of the log (contract §9), written once for both stores: listings newest
 * first with keyset paging (`id < before`) that stay fast at millions of rows, and a proposal's
 * story, each list from an index on `nu_proposta` or `request_id` and capped at {@link STORY_CAP}.
 *
 * Events lists bound a page's cost: the conditions an index serves (`status`, `nu_proposta`, the
 * time range, the keyset) choose the rows walked; every other condition (`evento`, `kind`, the JSON
 * match on the body) is checked on at most one window of them per page (domain/console.ts
 * `scanCapFor`). When that window ends before the page is full, the page says where it stopped,
 * and the next page goes on from there.
 */

/** A row's `nu_proposta` as the SQLite log holds it ({@link Dialect.logNu}). */
export function logNu<T extends { nu_proposta: number | string | null }>(dialect: Dialect, row: T): T {
  const nu = dialect.logNu(row.nu_proposta);
  return nu === row.nu_proposta ? row : { ...row, nu_proposta: nu };
}

/** Ids above every real one: a bound that keeps a walk of the primary key a range. */
const NO_BOUND = Number.MAX_SAFE_INTEGER;

/**
 * The id range a page walks. Where ids follow arrival ({@link Dialect.idsFollowArrival}: SQLite,
 * which has no index on `events.received_at`, the ingest would pay for one at every event), a time
 * range becomes an id range found by a binary search on the primary key (the rule retention relies
 * on too), and the range is always bounded above so that the walk newest first is a range.
 * Elsewhere (PostgreSQL) an index on `received_at` serves the time range itself.
 */
async function idRange(
  q: StoreQuery,
  f: ConsoleEventFilter,
  atLeastId: number | undefined,
): Promise<{ from?: number | undefined; below: number }> {
  if (!q.dialect.idsFollowArrival) return { from: atLeastId, below: f.before ?? NO_BOUND };
  const fromTime = f.from === undefined ? undefined : await firstIdAtOrAfter(q, f.from);
  const toId = f.to === undefined ? undefined : await firstIdAtOrAfter(q, f.to);
  return {
    from: atLeastId === undefined ? fromTime : Math.max(atLeastId, fromTime ?? 0),
    below: Math.min(f.before ?? NO_BOUND, toId ?? NO_BOUND),
  };
}

/** The first event id with `received_at >= at` (SQLite: see {@link idRange}), or max+1. */
async function firstIdAtOrAfter(q: StoreQuery, at: string): Promise<number> {
  // Two statements: SQLite answers min() or max() alone with one seek, both together with a scan.
  const [lowest] = await q.rows<{ id: number | null }>('SELECT min(id) AS id FROM events');
  const [highest] = await q.rows<{ id: number | null }>('SELECT max(id) AS id FROM events');
  if (lowest?.id == null || highest?.id == null) return 1;
  let [low, high] = [lowest.id, highest.id + 1];
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    const [row] = await q.rows<{ id: number; received_at: string }>(
      'SELECT id, received_at FROM events WHERE id >= $1 ORDER BY id LIMIT 1',
      [mid],
    );
    // Ids from mid up to the row found do not exist: the row stands for them all.
    if (row === undefined || row.received_at >= at) high = mid;
    else low = row.id + 1;
  }
  return low;
}

/** WHERE over `events e` for the whole filter, ids from `atLeastId` (a window's low end) when given. */
async function eventConditions(
  q: StoreQuery,
  f: ConsoleEventFilter,
  atLeastId?: number,
): Promise<Conditions> {
  const ids = await idRange(q, f, atLeastId);
  const c = new Conditions()
    .given('e.status = ?', f.status)
    .given('e.nu_proposta = ?', f.nuProposta === undefined ? undefined : q.dialect.storedNu(f.nuProposta))
    .given('e.id >= ?', ids.from)
    .given('e.id < ?', ids.below)
    .given('e.received_at >= ?', f.from)
    .given('e.received_at < ?', f.to)
    .given('e.evento = ?', f.evento)
    .given('e.kind = ?', f.kind);
  // One leaf of the JSON match on the body each (the dialect's `jsonLeaf`).
  for (const leaf of f.json ?? []) {
    const { condition, values } = q.dialect.jsonLeaf(leaf);
    c.add(condition, values);
  }
  return c;
}

async function selectEvents(q: StoreQuery, f: ConsoleEventFilter, limit: number, atLeastId?: number) {
  const c = await eventConditions(q, f, atLeastId);
  const page = c.limited(`SELECT ${EVENT_COLUMNS} FROM events e`, 'e.id DESC', limit);
  return (await q.rows<EventRow>(page.text, page.params)).map((row) => logNu(q.dialect, row));
}

/** One page of events, newest first (see the module's comment for the bounds). */
export async function listEvents(q: StoreQuery, f: ConsoleEventFilter): Promise<ListPage<EventRow>> {
  const limit = f.limit ?? 50;
  if (!hasUnindexedCondition(f) || f.nuProposta !== undefined)
    return pageOf(await selectEvents(q, f, limit + 1), limit, null);
  // The window: the newest `cap` entries of the driving index (status, or the primary key) below
  // the cursor, read from the index alone; one entry past it says whether it was cut, and is then
  // where the next page starts.
  const cap = scanCapFor(f);
  const driving = await eventConditions(q, { status: f.status, from: f.from, to: f.to, before: f.before });
  const [edge] = await q.rows<{ n: number; low: number | null }>(
    `SELECT count(*) AS n, min(id) AS low FROM (SELECT e.id FROM events e ${driving.where} ORDER BY e.id DESC LIMIT ${cap + 1}) w`,
    driving.params,
  );
  const low = windowLow(edge, cap);
  return windowPage(await selectEvents(q, f, limit + 1, low), limit, low);
}

/** How many events the whole filter matches (no paging, no window): a bulk replay's count. */
export async function countEvents(q: StoreQuery, f: ConsoleEventFilter): Promise<number> {
  const c = await eventConditions(q, f);
  const [row] = await q.rows<{ n: number }>(`SELECT count(*) AS n FROM events e ${c.where}`, c.params);
  return row?.n ?? 0;
}

/** Up to `limit` matching ids below `before`, newest first (a bulk replay walks them in chunks). */
export async function eventIds(q: StoreQuery, f: ConsoleEventFilter, before: number, limit: number) {
  const c = await eventConditions(q, { ...f, before });
  const page = c.limited('SELECT e.id FROM events e', 'e.id DESC', limit);
  return (await q.rows<{ id: number }>(page.text, page.params)).map((r) => r.id);
}

/** One event and its raw body: text when it is valid UTF-8 (as SQLite stores it), else the bytes. */
export async function eventWithBody(q: StoreQuery, id: number) {
  const [found] = await q.rows<EventRow & { body: string | Buffer | null }>(
    `SELECT ${EVENT_COLUMNS}, body FROM events WHERE id = $1`,
    [id],
  );
  if (found === undefined) return undefined;
  const { body, ...event } = found;
  const text = body === null || typeof body === 'string' ? body : (decodeUtf8(body) ?? body);
  return { event: logNu(q.dialect, event as EventRow), body: text };
}

const DELIVERY_COLUMNS = `id, received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes,
  secret_index, remote_addr, detail`;

/**
 * One page of deliveries, newest first. With a time range (and always where ids do not follow
 * arrival, {@link Dialect.idsFollowArrival}: PostgreSQL's follow the relays' commits), newest by
 * `received_at` over its index: ids follow the commit, so an id range taken from the times would
 * miss rows at its ends. SQLite without a range: newest by id (the rowid, or
 * `deliveries_outcome_id`); with one, an unindexed outcome (`+outcome`) keeps the received_at index
 * driving rather than a sort of every row of an outcome.
 */
export async function listDeliveries(
  q: StoreQuery,
  f: ConsoleDeliveryFilter,
): Promise<ListPage<DeliveryRow>> {
  const limit = f.limit ?? 50;
  const byTime = f.from !== undefined || f.to !== undefined || !q.dialect.idsFollowArrival;
  const c = byTime
    ? new Conditions()
        .given(`${q.dialect.unindexed('outcome')} = ?`, f.outcome)
        .given('received_at >= ?', f.from)
        .given('received_at < ?', f.to)
        .given('(received_at, id) < (SELECT received_at, id FROM deliveries WHERE id = ?)', f.before)
    : new Conditions().given('outcome = ?', f.outcome).given('id < ?', f.before);
  const order = byTime ? 'received_at DESC, id DESC' : 'id DESC';
  const page = c.limited(`SELECT ${DELIVERY_COLUMNS} FROM deliveries`, order, limit + 1);
  return pageOf(await q.rows<DeliveryRow>(page.text, page.params), limit, null);
}

// ---- a proposal's story --------------------------------------------------------------------------

const STORY_EVENTS = `SELECT e.id, e.kind, e.evento, e.request_id, e.received_at, e.status, e.attempts, e.last_error,
  e.processed_at, e.duplicates, e.last_duplicate_at, t.from_status, t.to_status, t.applied, t.reason, t.at AS transition_at
FROM events e LEFT JOIN proposal_transitions t ON t.event_id = e.id
WHERE e.nu_proposta = $1 ORDER BY e.id LIMIT ${STORY_CAP}`;

const REGISTRY_EVENTS = `SELECT id, kind, request_id, registry_status, received_at, status, duplicates FROM events
WHERE request_id = $1 AND kind IN ('registry', 'poll') ORDER BY id LIMIT ${STORY_CAP}`;

/** Messages with their deliveries where `condition` ($1), by message, a message's by destination (none first). */
const storyForwards = (dialect: Dialect, condition: string) =>
  `SELECT m.id AS message_id, m.type, m.event_id, m.created_at, d.id AS delivery_id, d.destination, d.status,
  d.attempts, d.last_status, d.last_error, d.delivered_at
FROM forward_messages m LEFT JOIN forward_deliveries d ON d.message_id = m.id
WHERE ${condition} ORDER BY m.id, ${dialect.bytewise('d.destination')} NULLS FIRST`;

/** The messages one event caused, with their deliveries. */
export function eventForwards(q: StoreQuery, eventId: number): Promise<StoryForwardRow[]> {
  return q.rows<StoryForwardRow>(storyForwards(q.dialect, 'm.event_id = $1'), [eventId]);
}

/** Whether a proposal row or an event names `nu`. */
export async function proposalExists(q: StoreQuery, nu: number | string): Promise<boolean> {
  const [row] = await q.rows<{ found: number }>(
    `SELECT (EXISTS (SELECT 1 FROM proposals WHERE nu_proposta = $1)
          OR EXISTS (SELECT 1 FROM events WHERE nu_proposta = $2)) AS found`,
    [q.dialect.storedNu(nu), q.dialect.storedNu(nu)],
  );
  return row?.found === 1;
}

/** What the proposal page tells; undefined when nothing names this proposal. */
export async function proposalStory(q: StoreQuery, nu: number | string) {
  const key = q.dialect.storedNu(nu);
  const [found] = await q.rows<ProposalRow>(PROPOSAL, [key]);
  const proposal = found && logNu(q.dialect, found);
  const events = await q.rows<StoryEventRow>(STORY_EVENTS, [key]);
  if (proposal === undefined && events.length === 0) return undefined;
  const listed = averbacoesQuery({ nuProposta: key, limit: STORY_AVERBACOES });
  const averbacoes: { row: AverbacaoRow; answers: RegistryEventRow[] }[] = [];
  for (const row of await q.rows<AverbacaoRow>(listed.text, listed.params))
    averbacoes.push({
      row: logNu(q.dialect, row),
      answers: await q.rows<RegistryEventRow>(REGISTRY_EVENTS, [row.request_id]),
    });
  const forwards = await q.rows<StoryForwardRow>(
    `${storyForwards(q.dialect, 'm.nu_proposta = $1')} LIMIT ${STORY_CAP}`,
    [key],
  );
  return { proposal, events, averbacoes, forwards };
}

/** Rows of `table` per value of `column` (both names from our code), in SQLite's (byte) order of the values. */
export async function countBy(q: StoreQuery, table: string, column: string): Promise<Record<string, number>> {
  const rows = await q.rows<{ key: string; n: number }>(
    `SELECT ${column} AS key, count(*) AS n FROM ${table} GROUP BY ${column} ORDER BY ${q.dialect.bytewise(column)}`,
  );
  return Object.fromEntries(rows.map((r) => [r.key, r.n]));
}

// ---- averbações ----------------------------------------------------------------------------------

/** An averbação with its place in tracking order (`rid`, the console's keyset). */
export type AverbacaoListRow = AverbacaoRow & { rid: number };

/**
 * A page of averbações, newest tracked first; `next` is the `before` of the next page. The keyset
 * is the tracking order ({@link Dialect.trackingOrder}): SQLite's rowid (insertion order),
 * PostgreSQL's `seq` (it has no rowid).
 * The status and stale filters use the status index, "waiting" the partial index on next_poll_at.
 */
export async function listAverbacoes(
  q: StoreQuery,
  f: ConsoleAverbacaoFilter,
): Promise<{ rows: AverbacaoListRow[]; next: number | null }> {
  const limit = f.limit ?? 50;
  const key = q.dialect.trackingOrder;
  const c = new Conditions()
    .given('status = ?', f.status)
    .given('stale = ?', f.stale)
    // Always bounded: the newest first is a range of the key, never a scan.
    .add(`${key} < ?`, [f.before ?? NO_BOUND])
    .add('next_poll_at IS NOT NULL', [], f.waiting === true);
  const page = c.limited(
    `SELECT ${key} AS rid, ${AVERBACAO_COLUMNS} FROM averbacoes`,
    `${key} DESC`,
    limit + 1,
  );
  const rows = await q.rows<AverbacaoListRow>(page.text, page.params);
  return averbacaoPage(
    rows.map((row) => logNu(q.dialect, row)),
    limit,
  );
}
