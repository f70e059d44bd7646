import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import { messageWebhookId, type ProposalSnapshot } from '../domain/forwarding/messages';

/**
 * `subject find` and `subject export` (issue 45, docs/privacy.md), written once for both stores:
 * everything the log holds about one person, reached through their subject hash (the proposals and
 * events core/subject-index.ts hashed), then through their proposals' numbers and their
 * registrations' request ids (the events of a proposal whose bodies were pruned, the registry
 * results, the messages, the ledger of sharing). One snapshot, so the counts agree.
 */

/** Where a person's data sits, as `subject find` counts it (docs/privacy.md's inventory). */
export interface SubjectHoldings {
  hash: string;
  proposals: ProposalHeld[];
  events: EventHeld[];
  averbacoes: AverbacaoHeld[];
  messages: MessageHeld[];
  deliveries: DeliveryHeld[];
  sharing: SharingRow[];
  erasures: ErasureRow[];
  notices: NoticeRow[];
}

/** A proposal of the person: its snapshot (as `proposal.changed` shows it) and its erasure marks. */
export interface ProposalHeld extends ProposalSnapshot {
  personal_erased_at: string | null;
  erasure_id: string | null;
}
export interface EventHeld {
  id: number;
  kind: string;
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  status: string;
  received_at: string;
  body: string | Buffer | null;
}
export interface AverbacaoHeld {
  request_id: string;
  nu_proposta: number | string | null;
  status: string;
  result_source: string | null;
  result_body: string | null;
  created_at: string;
  completed_at: string | null;
}
export interface MessageHeld {
  id: number;
  webhook_id: string;
  type: string;
  event_id: number | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  created_at: string;
  body: string;
}
export interface DeliveryHeld {
  id: number;
  message_id: number;
  destination: string;
  status: string;
  attempts: number;
  delivered_at: string | null;
}
export interface SharingRow {
  recipient: string;
  channel: 'destination' | 'feed';
  webhook_id: string;
  type: string;
  nu_proposta: number | string | null;
  request_id: string | null;
  first_sent_at: string;
  acknowledged_at: string | null;
}
export interface ErasureRow {
  erasure_id: string;
  reason: string;
  requested_by: string;
  requested_at: string;
  completed_at: string | null;
  summary: string | null;
}
/** A `subject.erased` message's delivery to one destination: whether it acknowledged. */
export interface NoticeRow {
  erasure_id: string;
  destination: string;
  status: string;
  attempts: number;
  delivered_at: string | null;
}

/**
 * The person's rows by hash, through the partial indexes `*_subject` (migrations 0016, pg 0012):
 * SQLite uses a partial index only when the query implies its WHERE, which `= $1` alone does not
 * (a bound value could be ''), so the query says it. Without it, a scan of the whole table, in the
 * erasure's first transaction (bench/erasure.ts found it: 0.3–0.4 s on a million events; the
 * query-plans test now runs the subject commands).
 */
export const BY_HASH = "subject_hash = $1 AND subject_hash <> ''";

const PROPOSAL_COLUMNS = `nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage, status,
  last_evento, created_at, updated_at, personal_erased_at, erasure_id`;
const EVENT_COLUMNS = 'id, kind, evento, nu_proposta, request_id, status, received_at, body';
const MESSAGE_COLUMNS = 'id, webhook_id, type, event_id, nu_proposta, request_id, created_at, body';
const LEDGER_COLUMNS = `recipient, channel, webhook_id, type, nu_proposta, request_id, first_sent_at,
  acknowledged_at`;

/** Everything about the person of `hash`, in one snapshot. */
export function findSubject(sql: StoreSql, hash: string): Promise<SubjectHoldings> {
  return sql.read((q) => subjectHoldings(q, hash));
}

/** {@link findSubject} on `q` (an erasure reads it inside its own transaction). */
export async function subjectHoldings(q: StoreQuery, hash: string): Promise<SubjectHoldings> {
  const proposals = (
    await q.rows<ProposalHeld>(`SELECT ${PROPOSAL_COLUMNS} FROM proposals WHERE ${BY_HASH}`, [hash])
  ).map((p) => ({ ...p, nu_proposta: q.dialect.logNu(p.nu_proposta)! }));
  const nus = proposals.map((p) => p.nu_proposta);
  const averbacoes = await byKeys<AverbacaoHeld>(
    q,
    `SELECT request_id, nu_proposta, status, result_source, result_body, created_at, completed_at
     FROM averbacoes WHERE nu_proposta = $1`,
    nus.map((nu) => q.dialect.storedNu(nu)),
    (a) => a.request_id,
  ).then((rows) => rows.map((a) => ({ ...a, nu_proposta: q.dialect.logNu(a.nu_proposta) })));
  const requests = averbacoes.map((a) => a.request_id);
  const events = await linked<EventHeld>(q, 'events', EVENT_COLUMNS, nus, requests, hash);
  const messages = await linked<MessageHeld>(q, 'forward_messages', MESSAGE_COLUMNS, nus, requests);
  const deliveries =
    messages.length === 0
      ? []
      : await q.rows<DeliveryHeld>(
          `SELECT id, message_id, destination, status, attempts, delivered_at FROM forward_deliveries
           WHERE ${q.dialect.inIds('message_id', '$1')} ORDER BY id`,
          [q.dialect.idList(messages.map((m) => m.id))],
        );
  const sharing = await ledger(q, nus, requests);
  const erasures = await q.rows<ErasureRow>(
    `SELECT erasure_id, reason, requested_by, requested_at, completed_at, summary FROM erasures
     WHERE subject_hash = $1 ORDER BY id`,
    [hash],
  );
  const notices = await noticesOf(q, erasures);
  return { hash, proposals, events, averbacoes, messages, deliveries, sharing, erasures, notices };
}

/** The rows of `text` for each key (`$1`), each row once (by `id`), in the order of `id`. */
async function byKeys<R>(
  q: StoreQuery,
  text: string,
  keys: readonly unknown[],
  id: (row: R) => number | string,
): Promise<R[]> {
  const found = new Map<number | string, R>();
  for (const key of keys) for (const row of await q.rows<R>(text, [key])) found.set(id(row), row);
  return [...found.values()].sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0));
}

/** A table's rows of the person: by their proposals, their registrations, and (events) their hash. */
async function linked<R extends { id: number; nu_proposta: number | string | null }>(
  q: StoreQuery,
  table: 'events' | 'forward_messages',
  columns: string,
  nus: readonly (number | string)[],
  requests: readonly string[],
  hash?: string,
): Promise<R[]> {
  const select = `SELECT ${columns} FROM ${table} WHERE`;
  const rows = [
    ...(await byKeys<R>(
      q,
      `${select} nu_proposta = $1`,
      nus.map((nu) => q.dialect.storedNu(nu)),
      (r) => r.id,
    )),
    ...(await byKeys<R>(q, `${select} request_id = $1`, requests, (r) => r.id)),
    ...(hash === undefined ? [] : await q.rows<R>(`${select} ${BY_HASH}`, [hash])),
  ];
  const unique = new Map(
    rows.map((r) => [Number(r.id), { ...r, id: Number(r.id), nu_proposta: q.dialect.logNu(r.nu_proposta) }]),
  );
  return [...unique.values()].sort((a, b) => a.id - b.id);
}

async function ledger(q: StoreQuery, nus: readonly (number | string)[], requests: readonly string[]) {
  const select = `SELECT id, ${LEDGER_COLUMNS} FROM sharing_ledger WHERE`;
  const rows = [
    ...(await byKeys<SharingRow & { id: number }>(
      q,
      `${select} nu_proposta = $1`,
      nus.map((nu) => q.dialect.storedNu(nu)),
      (r) => Number(r.id),
    )),
    ...(await byKeys<SharingRow & { id: number }>(q, `${select} request_id = $1`, requests, (r) =>
      Number(r.id),
    )),
  ];
  const unique = new Map(rows.map((r) => [Number(r.id), r]));
  return [...unique.entries()]
    .sort(([a], [b]) => a - b)
    .map(([, { id: _id, ...row }]) => ({ ...row, nu_proposta: q.dialect.logNu(row.nu_proposta) }));
}

/** The order key of an erasure's `subject.erased` message (its own line at each destination). */
export const noticeOrderKey = (erasureId: string): string => `erasure:${erasureId}`;

/** Its `webhook-id`: derived as every message's is (domain/forwarding/messages.ts). */
export const noticeWebhookId = (erasureId: string): string =>
  messageWebhookId(noticeOrderKey(erasureId), 'subject.erased');

async function noticesOf(q: StoreQuery, erasures: readonly ErasureRow[]): Promise<NoticeRow[]> {
  const notices: NoticeRow[] = [];
  for (const { erasure_id } of erasures) {
    const rows = await q.rows<Omit<NoticeRow, 'erasure_id'>>(
      `SELECT d.destination, d.status, d.attempts, d.delivered_at FROM forward_messages m
       JOIN forward_deliveries d ON d.message_id = m.id
       WHERE m.webhook_id = $1 ORDER BY d.id`,
      [noticeWebhookId(erasure_id)],
    );
    notices.push(...rows.map((r) => ({ erasure_id, ...r })));
  }
  return notices;
}
