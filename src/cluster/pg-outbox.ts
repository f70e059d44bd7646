import type { Destination } from '../domain/forwarding/destinations';
import {
  type AverbacaoSnapshot,
  type EventEffects,
  newWebhookId,
  type OutboxEntry,
  outboxEntries,
  type ProcessedEvent,
  type ProposalSnapshot,
  serializeMessage,
} from '../domain/forwarding/messages';
import type { ProposalStatus } from '../domain/lifecycle';
import { canonicalNu, iso, type Sql, type Statement } from './sql';

/**
 * The outbox in cluster mode (contract §8, migrations-pg/0003_forwarding.sql): the same messages as
 * SQLite mode's forwarding handler (src/handlers/forwarding.ts), decided by the same pure
 * `outboxEntries`, written by the kick in the transaction that processes their events.
 *
 * - {@link outboxEntriesOf} runs in the event's savepoint, after its effects: it reads back what
 *   they recorded (one query) and returns the entries; an event whose savepoint is rolled back
 *   leaves none, because the kick keeps them only once the savepoint is released.
 * - {@link storeOutbox} writes a kick's entries last, under {@link OUTBOX_LOCK_KEY}, held until the
 *   kick commits: `forward_messages.id` then follows commit order, which the change feed's cursor
 *   relies on (two kicks allocating 10 and 11 could otherwise commit 11 first, and a reader past 11
 *   would never see 10). The lock covers only the inserts and the commit, not the kick's work.
 * - After the commit, `NOTIFY consig_forward` wakes the replica sending each destination and the
 *   feed's long-polls on every replica.
 */

/** The advisory-lock key of the outbox's inserts (ASCII "consigOB"). */
export const OUTBOX_LOCK_KEY = 0x636f6e7369674f42n;
/** The channel a kick that stored messages notifies (its payload is empty). */
export const OUTBOX_CHANNEL = 'consig_forward';

export interface OutboxOptions {
  destinations: readonly Destination[];
  feedEnabled: boolean;
  /** @default newWebhookId */
  newId?: () => string;
}

/** Whether anything is ever stored: with no destination and the feed off, nothing is read or written. */
export function outboxOn(options: OutboxOptions | undefined): options is OutboxOptions {
  return options !== undefined && (options.destinations.length > 0 || options.feedEnabled);
}

/** The averbação columns messages show, as node-postgres returns them. */
const AVERBACAO_JSON = `json_build_object('request_id', a.request_id, 'correlation_id', a.correlation_id,
  'nu_proposta', a.nu_proposta, 'status', a.status, 'result_source', a.result_source, 'stale', a.stale,
  'result_body', a.result_body, 'completed_at', a.completed_at, 'updated_at', a.updated_at)`;

// One round trip: the event's transition, its proposal, the proposal's latest averbação, the
// averbação the event finished, and the proposal a registration is tracked for. Prepared: it runs
// once per event (sql.ts `prepared`).
const EFFECTS_SQL: Statement = {
  name: 'consig_outbox_effects',
  text: `
WITH t AS (SELECT nu_proposta, from_status, to_status, applied, reason FROM proposal_transitions WHERE event_id = $1)
SELECT
  (SELECT row_to_json(t) FROM t) AS transition,
  (SELECT json_build_object('nu_proposta', p.nu_proposta, 'uuid', p.uuid, 'nu_cpf', p.nu_cpf,
            'nu_cnpj_conveniada', p.nu_cnpj_conveniada, 'vl_emprestimo', p.vl_emprestimo,
            'no_conveniada', p.no_conveniada, 'stage', p.stage, 'status', p.status,
            'last_evento', p.last_evento, 'created_at', p.created_at, 'updated_at', p.updated_at)
   FROM proposals p WHERE p.nu_proposta = (SELECT nu_proposta FROM t)) AS proposal,
  (SELECT ${AVERBACAO_JSON} FROM averbacoes a WHERE a.nu_proposta = (SELECT nu_proposta FROM t)
   ORDER BY a.created_at DESC, a.request_id LIMIT 1) AS proposal_averbacao,
  (SELECT ${AVERBACAO_JSON} FROM averbacoes a WHERE a.request_id = $2 AND a.result_event_id = $1) AS finished,
  (SELECT a.nu_proposta FROM averbacoes a WHERE a.request_id = $2) AS tracked_nu`,
};

interface EffectsRow {
  transition: {
    nu_proposta: string;
    from_status: ProposalStatus | null;
    to_status: ProposalStatus;
    applied: boolean;
    reason: string;
  } | null;
  proposal:
    | (Omit<ProposalSnapshot, 'nu_proposta' | 'vl_emprestimo'> & {
        nu_proposta: string;
        vl_emprestimo: number | string | null;
      })
    | null;
  proposal_averbacao: PgAverbacao | null;
  finished: PgAverbacao | null;
  tracked_nu: string | null;
}

type PgAverbacao = Omit<AverbacaoSnapshot, 'nu_proposta' | 'stale'> & {
  nu_proposta: string | null;
  stale: boolean;
};

/**
 * The messages `event` causes, with the destinations that want each, read back inside the kick's
 * transaction after the event's effects were applied. Shaped exactly as SQLite mode shapes them:
 * numeric proposal numbers as numbers, amounts as numbers, times as ISO-8601 text, flags as 0/1.
 */
export async function outboxEntriesOf(
  sql: Sql,
  event: ProcessedEvent,
  now: Date,
  options: OutboxOptions,
): Promise<OutboxEntry[]> {
  const [row] = await sql.prepared<EffectsRow>(EFFECTS_SQL, [event.id, event.request_id]);
  if (row === undefined) return [];
  return outboxEntries(
    effectsFrom(event, row),
    now.toISOString(),
    options.newId ?? newWebhookId,
    options.destinations,
    options.feedEnabled,
  );
}

/** The row's JSON in the types SQLite mode hands the pure functions (see src/store/forward-outbox.ts). */
function effectsFrom(processed: ProcessedEvent, row: EffectsRow): EventEffects {
  // A registry result rarely names its proposal; the tracked registration does (as in SQLite mode).
  const event =
    processed.nu_proposta === null && processed.request_id !== null && processed.kind !== 'event'
      ? { ...processed, nu_proposta: row.tracked_nu === null ? null : canonicalNu(row.tracked_nu) }
      : processed;
  const t = row.transition;
  const p = t === null ? null : row.proposal;
  return {
    event,
    transition:
      t === null
        ? null
        : { from_status: t.from_status, to_status: t.to_status, applied: t.applied, reason: t.reason },
    proposal:
      p === null
        ? null
        : {
            ...p,
            nu_proposta: canonicalNu(p.nu_proposta),
            vl_emprestimo: p.vl_emprestimo === null ? null : Number(p.vl_emprestimo),
            created_at: isoText(p.created_at),
            updated_at: isoText(p.updated_at),
          },
    proposalAverbacao: p === null ? null : averbacaoFrom(row.proposal_averbacao),
    finishedAverbacao:
      event.request_id === null || event.kind === 'event' ? null : averbacaoFrom(row.finished),
  };
}

function averbacaoFrom(a: PgAverbacao | null): AverbacaoSnapshot | null {
  if (a === null) return null;
  return {
    ...a,
    nu_proposta: a.nu_proposta === null ? null : canonicalNu(a.nu_proposta),
    stale: a.stale ? 1 : 0,
    completed_at: a.completed_at === null ? null : isoText(a.completed_at),
    updated_at: isoText(a.updated_at),
  };
}

/** A timestamptz as json_build_object writes it ("2026-11-23T10:00:00.123+00:00"), as SQLite's ISO text. */
function isoText(value: string): string {
  return iso(value) as string;
}

/**
 * Writes a kick's entries, in order, each message once per (event, type) and one pending delivery
 * per destination that wants it; returns how many messages were new. Takes
 * {@link OUTBOX_LOCK_KEY} (held until the caller's transaction ends) and queues the notification,
 * which PostgreSQL sends at commit.
 */
export async function storeOutbox(sql: Sql, entries: readonly OutboxEntry[]): Promise<number> {
  if (entries.length === 0) return 0;
  await sql.query('SELECT pg_advisory_xact_lock($1)', [OUTBOX_LOCK_KEY.toString()]);
  const m = entries.map((e) => e.message);
  const inserted = await sql.query<{ id: string; webhook_id: string }>(
    `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, request_id, order_key, created_at, body)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
                          $8::timestamptz[], $9::text[])
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
