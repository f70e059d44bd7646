import type { EventFacts } from '../../src/domain/event-effects';
import type { DeliveryRow } from '../../src/domain/delivery';
import type { EventRow } from '../../src/domain/event-status';
import { clampLimit } from '../../src/domain/list-limit';
import { EVENT_COLUMNS, type EventFilter, eventsQuery } from '../../src/domain/sql/read-statements';
import type { Db } from '../../src/sqlite/database';
import type { NewEvent } from '../../src/domain/event-status';
import { prepareShared } from '../../src/sqlite/sqlite-prepare';

/** A pending `proposta.criada` of proposal 1 as the writer stores it, keyed `key` (dedup key and webhook_id). */
export function pendingEvent(key: string, body = `{"k":"${key}"}`): NewEvent {
  return {
    dedupKey: key,
    webhookId: key,
    kind: 'event',
    evento: 'proposta.criada',
    nuProposta: 1,
    requestId: null,
    registryStatus: null,
    tentativa: 1,
    receivedAt: new Date().toISOString(),
    body,
    bodyBytes: Buffer.byteLength(body),
    status: 'pending',
    lastError: null,
  };
}

/** An event as the handlers' decisions read it (domain/event-effects.ts): event 7, `proposta.aprovada`, no proposal. */
export function eventFacts(over: Partial<EventFacts> = {}): EventFacts {
  return {
    id: 7,
    kind: 'event',
    evento: 'proposta.aprovada',
    nuProposta: null,
    requestId: null,
    registryStatus: null,
    rawBody: null,
    payload: null,
    dados: null,
    ...over,
  };
}

/** Events per status in a SQLite log (the statement of `stats`' counts, core/store-reads.ts `storeFigures`). */
export function eventsByStatus(db: Db): Record<string, number> {
  const rows = db.prepare('SELECT status AS key, count(*) AS n FROM events GROUP BY status').all();
  return Object.fromEntries((rows as { key: string; n: number }[]).map((r) => [r.key, r.n]));
}

/** Deliveries per outcome in a SQLite log (as {@link eventsByStatus}). */
export function deliveriesByOutcome(db: Db): Record<string, number> {
  const rows = db.prepare('SELECT outcome AS key, count(*) AS n FROM deliveries GROUP BY outcome').all();
  return Object.fromEntries((rows as { key: string; n: number }[]).map((r) => [r.key, r.n]));
}

/** The event stored under `dedupKey` in a SQLite log, if any. */
export function eventByDedupKey(db: Db, dedupKey: string): EventRow | undefined {
  return db.prepare('SELECT * FROM events WHERE dedup_key = ?').get(dedupKey) as EventRow | undefined;
}

/** Event `id` in a SQLite log, as the admin API shows it (its columns, no body). */
export function eventById(db: Db, id: number): EventRow | undefined {
  return db.prepare(`SELECT ${EVENT_COLUMNS} FROM events WHERE id = ?`).get(id) as EventRow | undefined;
}

/** Event `id`'s stored body (null once pruned, or for no such event). */
export function eventBody(db: Db, id: number): string | Buffer | null {
  return (
    (
      db.prepare('SELECT body FROM events WHERE id = ?').get(id) as
        { body: string | Buffer | null } | undefined
    )?.body ?? null
  );
}

/** The events `filter` lists, newest first, through the statement both stores list them with. */
export function eventsListed(db: Db, filter: EventFilter = {}): EventRow[] {
  const q = eventsQuery({ ...filter, limit: clampLimit(filter.limit) });
  return prepareShared<EventRow>(db, q.text).all(q.params);
}

/** Every delivery row of a SQLite log, newest first. */
export function deliveriesStored(db: Db): DeliveryRow[] {
  return db.prepare('SELECT * FROM deliveries ORDER BY id DESC').all() as DeliveryRow[];
}
