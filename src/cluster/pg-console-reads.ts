import {
  averbacaoPage,
  type ConsoleAverbacaoFilter,
  type ConsoleEventFilter,
  COUNT_CAP,
  hasUnindexedCondition,
  type ListPage,
  pageOf,
  type RegistryEventRow,
  type RelaySpoolRow,
  scanCapFor,
  STORY_CAP,
  type StoryEventRow,
  type StoryForwardRow,
  windowLow,
  windowPage,
} from '../domain/console';
import type { EventRow } from '../domain/event-status';
import { AVERBACAO_COLUMNS, EVENT_COLUMNS } from '../domain/sql/log-reads';
import { type PgAverbacaoRow, type PgReader, rows, withLogNuProposta } from './pg-reads';

/**
 * The console's reads of the log in cluster mode (contract §9, §10): the queries of SQLite's
 * store/console-events.ts, console-proposals.ts and console-averbacoes.ts on PostgreSQL's tables,
 * with the same rules (domain/console.ts) and the SQLite log's shapes (pg-reads.ts LOG_TYPES), so
 * that one set of pages renders both. Every value is a parameter.
 *
 * Events lists keep SQLite's bound on a page's cost: the conditions an index serves (`status`,
 * `nu_proposta`, the time range over events_received_at, the keyset) choose the rows walked;
 * `evento`, `kind` and the JSON match are checked on at most one window of them per page.
 */

/** `nu_proposta` as PostgreSQL stores it (text, an integer in its canonical decimal). */
const textNu = (nu: number | string): string => String(nu);

/** Conditions numbered from `$1` (`?` stands for the parameter), joined into a WHERE clause. */
class Conditions {
  readonly parts: string[] = [];
  readonly params: unknown[] = [];

  add(condition: string, ...values: unknown[]): this {
    let text = condition;
    for (const value of values) {
      this.params.push(value);
      text = text.replace('?', `$${this.params.length}`);
    }
    this.parts.push(text);
    return this;
  }

  get where(): string {
    return this.parts.length > 0 ? `WHERE ${this.parts.join(' AND ')}` : '';
  }

  /** `$n` of the next parameter. */
  next(): string {
    return `$${this.params.length + 1}`;
  }
}

/** The whole filter over `events`, ids from `atLeastId` (a window's low end) when given. */
function eventConditions(f: ConsoleEventFilter, atLeastId?: number): Conditions {
  const c = new Conditions();
  if (f.status !== undefined) c.add('status = ?', f.status);
  if (f.nuProposta !== undefined) c.add('nu_proposta = ?', textNu(f.nuProposta));
  if (atLeastId !== undefined) c.add('id >= ?', atLeastId);
  if (f.before !== undefined) c.add('id < ?', f.before);
  if (f.from !== undefined) c.add('received_at >= ?::timestamptz', f.from);
  if (f.to !== undefined) c.add('received_at < ?::timestamptz', f.to);
  if (f.evento !== undefined) c.add('evento = ?', f.evento);
  if (f.kind !== undefined) c.add('kind = ?', f.kind);
  // migrations-pg/0004: null for a body that is not UTF-8 JSON, which so matches no leaf.
  for (const leaf of f.json ?? [])
    c.add('console_body_json(body) #> ?::text[] = ?::jsonb', [...leaf.keys], JSON.stringify(leaf.value));
  return c;
}

async function selectEvents(db: PgReader, f: ConsoleEventFilter, limit: number, atLeastId?: number) {
  const c = eventConditions(f, atLeastId);
  const found = await rows<EventRow & { nu_proposta: string | null }>(
    db,
    `SELECT ${EVENT_COLUMNS} FROM events ${c.where} ORDER BY id DESC LIMIT ${c.next()}`,
    [...c.params, limit],
  );
  return found.map(withLogNuProposta) as EventRow[];
}

/** One page of events, newest first (the window rule of domain/console.ts). */
export async function readConsoleEvents(db: PgReader, f: ConsoleEventFilter): Promise<ListPage<EventRow>> {
  const limit = f.limit ?? 50;
  if (!hasUnindexedCondition(f) || f.nuProposta !== undefined)
    return pageOf(await selectEvents(db, f, limit + 1), limit, null);
  // The window: the newest `cap` entries of the driving conditions below the cursor; one entry
  // past it says whether it was cut.
  const cap = scanCapFor(f);
  const driving = eventConditions({ status: f.status, from: f.from, to: f.to, before: f.before });
  const [edge] = await rows<{ n: number; low: number | null }>(
    db,
    `SELECT count(*) AS n, min(id) AS low FROM (SELECT id FROM events ${driving.where} ORDER BY id DESC LIMIT ${cap + 1}) w`,
    driving.params,
  );
  const low = windowLow(edge, cap);
  return windowPage(await selectEvents(db, f, limit + 1, low), limit, low);
}

/** How many events the whole filter matches (a bulk replay's confirmation). */
export async function countConsoleEvents(db: PgReader, f: ConsoleEventFilter): Promise<number> {
  const c = eventConditions(f);
  const [row] = await rows<{ n: number }>(db, `SELECT count(*) AS n FROM events ${c.where}`, c.params);
  return row?.n ?? 0;
}

/** Up to `limit` matching ids below `before`, newest first. */
export async function readConsoleEventIds(
  db: PgReader,
  f: ConsoleEventFilter,
  before: number,
  limit: number,
): Promise<number[]> {
  const c = eventConditions({ ...f, before });
  const found = await rows<{ id: number }>(
    db,
    `SELECT id FROM events ${c.where} ORDER BY id DESC LIMIT ${c.next()}`,
    [...c.params, limit],
  );
  return found.map((r) => r.id);
}

// ---- a proposal's story --------------------------------------------------------------------------

const STORY_FORWARD_COLUMNS = `m.id AS message_id, m.type, m.event_id, m.created_at, d.id AS delivery_id,
  d.destination, d.status, d.attempts, d.last_status, d.last_error, d.delivered_at`;
// SQLite's order: messages by id, a message's deliveries by destination (bytes; none first).
const STORY_FORWARD_FROM = `FROM forward_messages m LEFT JOIN forward_deliveries d ON d.message_id = m.id`;
const STORY_FORWARD_ORDER = 'ORDER BY m.id, d.destination COLLATE "C" NULLS FIRST';

/** The proposal's events in the order they reached PostgreSQL, each with its transition. */
export function readStoryEvents(db: PgReader, nu: number | string): Promise<StoryEventRow[]> {
  return rows<StoryEventRow>(
    db,
    `SELECT e.id, e.kind, e.evento, e.request_id, e.received_at, e.status, e.attempts, e.last_error, e.processed_at,
       e.duplicates, e.last_duplicate_at, t.from_status, t.to_status, t.applied, t.reason, t.at AS transition_at
     FROM events e LEFT JOIN proposal_transitions t ON t.event_id = e.id
     WHERE e.nu_proposta = $1 ORDER BY e.id LIMIT ${STORY_CAP}`,
    [textNu(nu)],
  );
}

/** The registry's answers (webhooks and polls) about `requestId`. */
export function readRegistryEvents(db: PgReader, requestId: string): Promise<RegistryEventRow[]> {
  return rows<RegistryEventRow>(
    db,
    `SELECT id, kind, request_id, registry_status, received_at, status, duplicates FROM events
     WHERE request_id = $1 AND kind IN ('registry', 'poll') ORDER BY id LIMIT ${STORY_CAP}`,
    [requestId],
  );
}

/** The proposal's forwarded messages with their deliveries, in message order. */
export function readProposalForwards(db: PgReader, nu: number | string): Promise<StoryForwardRow[]> {
  return rows<StoryForwardRow>(
    db,
    `SELECT ${STORY_FORWARD_COLUMNS} ${STORY_FORWARD_FROM} WHERE m.nu_proposta = $1 ${STORY_FORWARD_ORDER} LIMIT ${STORY_CAP}`,
    [textNu(nu)],
  );
}

/** The messages one event caused, with their deliveries. */
export function readEventForwards(db: PgReader, eventId: number): Promise<StoryForwardRow[]> {
  return rows<StoryForwardRow>(
    db,
    `SELECT ${STORY_FORWARD_COLUMNS} ${STORY_FORWARD_FROM} WHERE m.event_id = $1 ${STORY_FORWARD_ORDER}`,
    [eventId],
  );
}

/** Whether a proposal row or an event names `nu`. */
export async function proposalNamed(db: PgReader, nu: number | string): Promise<boolean> {
  const [row] = await rows<{ found: number }>(
    db,
    `SELECT (EXISTS (SELECT 1 FROM proposals WHERE nu_proposta = $1)
          OR EXISTS (SELECT 1 FROM events WHERE nu_proposta = $1)) AS found`,
    [textNu(nu)],
  );
  return row?.found === 1;
}

// ---- averbações and the overview's counts --------------------------------------------------------

/** An averbação with its place in tracking order (`seq`, the console's keyset; SQLite's rowid). */
export type PgAverbacaoListRow = PgAverbacaoRow & { rid: number };

/** A page of averbações, newest tracked first; `next` is the `before` of the next page. */
export async function readConsoleAverbacoes(
  db: PgReader,
  f: ConsoleAverbacaoFilter,
): Promise<{ rows: PgAverbacaoListRow[]; next: number | null }> {
  const limit = f.limit ?? 50;
  const c = new Conditions();
  if (f.status !== undefined) c.add('status = ?', f.status);
  if (f.stale !== undefined) c.add('stale = ?', f.stale);
  if (f.before !== undefined) c.add('seq < ?', f.before);
  if (f.waiting === true) c.add('next_poll_at IS NOT NULL');
  const found = await rows<PgAverbacaoListRow & { nu_proposta: string | null }>(
    db,
    `SELECT seq AS rid, ${AVERBACAO_COLUMNS} FROM averbacoes ${c.where} ORDER BY seq DESC LIMIT ${c.next()}`,
    [...c.params, limit + 1],
  );
  return averbacaoPage(found.map(withLogNuProposta) as PgAverbacaoListRow[], limit);
}

/** The overview's counts that SQLite reads from store/console-averbacoes.ts and the events store. */
export async function readOverviewCounts(db: PgReader): Promise<{
  events: { pending: number; failed: number; dead: number };
  averbacoes: { waiting: number; staleWaiting: number };
}> {
  const [row] = await rows<{
    pending: number;
    failed: number;
    dead: number;
    waiting: number;
    stale_waiting: number;
  }>(
    db,
    // Each event count stops at COUNT_CAP (over events_status_id), as in SQLite.
    `SELECT (SELECT count(*) FROM (SELECT 1 FROM events WHERE status = 'pending' LIMIT ${COUNT_CAP}) x) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM events WHERE status = 'failed' LIMIT ${COUNT_CAP}) x) AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM events WHERE status = 'dead' LIMIT ${COUNT_CAP}) x) AS dead,
       (SELECT count(*) FROM averbacoes WHERE next_poll_at IS NOT NULL) AS waiting,
       (SELECT count(*) FROM averbacoes WHERE status IN ('queued', 'processing') AND stale) AS stale_waiting`,
  );
  if (row === undefined) throw new Error('the overview counts query returned no row');
  return {
    events: { pending: row.pending, failed: row.failed, dead: row.dead },
    averbacoes: { waiting: row.waiting, staleWaiting: row.stale_waiting },
  };
}

/** One row per spool that ever relayed (migrations-pg/0002 `relay_spools`), by replica. */
export function readRelaySpools(db: PgReader): Promise<RelaySpoolRow[]> {
  return rows<RelaySpoolRow>(
    db,
    `SELECT spool, replica, relayed_through, last_relayed_at, last_received_at FROM relay_spools
     ORDER BY replica COLLATE "C", spool COLLATE "C"`,
  );
}
