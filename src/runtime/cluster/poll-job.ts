import type { PollOutcome, PollScheduleOptions } from '../../domain/registry';
import {
  decidePoll,
  type PollAnswer,
  type PollDecision,
  type PollEvent,
  type PollLog,
  pollStart,
  type PollTarget,
  refusedAnswer,
} from '../../domain/registry-poll';
import { MARK_STALE, RECORD_POLL } from '../../domain/sql/registry-poll-statements';
import { holdKeys } from '../../postgres/pg-locks';
import type { PgSql } from '../../postgres/pg-sql';

/**
 * A registry poll as a scheduled pg-boss job (cluster mode; the SQLite poller is
 * src/runtime/single/poller.ts): one job per registration that is not final (`r:<requestId>`, policy
 * stately), so exactly one replica polls it. The job is not transactional: the status query is an
 * HTTP call and must not hold a transaction open. After it, one transaction stores the answer as a
 * `poll` event (dedup key `poll:<requestId>:<status>`, as in SQLite mode) with a turn for its work
 * key, records the poll, and schedules the next one unless the answer is final or the registration
 * went stale. A replica that dies mid-poll: the job runs again elsewhere; the repeated GET is
 * harmless and its answer deduplicates. Every decision is domain/registry-poll.ts's, as in SQLite
 * mode; the row's updates are the statements both stores share (domain/sql/registry-poll-statements.ts).
 */

export interface StatusClient {
  requestStatus(requestId: string): Promise<{ requestId: string; status: string; raw: unknown }>;
}

export interface PollJobDeps {
  client: StatusClient;
  schedule: PollScheduleOptions;
  now(): Date;
  random?: () => number;
  /** Runs `fn` in one PostgreSQL transaction. */
  transaction<T>(fn: (sql: PgSql) => Promise<T>): Promise<T>;
  query: PgSql['query'];
  queueTurns(sql: PgSql, keys: readonly string[]): Promise<void>;
  schedulePoll(sql: PgSql, requestId: string, at: Date): Promise<void>;
  onPoll?(outcome: PollOutcome): void;
  logger: Record<PollLog['level'], (fields: Readonly<Record<string, unknown>>, message: string) => void>;
}

/** Loads the registration, asks the service, applies domain/registry-poll.ts's decision. */
export async function runPollJob(requestId: string, deps: PollJobDeps): Promise<PollOutcome | 'skipped'> {
  const [row] = await deps.query<Omit<PollTarget, 'trackedAt'> & { created_at: Date }>(
    `SELECT request_id AS "requestId", nu_proposta AS "nuProposta", status, poll_attempts AS "pollAttempts", stale,
       created_at FROM averbacoes WHERE request_id = $1`,
    [requestId],
  );
  // Gone: nothing to do, and no next job.
  if (row === undefined) return 'skipped';
  const { created_at, ...tracked } = row;
  const target: PollTarget = { ...tracked, trackedAt: created_at.getTime() };
  const start = pollStart(target, deps.now().getTime(), deps.schedule);
  if (start.action === 'skip') return 'skipped';
  if (start.action === 'stale') {
    await markStale(deps, requestId, start.log);
    return 'stale';
  }
  const answer: PollAnswer = await deps.client.requestStatus(requestId).then(
    (a) => ({ ok: true, status: a.status, raw: a.raw }),
    (error: unknown) => ({ ok: false, error }),
  );
  const now = deps.now();
  const random = deps.random ?? Math.random;
  let d = decidePoll(target, answer, now.getTime(), deps.schedule, random);
  try {
    await recordPoll(deps, requestId, d, now);
  } catch (error) {
    // A record alone that fails: PostgreSQL is away, the job fails and pg-boss runs it again.
    if (d.event === null) throw error;
    d = refusedAnswer(target, error, now.getTime(), deps.schedule, random);
    await recordPoll(deps, requestId, d, now);
  }
  if (d.log) deps.logger[d.log.level](d.log.fields, d.log.message);
  if (d.stale) await markStale(deps, requestId, d.stale);
  deps.onPoll?.(d.outcome);
  return d.outcome;
}

/** In one transaction: the answer (with its turn) if any, the row's poll fields, the next poll's job. */
async function recordPoll(deps: PollJobDeps, requestId: string, d: PollDecision, now: Date): Promise<void> {
  const next = d.record.nextPollAt === null ? null : new Date(d.record.nextPollAt);
  await deps.transaction(async (sql) => {
    if (d.event) {
      // Before the first write (postgres/pg-locks.ts): the answer's turn cannot be absorbed by one that
      // started without it.
      await holdKeys(sql, [d.event.workKey]);
      await storeAnswer(sql, deps, d.event, now);
    }
    const updated = await sql.query<{ polling: boolean }>(RECORD_POLL, [
      requestId,
      d.record.attempts,
      next?.toISOString() ?? null,
      now.toISOString(),
      d.record.outcome,
    ]);
    if (next !== null && updated[0]?.polling) await deps.schedulePoll(sql, requestId, next);
  });
}

/** The poll answer as an event (PostgreSQL's upsert: `xmax = 0` tells a new row from a duplicate). */
async function storeAnswer(sql: PgSql, deps: PollJobDeps, event: PollEvent, now: Date): Promise<void> {
  const body = Buffer.from(event.body);
  const stored = await sql.query<{ id: string; inserted: boolean }>(
    `INSERT INTO events AS e (dedup_key, kind, request_id, registry_status, received_at, body, body_bytes, status)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending')
     ON CONFLICT (dedup_key) DO UPDATE SET duplicates = e.duplicates + 1, last_duplicate_at = excluded.received_at
     RETURNING e.id, (e.xmax = 0) AS inserted`,
    [event.dedupKey, event.kind, event.requestId, event.registryStatus, now.toISOString(), body, body.length],
  );
  if (stored[0]?.inserted) await deps.queueTurns(sql, [event.workKey]);
}

async function markStale(deps: PollJobDeps, requestId: string, log: PollLog): Promise<void> {
  await deps.query(MARK_STALE, [requestId, deps.now().toISOString()]);
  deps.onPoll?.('stale');
  deps.logger[log.level](log.fields, log.message);
}
