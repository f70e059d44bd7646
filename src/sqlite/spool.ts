import {
  isBeforeCutoff,
  RETENTION_BATCH,
  spoolDeliveryOwnsEvent,
  type SpoolPruneStep,
  type SpoolPruneSummary,
} from '../domain/retention';
import { StorageError } from '../domain/errors';
import type { SpoolFacts } from '../domain/relay-gap';
import type { SpoolEvent, SpoolRow } from '../domain/spool-row';
import { walk } from '../core/prune-pass';
import type { Db } from './database';

/**
 * The replica's side of cluster mode's relay (contract §10): this SQLite file is the spool the
 * replica acknowledges from, and the relay (src/runtime/cluster/relay.ts) copies its `deliveries` rows, in
 * id order, with the events they stored, to PostgreSQL. The cursor (`relay_cursor`) is advanced only
 * after PostgreSQL committed a batch; a batch sent again after a crash is recognised there by
 * (spool, spool_id) and changes nothing.
 */

/** A delivery and its event's columns (`e_…`: null when it stored none; the body as SQLite keeps it). */
type JoinedRow = Omit<SpoolRow, 'event'> & {
  [K in Exclude<keyof SpoolEvent, 'body'> as `e_${K}`]: SpoolEvent[K] | null;
} & { e_body: Buffer | string | null };

export type Spool = ReturnType<typeof openSpool>;

export function openSpool(db: Db) {
  const cursor = db.prepare<[], { spool: string; relayed_through: number }>(
    'SELECT spool, relayed_through FROM relay_cursor WHERE id = 1',
  );
  const read = db.prepare<[number, number], JoinedRow>(
    `SELECT d.id, d.received_at, d.order_at, d.path, d.outcome, d.http_status, d.dedup_key, d.duration_ms, d.body_bytes,
       d.secret_index, d.remote_addr, d.detail,
       e.kind AS e_kind, e.webhook_id AS e_webhook_id, e.evento AS e_evento, e.nu_proposta AS e_nu_proposta,
       e.request_id AS e_request_id, e.registry_status AS e_registry_status, e.tentativa AS e_tentativa,
       e.received_at AS e_received_at, e.body AS e_body, e.body_bytes AS e_body_bytes, e.status AS e_status,
       e.last_error AS e_last_error, e.trace_context AS e_trace_context
     FROM deliveries d
     LEFT JOIN events e ON e.id = d.event_id AND d.outcome IN ('accepted', 'quarantined')
     WHERE d.id > ? ORDER BY d.id LIMIT ?`,
  );
  const advance = db.prepare<[number, string]>(
    'UPDATE relay_cursor SET relayed_through = max(relayed_through, ?), relayed_at = ? WHERE id = 1',
  );
  // Only after PostgreSQL was found to lack what the cursor says it holds (relay.ts, issue 32).
  const rewind = db.prepare<[number, string]>(
    'UPDATE relay_cursor SET relayed_through = ?, relayed_at = ? WHERE id = 1',
  );
  const held = db.prepare<[number, number], { count: number }>(
    'SELECT count(*) AS count FROM deliveries WHERE id > ? AND id <= ?',
  );
  const backlog = db.prepare<[number], { count: number; oldest: string | null }>(
    'SELECT count(*) AS count, min(received_at) AS oldest FROM deliveries WHERE id > ?',
  );
  const oldest = db.prepare<[number], { oldest: string | null }>(
    // The order time (migrations/0012; received_at for a row stamped before the relay's first beat).
    'SELECT min(coalesce(order_at, received_at)) AS oldest FROM deliveries WHERE id > ?',
  );
  const pruneBatch = spoolPruneBatch(db);
  const row = cursor.get();
  if (!row) throw new Error('the spool has no relay_cursor row (migration 0010 not applied)');
  return {
    /** The spool's identity (random, made when the file was created). */
    id: row.spool,
    /** The last `deliveries.id` PostgreSQL has. */
    relayedThrough: (): number => cursor.get()?.relayed_through ?? 0,
    /** Up to `limit` deliveries after `afterId`, oldest first, each with the event it stored. */
    read: (afterId: number, limit: number): SpoolRow[] => read.all(afterId, limit).map(toSpoolRow),
    /** Records that PostgreSQL committed everything up to `throughId`. */
    advance: (throughId: number, at: string): void => void advance.run(throughId, at),
    /**
     * What `relay verify` compares with PostgreSQL (postgres/pg-reads.ts): the spool's id, cursor,
     * the ids it still holds at or below the cursor, and its backlog. Read in one snapshot.
     */
    facts: db.transaction((): SpoolFacts => {
      const at = cursor.get();
      if (!at) throw new StorageError('not a spool: it has no relay_cursor row (a SQLite-mode database?)');
      const relayedThrough = at.relayed_through;
      const relayedIds = db
        .prepare<[number], { id: number }>('SELECT id FROM deliveries WHERE id <= ? ORDER BY id')
        .all(relayedThrough)
        .map((r) => r.id);
      return { id: at.spool, relayedThrough, relayedIds, backlog: backlog.get(relayedThrough)?.count ?? 0 };
    }),
    /**
     * Moves the cursor back to `toId`: PostgreSQL (a promoted standby) lacks what came after. The
     * rows after it are relayed again and kept from retention until they are. Returns how many of
     * them the spool still holds.
     */
    rewind(toId: number, at: string): number {
      const from = cursor.get()?.relayed_through ?? 0;
      rewind.run(toId, at);
      return held.get(toId, from)?.count ?? 0;
    },
    /** Deliveries not relayed yet, and the oldest one's received_at (null when none). */
    backlog(): { count: number; oldestReceivedAt: string | null } {
      const b = backlog.get(cursor.get()?.relayed_through ?? 0);
      return { count: b?.count ?? 0, oldestReceivedAt: b?.oldest ?? null };
    },
    /**
     * The oldest order time after `afterId` (`order_at`, else received_at; null when none): what the
     * relay cannot say is in PostgreSQL yet (runtime/cluster/relay.ts's heartbeat). Not always the first
     * row's: the order time is taken when a request arrives, its id when its group commit runs.
     */
    oldestAfter: (afterId: number): string | null => oldest.get(afterId)?.oldest ?? null,
    /**
     * RETENTION_DAYS in cluster mode: removes the deliveries PostgreSQL already has (relayed) that
     * were received before `cutoff`, with the events they stored (see {@link spoolPruneBatch});
     * `pruneBatch` one batch after `afterId`, `prune` the whole spool at once.
     */
    pruneBatch: (cutoff: Date, afterId: number, size: number): SpoolPruneStep =>
      pruneBatch(cutoff, afterId, size),
    prune(cutoff: Date, batch: number = RETENTION_BATCH.spool.command): SpoolPruneSummary {
      const removed: SpoolPruneSummary = { deliveries: 0, events: 0 };
      for (let afterId = 0; ;) {
        const step = pruneBatch(cutoff, afterId, batch);
        removed.deliveries += step.deliveries;
        removed.events += step.events;
        if (step.done) return removed;
        afterId = step.lastId;
      }
    },
  };
}

/**
 * Removes, from a replica's spool, the deliveries that are relayed (`id <= relayed_through`: their
 * PostgreSQL commit is recorded) and received before the cutoff, and the events those deliveries
 * stored (`accepted`, `quarantined`). A row not relayed yet is never touched, and neither is an
 * event no relayed delivery stored (a spool that ran in SQLite mode may hold poll results, which the
 * relay never reads). One transaction per batch, oldest first; like core/prune-pass.ts on SQLite, the walk
 * ends at the first delivery newer than the cutoff (ids follow arrival). The function returned,
 * `(cutoff, afterId, size)`, runs one; the replica runs them one event-loop turn apart (its answers
 * share this connection and this thread), `Spool.prune` back to back.
 *
 * Why this is safe:
 * - The newest delivery is always kept. `deliveries.id` is a rowid without AUTOINCREMENT: with its
 *   highest row gone, SQLite would hand out that id again, and the relay (whose cursor is past it)
 *   would skip the new delivery for ever, as PostgreSQL would ((spool, spool_id) is its key).
 * - Local deduplication reads `events.dedup_key`: a copy arriving after its event left the spool is
 *   stored and answered `accepted` again, and the relay's ON CONFLICT on the dedup key makes it one
 *   more duplicate of the event PostgreSQL has, not a second event. Duplicate deliveries do not need
 *   their event row (the relay counts them by dedup key), so a kept one may name a removed event.
 */
function spoolPruneBatch(db: Db) {
  // The highest id a pass may remove: relayed, and below the newest row.
  const bound = db.prepare<[], { through: number | null }>(
    `SELECT min((SELECT relayed_through FROM relay_cursor WHERE id = 1), (SELECT max(id) FROM deliveries) - 1) AS through`,
  );
  const next = db.prepare<
    [number, number, number],
    { id: number; received_at: string; outcome: string; event_id: number | null }
  >('SELECT id, received_at, outcome, event_id FROM deliveries WHERE id > ? AND id <= ? ORDER BY id LIMIT ?');
  const deleteDeliveries = db.prepare<[number, number]>('DELETE FROM deliveries WHERE id > ? AND id <= ?');
  const deleteEvent = db.prepare<[number, string]>('DELETE FROM events WHERE id = ? AND received_at < ?');
  return db.transaction((cutoff: Date, afterId: number, size: number): SpoolPruneStep => {
    const cutoffIso = cutoff.toISOString();
    // Read in the transaction: the relay (same connection) moves the cursor between batches.
    const rows = next.all(afterId, bound.get()?.through ?? 0, size);
    const firstNew = rows.findIndex((r) => !isBeforeCutoff(r.received_at, cutoffIso));
    const taken = firstNew === -1 ? rows : rows.slice(0, firstNew);
    const step = {
      deliveries: 0,
      events: 0,
      lastId: afterId,
      done: firstNew !== -1 || rows.length < size,
    };
    if (taken.length === 0) return { ...step, done: true };
    step.lastId = taken[taken.length - 1]!.id;
    step.deliveries = deleteDeliveries.run(afterId, step.lastId).changes;
    for (const r of taken)
      if (spoolDeliveryOwnsEvent(r.outcome, r.event_id))
        step.events += deleteEvent.run(r.event_id, cutoffIso).changes;
    return step;
  });
}

/**
 * A running replica's pass (RETENTION_DAYS, on runtime/retention-schedule.ts's timer): the batches
 * of `Spool.pruneBatch` a turn of the event loop apart (core/prune-pass.ts `walk`), because the
 * answers to the service run on this thread and this connection and wait for a batch (500 rows:
 * 6 ms on average, under 30 ms at most, measured on a spool of 100 000). What each batch removed is
 * added to `removed` once it committed; `shouldStop` ends the walk after its batch (PassInterrupted).
 */
export async function pruneSpoolPaced(
  spool: Pick<Spool, 'pruneBatch'>,
  cutoff: Date,
  removed: SpoolPruneSummary,
  options: { batch?: number; shouldStop?(): boolean } = {},
): Promise<void> {
  const size = options.batch ?? RETENTION_BATCH.spool.replica;
  let afterId = 0;
  await walk(options, 'spool', async () => {
    const step = spool.pruneBatch(cutoff, afterId, size);
    removed.deliveries += step.deliveries;
    removed.events += step.events;
    afterId = step.lastId;
    return { rows: step.deliveries, done: step.done };
  });
}

function toSpoolRow(r: JoinedRow): SpoolRow {
  const {
    e_kind,
    e_webhook_id,
    e_evento,
    e_nu_proposta,
    e_request_id,
    e_registry_status,
    e_tentativa,
    e_received_at,
    e_body,
    e_body_bytes,
    e_status,
    e_last_error,
    e_trace_context,
    ...delivery
  } = r;
  const event: SpoolEvent | null =
    e_kind === null
      ? null
      : {
          kind: e_kind,
          webhook_id: e_webhook_id,
          evento: e_evento,
          nu_proposta: e_nu_proposta,
          request_id: e_request_id,
          registry_status: e_registry_status,
          tentativa: e_tentativa,
          received_at: e_received_at ?? delivery.received_at,
          // TEXT when the body was valid UTF-8, BLOB otherwise (migrations/0001): bytes either way.
          body: e_body === null ? null : typeof e_body === 'string' ? Buffer.from(e_body, 'utf8') : e_body,
          body_bytes: e_body_bytes ?? 0,
          status: e_status ?? 'pending',
          last_error: e_last_error,
          trace_context: e_trace_context,
        };
  return { ...delivery, event };
}
