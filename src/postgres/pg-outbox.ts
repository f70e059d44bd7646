import type { StepOptions } from '../core/event-step';
import { type OutboxEntry, serializeMessage } from '../domain/forwarding/messages';
import type { PgSql } from './pg-sql';

/**
 * The outbox in cluster mode (contract §8, migrations-pg/0003_forwarding.sql): the same messages as
 * SQLite mode, decided by the same pure
 * `outboxEntries`, written by the turn in the transaction that processes their events.
 *
 * - The event step (core/event-step.ts) reads back, in the event's savepoint after its effects,
 *   what they recorded (one query) and gives the entries; an event whose savepoint is rolled back
 *   leaves none, because the turn keeps them only once the savepoint is released.
 * - {@link storeOutbox} writes a turn's entries last, under {@link OUTBOX_LOCK_KEY}, held until the
 *   turn commits: `forward_messages.id` then follows commit order, which the change feed's cursor
 *   relies on (two turns allocating 10 and 11 could otherwise commit 11 first, and a reader past 11
 *   would never see 10). The lock covers only the inserts and the commit, not the turn's work.
 * - After the commit, `NOTIFY consig_forward` wakes the replica sending each destination and the
 *   feed's long-polls on every replica.
 */

/** The advisory-lock key of the outbox's inserts (ASCII "consigOB"). */
export const OUTBOX_LOCK_KEY = 0x636f6e7369674f42n;
/** The channel a turn that stored messages notifies (its payload is empty). */
export const OUTBOX_CHANNEL = 'consig_forward';

/** Forwarding's destinations and the change feed, as the event step takes them (core/event-step.ts). */
export type OutboxOptions = NonNullable<StepOptions['outbox']>;

/**
 * Writes a turn's entries, in order, each message once per (event, type) and one pending delivery
 * per destination that wants it; returns how many messages were new. Takes
 * {@link OUTBOX_LOCK_KEY} (held until the caller's transaction ends) and queues the notification,
 * which PostgreSQL sends at commit.
 */
export async function storeOutbox(sql: PgSql, entries: readonly OutboxEntry[]): Promise<number> {
  if (entries.length === 0) return 0;
  await sql.query('SELECT pg_advisory_xact_lock($1)', [OUTBOX_LOCK_KEY.toString()]);
  const m = entries.map((e) => e.message);
  const inserted = await sql.query<{ id: string; webhook_id: string }>(
    `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body,
       trace_context)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
                          $8::timestamptz[], $9::text[], $10::text[])
     ON CONFLICT (event_id, type) DO NOTHING
     RETURNING id, webhook_id`,
    [
      m.map((x) => x.webhookId),
      m.map((x) => x.type),
      m.map((x) => x.eventId),
      m.map((x) => x.evento),
      m.map((x) => (x.nuProposta === null ? null : String(x.nuProposta))),
      m.map((x) => x.requestId),
      m.map((x) => x.orderKey),
      m.map((x) => x.createdAt),
      m.map((x) => serializeMessage(x)),
      entries.map((e) => e.traceContext ?? null),
    ],
  );
  const idOf = new Map(inserted.map((r) => [r.webhook_id, r.id]));
  const rows = entries.flatMap((e) => {
    const id = idOf.get(e.message.webhookId);
    return id === undefined ? [] : e.destinations.map((d) => ({ id, d, e }));
  });
  if (rows.length > 0) {
    await sql.query(
      `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at,
         created_at, updated_at)
       SELECT m, d, k, 'pending', 0, t, t, t FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) AS x(m, d, k, t)
       ON CONFLICT (message_id, destination) DO NOTHING`,
      [
        rows.map((r) => r.id),
        rows.map((r) => r.d),
        rows.map((r) => r.e.message.orderKey),
        rows.map((r) => r.e.message.createdAt),
      ],
    );
  }
  if (inserted.length > 0) await sql.query(`SELECT pg_notify('${OUTBOX_CHANNEL}', '')`);
  return inserted.length;
}
