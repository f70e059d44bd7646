import { cpfForms, eraseFromText, noticeBody, subjectMatcher } from '../domain/subject';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import type { SenderWake } from './forward-admin';
import { type PruneOptions, walk } from './prune-pass';
import {
  BY_HASH,
  noticeOrderKey,
  noticeWebhookId,
  type SubjectHoldings,
  subjectHoldings,
} from './subject-find';
import { readBody, SUBJECT_PAUSE_MS } from './subject-index';

/**
 * `subject erase` (issue 45, docs/privacy.md), written once for both stores: the person's data out
 * of every table of the log, what the law makes the lender keep (ids, events, statuses, dates,
 * amounts: the legal-hold set) left in place, and the destinations that were sent their data told.
 *
 * 1. One transaction: the erasure recorded (`erasures`, kept for good), the person's proposals
 *    stripped of their personal fields and marked (`personal_erased_at`), so that from this commit
 *    no event processed later brings them back (core/effects.ts, core/event-step.ts).
 * 2. The bodies and texts that hold them, in short batches, one transaction each, the event loop
 *    turning between (ingest answers meanwhile, as during a retention pass): events (body, last
 *    error), forwarded messages, their attempts' answers and errors, averbações' results, the audit's
 *    details. Read again until a round finds nothing new: an event processed meanwhile may have
 *    made a message before step 1 committed.
 * 3. One transaction: a `subject.erased` message (no CPF) to every destination the ledger says was
 *    sent the person's data, and the erasure completed with what each place lost.
 * Each step is idempotent: an erasure interrupted is finished by running it again (same id).
 */

export interface EraseRequest {
  /** The person: their subject hash and the key it is under. */
  hash: string;
  key: Buffer;
  /** Their CPF (11 digits) when known: the audit's details are searched for it in clear. */
  cpf: string | null;
  erasureId: string;
  reason: string;
  /** Who asked (an operator's name, `admin-token`). */
  by: string;
  now: Date;
}

/** What an erasure changed, place by place (rows whose text changed, messages sent). */
export interface ErasureSummary {
  erasure_id: string;
  proposals: number;
  events: number;
  messages: number;
  attempts: number;
  averbacoes: number;
  audit: number;
  /** Destinations told by a `subject.erased` message. */
  notified: string[];
  /** Whether the change feed had served the person's data (the notice is then in the feed too). */
  feed: boolean;
}

/** Rows a batch rewrites. */
export const ERASE_BATCH = 200;

export async function eraseSubject(
  sql: StoreSql,
  wake: SenderWake,
  request: EraseRequest,
  options: Pick<PruneOptions, 'shouldStop' | 'pauseMs'> & { batch?: number } = {},
): Promise<ErasureSummary> {
  options = { pauseMs: SUBJECT_PAUSE_MS, ...options };
  const isSubject = subjectMatcher(request.key, request.hash);
  const size = options.batch ?? ERASE_BATCH;
  const { proposals, holdings } = await sql.write((q) => begin(q, request));
  const summary: ErasureSummary = {
    erasure_id: request.erasureId,
    proposals,
    events: 0,
    messages: 0,
    attempts: 0,
    averbacoes: 0,
    audit: 0,
    notified: [],
    feed: false,
  };
  let found = holdings;
  const seen = new Set<string>();
  for (let round = 0; round < 5; round += 1) {
    const fresh = unseen(found, seen);
    if (fresh.events.length + fresh.messages.length + fresh.averbacoes.length === 0) break;
    await eraseRows(sql, fresh, isSubject, size, summary, options);
    found = await sql.read((q) => subjectHoldings(q, request.hash));
  }
  summary.audit = await eraseAudit(sql, request.cpf, isSubject);
  await sql.write((q) => finish(q, wake, request, found, summary));
  if (summary.notified.length > 0) wake.afterWrite?.();
  return summary;
}

async function begin(q: StoreQuery, r: EraseRequest) {
  const at = r.now.toISOString();
  await q.run(
    `INSERT INTO erasures (erasure_id, subject_hash, reason, requested_by, requested_at)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (erasure_id) DO NOTHING`,
    [r.erasureId, r.hash, r.reason, r.by, at],
  );
  const proposals = await q.run(
    `UPDATE proposals SET nu_cpf = NULL, nu_cnpj_conveniada = NULL, no_conveniada = NULL,
       personal_erased_at = coalesce(personal_erased_at, $2), erasure_id = coalesce(erasure_id, $3)
     WHERE ${BY_HASH}`,
    [r.hash, at, r.erasureId],
  );
  return { proposals, holdings: await subjectHoldings(q, r.hash) };
}

/** The rows of `found` not erased by an earlier round. */
function unseen(found: SubjectHoldings, seen: Set<string>) {
  const fresh = <T>(rows: readonly T[], key: (row: T) => string) =>
    rows.filter((row) => {
      const k = key(row);
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    });
  return {
    events: fresh(found.events, (e) => `e${e.id}`).map((e) => e.id),
    messages: fresh(
      found.messages.filter((m) => m.type !== 'subject.erased'),
      (m) => `m${m.id}`,
    ).map((m) => m.id),
    averbacoes: fresh(found.averbacoes, (a) => `a${a.request_id}`).map((a) => a.request_id),
  };
}

type Matcher = (cpf: string) => boolean;

/** `text` erased; null stays null. */
const erased = (text: string | null, isSubject: Matcher) =>
  text === null ? null : eraseFromText(text, isSubject);

async function eraseRows(
  sql: StoreSql,
  rows: ReturnType<typeof unseen>,
  isSubject: Matcher,
  size: number,
  summary: ErasureSummary,
  options: Pick<PruneOptions, 'shouldStop' | 'pauseMs'>,
): Promise<void> {
  summary.events += await inBatches(rows.events, size, options, (q, ids) => eraseEvents(q, ids, isSubject));
  summary.messages += await inBatches(rows.messages, size, options, (q, ids) =>
    eraseMessages(q, ids, isSubject),
  );
  summary.attempts += await inBatches(rows.messages, size, options, (q, ids) =>
    eraseAttempts(q, ids, isSubject),
  );
  for (const requestId of rows.averbacoes) {
    summary.averbacoes += await sql.write(async (q) => {
      const [row] = await q.rows<{ result_body: string | null }>(
        'SELECT result_body FROM averbacoes WHERE request_id = $1',
        [requestId],
      );
      const after = erased(row?.result_body ?? null, isSubject);
      if (after === (row?.result_body ?? null)) return 0;
      return q.run('UPDATE averbacoes SET result_body = $1 WHERE request_id = $2', [after, requestId]);
    });
  }

  async function inBatches(
    ids: readonly number[],
    n: number,
    opts: Pick<PruneOptions, 'shouldStop' | 'pauseMs'>,
    fn: (q: StoreQuery, ids: readonly number[]) => Promise<number>,
  ): Promise<number> {
    let at = 0;
    return walk(opts, 'subjects', () =>
      sql.write(async (q) => {
        const batch = ids.slice(at, at + n);
        at += n;
        return { rows: batch.length === 0 ? 0 : await fn(q, batch), done: at >= ids.length };
      }),
    );
  }
}

async function eraseEvents(q: StoreQuery, ids: readonly number[], isSubject: Matcher): Promise<number> {
  const rows = await q.rows<{ id: number; body: string | Buffer | null; last_error: string | null }>(
    `SELECT id, body, last_error FROM events WHERE ${q.dialect.inIds('id', '$1')}`,
    [q.dialect.idList(ids)],
  );
  let changed = 0;
  for (const row of rows) {
    const body = row.body === null ? null : readBody(row.body);
    const text = body === null ? null : eraseFromText(body.text, isSubject);
    const lastError = erased(row.last_error, isSubject);
    if (text === (body?.text ?? null) && lastError === row.last_error) continue;
    await q.run('UPDATE events SET body = $1, last_error = $2 WHERE id = $3', [
      text === null ? null : body!.write(text),
      lastError,
      row.id,
    ]);
    changed += 1;
  }
  return changed;
}

async function eraseMessages(q: StoreQuery, ids: readonly number[], isSubject: Matcher): Promise<number> {
  const rows = await q.rows<{ id: number; body: string }>(
    `SELECT id, body FROM forward_messages WHERE ${q.dialect.inIds('id', '$1')}`,
    [q.dialect.idList(ids)],
  );
  let changed = 0;
  for (const row of rows) {
    const text = eraseFromText(row.body, isSubject);
    if (text === row.body) continue;
    await q.run('UPDATE forward_messages SET body = $1 WHERE id = $2', [q.dialect.text(text), row.id]);
    changed += 1;
  }
  return changed;
}

/** The destinations' answers (their first KB) and the errors recorded for the messages `ids`. */
async function eraseAttempts(q: StoreQuery, ids: readonly number[], isSubject: Matcher): Promise<number> {
  const among = q.dialect.inIds('d.message_id', '$1');
  const rows = await q.rows<{ id: number; answer: string | null; error: string | null }>(
    `SELECT a.id, a.answer, a.error FROM forward_attempts a JOIN forward_deliveries d ON d.id = a.delivery_id
     WHERE ${among}`,
    [q.dialect.idList(ids)],
  );
  let changed = 0;
  for (const row of rows) {
    const answer = erased(row.answer, isSubject);
    const error = erased(row.error, isSubject);
    if (answer === row.answer && error === row.error) continue;
    await q.run('UPDATE forward_attempts SET answer = $1, error = $2 WHERE id = $3', [answer, error, row.id]);
    changed += 1;
  }
  const errors = await q.rows<{ id: number; last_error: string }>(
    `SELECT d.id, d.last_error FROM forward_deliveries d WHERE ${among} AND d.last_error IS NOT NULL`,
    [q.dialect.idList(ids)],
  );
  for (const row of errors) {
    const text = eraseFromText(row.last_error, isSubject);
    if (text !== row.last_error)
      changed += await q.run('UPDATE forward_deliveries SET last_error = $1 WHERE id = $2', [text, row.id]);
  }
  return changed;
}

/**
 * The console's audit may hold the CPF an operator searched for (a JSON match on bodies); with the
 * CPF in hand, the rows that write it are found by text and erased. Without it (an erasure
 * re-applied from the journal), nothing: the journal holds no CPF.
 */
async function eraseAudit(sql: StoreSql, cpf: string | null, isSubject: Matcher): Promise<number> {
  if (cpf === null) return 0;
  const [digits, formatted] = cpfForms(cpf);
  return sql.write(async (q) => {
    const rows = await q.rows<{ id: number; target: string | null; detail: string | null }>(
      `SELECT id, target, detail FROM console_audit
       WHERE detail LIKE $1 OR detail LIKE $2 OR target LIKE $1 OR target LIKE $2`,
      [`%${digits}%`, `%${formatted}%`],
    );
    for (const row of rows)
      await q.run('UPDATE console_audit SET target = $1, detail = $2 WHERE id = $3', [
        erased(row.target, isSubject),
        erased(row.detail, isSubject),
        row.id,
      ]);
    return rows.length;
  });
}

/** The notices, and the erasure completed with its summary. */
async function finish(
  q: StoreQuery,
  wake: SenderWake,
  r: EraseRequest,
  found: SubjectHoldings,
  summary: ErasureSummary,
) {
  const destinations = [
    ...new Set(found.sharing.filter((s) => s.channel === 'destination').map((s) => s.recipient)),
  ].sort();
  summary.feed = found.sharing.some((s) => s.channel === 'feed');
  const at = r.now.toISOString();
  if (destinations.length > 0 || summary.feed) {
    const webhookId = noticeWebhookId(r.erasureId);
    const body = noticeBody({
      webhookId,
      erasureId: r.erasureId,
      createdAt: at,
      proposals: found.proposals.map((p) => p.nu_proposta),
      requests: found.averbacoes.map((a) => a.request_id),
    });
    const [message] = await q.rows<{ id: number }>(
      `INSERT INTO forward_messages (webhook_id, type, order_key, created_at, body)
       VALUES ($1, 'subject.erased', $2, $3, $4) ON CONFLICT (webhook_id) DO NOTHING RETURNING id`,
      [webhookId, noticeOrderKey(r.erasureId), at, body],
    );
    const id = message?.id;
    for (const destination of id === undefined ? [] : destinations)
      await q.run(
        `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at,
           created_at, updated_at)
         VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4) ON CONFLICT (message_id, destination) DO NOTHING`,
        [id, destination, noticeOrderKey(r.erasureId), at],
      );
    summary.notified = destinations;
    if (id !== undefined && destinations.length > 0) await wake.inWrite?.(q);
  }
  // The first completion's summary stands: running the erasure again (it is idempotent) finds nothing
  // left, and would otherwise write zeros over what each place lost.
  await q.run(
    `UPDATE erasures SET summary = CASE WHEN completed_at IS NULL THEN $2 ELSE summary END,
       completed_at = coalesce(completed_at, $1) WHERE erasure_id = $3`,
    [at, JSON.stringify(summary), r.erasureId],
  );
}
