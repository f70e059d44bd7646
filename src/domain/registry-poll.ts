import { canonicalNuProposta } from './normalize';
import {
  classifyPollError,
  isFinalRegistryStatus,
  isRegistryStatus,
  isStale,
  nextPollAt,
  type PollOutcome,
  type PollScheduleOptions,
} from './registry';

/**
 * Every decision of one registry poll (interface §4.3: the status query is the fallback when the
 * registry webhook is late), for both stores: SQLite mode's poller (runtime/single/poller.ts) and cluster
 * mode's poll job (runtime/cluster/poll-job.ts) load the registration, call these, and apply what they
 * return: the event to store, the row's new schedule, whether it went stale, the log line. Pure: the
 * clock and the jitter's random are passed in.
 */

/** A tracked registration as a poll reads it, whichever store loaded it. */
export interface PollTarget {
  readonly requestId: string;
  readonly nuProposta: number | string | null;
  readonly status: string;
  readonly pollAttempts: number;
  readonly stale: boolean;
  /** When tracking began (`created_at`), ms since the epoch: the age that makes it stale counts from it. */
  readonly trackedAt: number;
}

/** One log line, the same in both modes: the store writes it as `logger[level](fields, message)`. */
export interface PollLog {
  readonly level: 'warn' | 'error';
  readonly fields: Readonly<Record<string, unknown>>;
  readonly message: string;
}

export const POLL_STALE_MESSAGE =
  'averbação still not final after REGISTRY_POLL_MAX_AGE_MS: marked stale, polling stopped; check it with the service';
export const POLL_REFUSED_MESSAGE = 'registry poll refused: check SERVICE_* credentials';
export const POLL_RETRY_MESSAGE = 'registry poll failed: will retry';

/** How much of a failure's message the row's `last_poll_outcome` and the log line keep. */
const DETAIL_CHARS = 200;

/**
 * Before the query: `skip` a registration that is final (the webhook won) or stale already (nothing
 * to do, and no next poll), mark one `stale` that is past REGISTRY_POLL_MAX_AGE_MS, else `poll`.
 */
export function pollStart(
  t: PollTarget,
  now: number,
  o: PollScheduleOptions,
): { action: 'skip' } | { action: 'stale'; log: PollLog } | { action: 'poll' } {
  if (t.stale || (isRegistryStatus(t.status) && isFinalRegistryStatus(t.status))) return { action: 'skip' };
  if (isStale(t.trackedAt, now, o)) return { action: 'stale', log: staleLog(t) };
  return { action: 'poll' };
}

/** The line an operator acts on when a registration is marked stale (the same wherever it happens). */
export function staleLog(t: PollTarget): PollLog {
  return {
    level: 'error',
    fields: {
      request_id: t.requestId,
      // SQLite keeps a numeric nu_proposta as a number, PostgreSQL as text: logged in one form.
      nu_proposta: typeof t.nuProposta === 'string' ? canonicalNuProposta(t.nuProposta) : t.nuProposta,
      status: t.status,
      polls: t.pollAttempts,
      since: new Date(t.trackedAt).toISOString(),
    },
    message: POLL_STALE_MESSAGE,
  };
}

/** What the status query gave: the service's answer, or what it threw. */
export type PollAnswer =
  | { readonly ok: true; readonly status: string; readonly raw: unknown }
  | { readonly ok: false; readonly error: unknown };

/**
 * A poll answer as an event of kind `poll`: the dedup key `poll:<requestId>:<status>` makes the same
 * answer twice one event (counted as a duplicate), and the pipeline applies it as it applies a
 * registry webhook, so whichever brings the final status first wins.
 */
export interface PollEvent {
  readonly dedupKey: string;
  readonly kind: 'poll';
  readonly requestId: string;
  readonly registryStatus: string;
  /** The service's answer as it came (or the two fields that matter, when it carried no body). */
  readonly body: string;
  /** The work key the event is processed under: poll answers carry no nu_proposta (domain/work-key.ts). */
  readonly workKey: string;
}

export interface PollDecision {
  /** As the metrics count it (`consig_registry_polls_total{outcome}`). */
  readonly outcome: PollOutcome;
  /** The answer to store; null when the query failed. */
  readonly event: PollEvent | null;
  /** The row's new poll fields. A final status landed meanwhile keeps `nextPollAt` off (the SQL does). */
  readonly record: {
    readonly attempts: number;
    /** ms since the epoch; null: no next poll (the answer is final, or the deadline is reached). */
    readonly nextPollAt: number | null;
    /** `last_poll_outcome`: the outcome, and the answer's status or the failure's message. */
    readonly outcome: string;
  };
  /** The deadline passed without a final answer: mark the registration stale, with this line. */
  readonly stale: PollLog | null;
  /** The failure's line (an `error` for credentials, a `warn` otherwise); null on an answer. */
  readonly log: PollLog | null;
}

/**
 * What one poll's answer does, after the query (`now` read then):
 * - an answer is stored as a `poll` event; a final one stops polling;
 * - a failure is classified (domain/registry.ts classifyPollError) and logged; polling goes on;
 * - the next poll backs off exponentially with jitter (a 429 waits at least its Retry-After), and
 *   when the registration's age reaches REGISTRY_POLL_MAX_AGE_MS there is none: it is stale.
 */
export function decidePoll(
  t: PollTarget,
  answer: PollAnswer,
  now: number,
  o: PollScheduleOptions,
  random: () => number,
): PollDecision {
  const attempts = t.pollAttempts + 1;
  const failure = answer.ok ? null : classifyPollError(answer.error);
  const outcome: PollOutcome = failure?.outcome ?? 'ok';
  const detail = answer.ok ? answer.status : failure!.message.slice(0, DETAIL_CHARS);
  const final = answer.ok && isRegistryStatus(answer.status) && isFinalRegistryStatus(answer.status);
  const next = final ? null : nextPollAt(t.trackedAt, now, attempts, o, random, failure?.retryAfterMs ?? 0);
  const fields = { request_id: t.requestId, outcome, attempts, err: detail };
  return {
    outcome,
    event: answer.ok ? pollEvent(t.requestId, answer.status, answer.raw) : null,
    record: { attempts, nextPollAt: next, outcome: detail ? `${outcome}:${detail}` : outcome },
    stale: next === null && !final ? staleLog({ ...t, pollAttempts: attempts }) : null,
    log:
      failure === null
        ? null
        : outcome === 'unauthorized'
          ? { level: 'error', fields, message: POLL_REFUSED_MESSAGE }
          : { level: 'warn', fields, message: POLL_RETRY_MESSAGE },
  };
}

/**
 * An answer the store refused to keep (its event not written: a full disk, a constraint, a
 * statement PostgreSQL rejected) counts as a failed poll, in both modes: its attempt is recorded and
 * the next poll backs off by the schedule, rather than the same query going out again at once
 * (SQLite's next tick, pg-boss's retry of the job). A store that cannot record even that is away:
 * then the poll is its engine's to try again (the next tick; the job's retry).
 */
export function refusedAnswer(
  t: PollTarget,
  error: unknown,
  now: number,
  o: PollScheduleOptions,
  random: () => number,
): PollDecision {
  return decidePoll(t, { ok: false, error }, now, o, random);
}

function pollEvent(requestId: string, status: string, raw: unknown): PollEvent {
  return {
    dedupKey: `poll:${requestId}:${status}`,
    kind: 'poll',
    requestId,
    registryStatus: status,
    body: JSON.stringify(raw ?? { requestId, status }),
    workKey: `r:${requestId}`,
  };
}
