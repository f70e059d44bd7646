import {
  classifyPollError,
  isFinalRegistryStatus,
  isRegistryStatus,
  isStale,
  nextPollAt,
  type PollOutcome,
  type PollScheduleOptions,
} from '../domain/registry';
import { holdKeys } from './kick-lock';
import type { Sql } from './sql';

/**
 * A registry poll as a scheduled pg-boss job (cluster mode; the SQLite poller is
 * src/registry/poller.ts): one job per registration that is not final (`r:<requestId>`, policy
 * stately), so exactly one replica polls it. The job is not transactional: the status query is an
 * HTTP call and must not hold a transaction open. After it, one transaction stores the answer as a
 * `poll` event (dedup key `poll:<requestId>:<status>`, as in SQLite mode) with a kick for its work
 * key, records the poll, and schedules the next one unless the answer is final or the registration
 * went stale. A replica that dies mid-poll: the job runs again elsewhere; the repeated GET is
 * harmless and its answer deduplicates.
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
  transaction<T>(fn: (sql: Sql) => Promise<T>): Promise<T>;
  query: Sql['query'];
  kick(sql: Sql, keys: readonly string[]): Promise<void>;
  schedulePoll(sql: Sql, requestId: string, at: Date): Promise<void>;
  onPoll?(outcome: PollOutcome): void;
  logger: {
    warn(fields: Record<string, unknown>, message: string): void;
    error(fields: Record<string, unknown>, message: string): void;
  };
}

interface Tracked {
  request_id: string;
  nu_proposta: string | null;
  status: string;
  poll_attempts: number;
  stale: boolean;
  created_at: Date;
}

export async function runPollJob(requestId: string, deps: PollJobDeps): Promise<PollOutcome | 'skipped'> {
  const rows = await deps.query<Tracked>(
    'SELECT request_id, nu_proposta, status, poll_attempts, stale, created_at FROM averbacoes WHERE request_id = $1',
    [requestId],
  );
  const row = rows[0];
  // Final (the webhook won) or stale already: nothing to do, and no next job.
  if (!row || row.stale || (isRegistryStatus(row.status) && isFinalRegistryStatus(row.status)))
    return 'skipped';
  const trackedAt = row.created_at.getTime();
  if (isStale(trackedAt, deps.now().getTime(), deps.schedule)) {
    await markStale(deps, row);
    return 'stale';
  }
  const attempts = row.poll_attempts + 1;
  let outcome: PollOutcome = 'ok';
  let detail = '';
  let retryAfterMs = 0;
  let answer: { status: string; raw: unknown } | null = null;
  try {
    answer = await deps.client.requestStatus(requestId);
    detail = answer.status;
  } catch (err) {
    const c = classifyPollError(err);
    outcome = c.outcome;
    retryAfterMs = c.retryAfterMs;
    detail = c.message.slice(0, 200);
    const log = { request_id: requestId, outcome, attempts, err: detail };
    if (outcome === 'unauthorized')
      deps.logger.error(log, 'registry poll refused: check SERVICE_* credentials');
    else deps.logger.warn(log, 'registry poll failed: will retry');
  }
  const final = answer !== null && isRegistryStatus(answer.status) && isFinalRegistryStatus(answer.status);
  const now = deps.now();
  const next = final
    ? null
    : nextPollAt(trackedAt, now.getTime(), attempts, deps.schedule, deps.random ?? Math.random, retryAfterMs);
  await deps.transaction(async (sql) => {
    if (answer !== null) {
      // Before the first write (kick-lock.ts): the answer's kick cannot be absorbed by one that
      // started without it.
      await holdKeys(sql, [pollWorkKey(row.request_id)]);
      await storeAnswer(sql, deps, row, answer, now);
    }
    // A final result (from the webhook) that landed while the poll was in flight keeps polling off.
    const updated = await sql.query<{ polling: boolean }>(
      `UPDATE averbacoes SET poll_attempts = $2,
         next_poll_at = CASE WHEN status IN ('completed', 'error') OR stale THEN NULL ELSE $3::timestamptz END,
         last_poll_at = $4, last_poll_outcome = $5, updated_at = $4
       WHERE request_id = $1 RETURNING next_poll_at IS NOT NULL AS polling`,
      [
        requestId,
        attempts,
        next === null ? null : new Date(next).toISOString(),
        now.toISOString(),
        detail ? `${outcome}:${detail}` : outcome,
      ],
    );
    if (next !== null && updated[0]?.polling) await deps.schedulePoll(sql, requestId, new Date(next));
  });
  if (next === null && !final) await markStale(deps, { ...row, poll_attempts: attempts });
  deps.onPoll?.(outcome);
  return outcome;
}

async function storeAnswer(
  sql: Sql,
  deps: PollJobDeps,
  row: Tracked,
  answer: { status: string; raw: unknown },
  now: Date,
): Promise<void> {
  const body = Buffer.from(
    JSON.stringify(answer.raw ?? { requestId: row.request_id, status: answer.status }),
  );
  const stored = await sql.query<{ id: string; inserted: boolean }>(
    `INSERT INTO events AS e (dedup_key, kind, request_id, registry_status, received_at, body, body_bytes, status)
     VALUES ($1, 'poll', $2, $3, $4, $5, $6, 'pending')
     ON CONFLICT (dedup_key) DO UPDATE SET duplicates = e.duplicates + 1, last_duplicate_at = excluded.received_at
     RETURNING e.id, (e.xmax = 0) AS inserted`,
    [
      `poll:${row.request_id}:${answer.status}`,
      row.request_id,
      answer.status,
      now.toISOString(),
      body,
      body.length,
    ],
  );
  if (stored[0]?.inserted) await deps.kick(sql, [pollWorkKey(row.request_id)]);
}

/** Poll answers carry no nu_proposta: their work key is the registration's (pipeline.workKey()). */
function pollWorkKey(requestId: string): string {
  return `r:${requestId}`;
}

async function markStale(deps: PollJobDeps, row: Tracked): Promise<void> {
  await deps.query(
    'UPDATE averbacoes SET stale = true, next_poll_at = NULL, updated_at = $2 WHERE request_id = $1',
    [row.request_id, deps.now().toISOString()],
  );
  deps.onPoll?.('stale');
  deps.logger.error(
    {
      request_id: row.request_id,
      nu_proposta: row.nu_proposta,
      status: row.status,
      polls: row.poll_attempts,
      since: row.created_at.toISOString(),
    },
    'averbação still not final after REGISTRY_POLL_MAX_AGE_MS: marked stale, polling stopped; check it with the service',
  );
}
