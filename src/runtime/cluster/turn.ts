import { type EffectsEnv, type EffectsLogger, proposalKey } from '../../core/effects';
import { drive, eventStep, type StepReport, stepOptionsOf, tellFailure } from '../../core/event-step';
import type { ProposalStatus } from '../../domain/lifecycle';
import { canonicalNu, postgresDialect } from '../../domain/sql/dialect';
import type { Traces } from '../../domain/tracing';
import type { EventFacts } from '../../domain/event-effects';
import type { OutboxEntry } from '../../domain/forwarding/messages';
import { type EventHandler, type HandlerEvent, handlerEventOf, type Router } from '../../domain/event-router';
import { lockKeys, lockOrder } from '../../postgres/pg-locks';
import { type OutboxOptions, storeOutbox } from '../../postgres/pg-outbox';
import { type ClusterLogger, type PgSql } from '../../postgres/pg-sql';
import { Aborted, type Done, pgStepOps, type SchedulePoll } from '../../postgres/pg-step-ops';
import { currentWatermark, DEFAULT_HOLDBACK_MAX_MS, hold, type Hold } from './pg-watermark';

/**
 * A turn: processes one work key's due events in order time (`order_at`: PostgreSQL's clock when a
 * replica acknowledged each, as that replica estimated it, issue 36; `received_at` for an event
 * without one), those at or below the watermark only (docs/cluster.md §10: a key's events wait
 * until every relay has moved past them; the first one above it is held, watermark.ts), inside the
 * transaction pg-boss opened for the turn and commits with the turn's completion (docs/cluster.md
 * §5.2). An event's effects and its `done` mark commit together, or, when a handler throws, roll
 * back together while the failure itself is recorded (attempts, backoff, dead letter). So an
 * event's effects happen once however often a turn runs, and a turn that dies before its commit
 * leaves its events pending for the next one. How a batch of turns gets there in few statements:
 * {@link runTurns}.
 *
 * The turn lock (postgres/pg-locks.ts) makes two turns of one key never overlap even if the engine's
 * one-active-per-key rule were ever broken (a claim that expired while its turn was still running),
 * and makes a turn wait for any transaction still adding events to its keys.
 */

/** Events per queueTurns: a key with more is queued again in the same transaction. */
export const TURN_BATCH = 64;

/** What a turn runs with: core/effects.ts's poll schedule, the step's settings, the clock, the queues. */
export interface TurnOptions extends Pick<EffectsEnv, 'schedule'> {
  maxAttempts: number;
  backoff: { baseMs: number; maxMs: number };
  random?: () => number;
  /** Re-queues the key (more events waiting, or a retry due at `startAfter`), in `sql`'s transaction. */
  queueTurns(sql: PgSql, keys: readonly string[], startAfter?: Date): Promise<void>;
  /** Queues a registration's first poll in `sql`'s transaction (postgres/pg-queues.ts `schedulePoll`). */
  schedulePoll: SchedulePoll;
  now(): Date;
  onProcessed?(evento: string, outcome: 'done' | 'retry' | 'dead'): void;
  onError?(error: Error, event: EventFacts): void;
  logger: ClusterLogger;
  /** Forwarding and the change feed: the messages each event causes are stored with its effects. */
  outbox?: OutboxOptions;
  /** A partner's own handlers (`configureHandlers`), awaited after the built-in effects. */
  handlers?: Router<EventHandler> | undefined;
  /** CLUSTER_HOLDBACK_MAX_MS (watermark.ts). @default DEFAULT_HOLDBACK_MAX_MS */
  holdbackMaxMs?: number;
  /**
   * Tracing (issue 35): each event runs in a span continuing its delivery's trace, a child per stage.
   * @default undefined (off)
   */
  traces?: Traces | undefined;
}

interface EventRow {
  id: string;
  kind: EventFacts['kind'];
  evento: string | null;
  nu_proposta: string | null;
  request_id: string | null;
  registry_status: string | null;
  body: Buffer | null;
  received_at: Date;
  /** coalesce(order_at, received_at): what the event is ordered by (migrations-pg/0008). */
  order_at: Date;
  status: string;
  attempts: number;
  next_attempt_at: Date | null;
  webhook_id: string | null;
  dedup_key: string;
  tentativa: number | null;
  trace_context: string | null;
}

const EVENT_COLUMNS = `id, kind, evento, nu_proposta, request_id, registry_status, body, received_at,
  coalesce(order_at, received_at) AS order_at, status, attempts, next_attempt_at, webhook_id, dedup_key, tentativa,
  trace_context`;

const BY_ORDER_TIME = `ORDER BY coalesce(order_at, received_at), id LIMIT ${TURN_BATCH}`;

/*
 * The statements an event runs are prepared (pg-sql.ts `prepared`): the event step's
 * (core/event-step.ts) and the effects'. Those a batch runs once are sent as plain text, planned at
 * each run: a generic plan made while a table is still small (a new database) is kept by the
 * connection until the table is next analysed, and for an `= ANY` or an `unnest` join it is a
 * sequential scan. test/integration/cluster-turn-batch.test.ts checks the generic plans of the
 * prepared ones.
 */

/** The events a batch finished, each with the time it ran (processed_at), in one statement. */
const DONE_ALL = `UPDATE events SET status = 'done', attempts = events.attempts + 1, processed_at = d.at,
  next_attempt_at = NULL, last_error = NULL FROM unnest($1::bigint[], $2::timestamptz[]) AS d(id, at)
  WHERE events.id = d.id`;

/** Which events each kind of work key selects, as domain/work-key.ts derives the keys. */
const KEY_CONDITION = {
  p: { type: 'text', where: 'nu_proposta = k.v', limit: BY_ORDER_TIME },
  r: { type: 'text', where: 'nu_proposta IS NULL AND request_id = k.v', limit: BY_ORDER_TIME },
  e: { type: 'bigint', where: 'id = k.v', limit: '' },
} as const;

/**
 * Each key's due events, up to TURN_BATCH, for the kinds of keys the batch has (parameter $n is
 * the array of the n-th kind's values): `slot` is the key's place in its array.
 */
function dueSql(kinds: readonly (keyof typeof KEY_CONDITION)[]): string {
  return kinds
    .map((kind, i) => {
      const c = KEY_CONDITION[kind];
      return `SELECT '${kind}' AS kind_of_key, k.slot, e.* FROM unnest($${i + 1}::${c.type}[]) WITH ORDINALITY AS k(v, slot)
        CROSS JOIN LATERAL (SELECT ${EVENT_COLUMNS} FROM events
          WHERE ${c.where} AND status IN ('pending', 'failed') ${c.limit}) e`;
    })
    .join('\nUNION ALL\n');
}

/** A work key, as domain/work-key.ts derives it: which events it selects. */
interface Key {
  key: string;
  kind: 'p' | 'r' | 'e';
  value: string;
}

function parseKey(key: string): Key {
  const value = key.slice(2);
  if (key.startsWith('p:')) return { key, kind: 'p', value };
  if (key.startsWith('r:')) return { key, kind: 'r', value };
  if (key.startsWith('e:') && /^\d+$/.test(value)) return { key, kind: 'e', value };
  throw new Error(`not a work key: ${key}`);
}

/** What a batch of turns loaded: each key's due events in order time, and the watermark read before them. */
interface Work {
  keys: { key: string; rows: EventRow[] }[];
  /** null: no relay has published a heartbeat, nothing to wait for. */
  watermark: Date | null;
}

/** The order a turn runs events in: order time (PostgreSQL's clock, as estimated), then id. */
function byReceipt(a: EventRow, b: EventRow): number {
  return a.order_at.getTime() - b.order_at.getTime() || Number(a.id) - Number(b.id);
}

/**
 * Locks the keys (postgres/pg-locks.ts), reads the watermark and loads each key's due events, three
 * statements for the whole batch. The load is a statement of its own, after the lock: its snapshot
 * then sees whatever an earlier turn of the same keys, or a producer of their events, committed;
 * and after the watermark: every event at or below it is committed by then. An event is taken
 * once, by the first key that selects it.
 */
async function loadWork(sql: PgSql, keys: readonly string[], maxMs: number): Promise<Work> {
  const sorted = lockOrder(keys);
  const parsed = sorted.map(parseKey);
  if (parsed.length === 0) return { keys: [], watermark: null };
  await lockKeys(sql, sorted);
  const { at: watermark } = await currentWatermark(sql, maxMs);
  const kinds = (['p', 'r', 'e'] as const).filter((kind) => parsed.some((k) => k.kind === kind));
  const byKind = new Map(kinds.map((kind) => [kind, parsed.filter((k) => k.kind === kind)]));
  const rows = await sql.query<EventRow & { kind_of_key: Key['kind']; slot: string }>(
    dueSql(kinds),
    kinds.map((kind) => (byKind.get(kind) as Key[]).map((k) => k.value)),
  );
  const work = new Map<string, EventRow[]>(parsed.map((k) => [k.key, []]));
  const seen = new Set<string>();
  for (const { kind_of_key: kind, slot, ...row } of rows) {
    if (seen.has(row.id)) continue;
    seen.add(row.id);
    work.get((byKind.get(kind)?.[Number(slot) - 1] as Key).key)?.push(row);
  }
  for (const list of work.values()) list.sort(byReceipt);
  return { keys: [...work].map(([key, list]) => ({ key, rows: list })), watermark };
}

/**
 * Processes each key's due events, in one transaction (a batch of turns pg-boss handed one
 * worker). The messages they cause are stored last, once for the batch: the outbox's lock
 * (pg-outbox.ts) is then held only for those inserts and the commit, never while events run.
 *
 * Two passes of one loop ({@link runPass}), so that a savepoint per event is paid only when an
 * event fails:
 * - first, fast: every event runs under one savepoint for the batch, their proposals loaded and
 *   locked at once, their `done` marks written together at the end;
 * - if any event throws, the batch is rolled back to that savepoint, as if it had never run, and
 *   runs again careful, event by event, each in a savepoint of its own: the failure is recorded
 *   for that event alone, without running it again (its attempt is the one that threw, told once
 *   to `onError`), and the others commit.
 * A batch with an event a partner's handler runs for goes event by event from the start: running
 * the batch again would run that handler twice for an event that succeeded, and what it does outside
 * `sql` (a counter, a call) would happen twice.
 * Either way an event's effects and its `done` mark commit together, or not at all.
 */
export async function runTurns(sql: PgSql, keys: readonly string[], options: TurnOptions): Promise<number> {
  const work = await loadWork(sql, keys, options.holdbackMaxMs ?? DEFAULT_HOLDBACK_MAX_MS);
  const first = await runPass(sql, work, options, partnerWork(work, options) ? { threw: null } : null);
  // The careful pass runs the batch again from the start, holds included, and never ends early.
  const pass = ('error' in first ? await runPass(sql, work, options, { threw: first }) : first) as Pass;
  await hold(sql, pass.holds);
  await storeOutbox(sql, pass.outbox);
  return pass.finished;
}

/** The event that threw in the fast pass, and what it threw. */
interface Threw {
  id: string;
  error: Error;
}

/** What a pass kept: the events it finished (done or dead), the keys it held, the messages. */
interface Pass {
  finished: number;
  holds: Hold[];
  outbox: OutboxEntry[];
}

/**
 * One pass over the batch ({@link runTurns}). Fast (`careful` null): under the batch's savepoint;
 * log lines, metrics, messages and done marks kept until the pass is, so that a pass run again
 * counts once; the first event that throws ends it, returned (the savepoint is then rolled back, and
 * nothing of the pass remains). Careful: each event in a savepoint of its own, told at once; what
 * `careful.threw` threw in the fast pass is that event's attempt, recorded without running it again.
 */
async function runPass(
  sql: PgSql,
  work: Work,
  options: TurnOptions,
  careful: { threw: Threw | null } | null,
): Promise<Pass | Threw> {
  const facts = new Map(
    work.keys.flatMap((w) =>
      w.rows.filter((r) => below(r, work.watermark)).map((row) => [row.id, toFacts(row)] as const),
    ),
  );
  const pass: Pass = { finished: 0, holds: [], outbox: [] };
  if (facts.size === 0) return { ...pass, holds: heldOf(work) };
  const later: (() => void)[] = [];
  const tell = careful === null ? (f: () => void) => void later.push(f) : (f: () => void) => f();
  const logger: EffectsLogger = {
    info: (fields, message) => tell(() => options.logger.info(fields, message)),
    warn: (fields, message) => tell(() => options.logger.warn(fields, message)),
  };
  let env: Omit<EffectsEnv, 'now'> = { schedule: options.schedule, dialect: postgresDialect, logger };
  const done: Done[] | undefined = careful === null ? [] : undefined;
  if (careful === null) {
    await sql.query('SAVEPOINT consig_batch');
    const nus = [...new Set([...facts.values()].map(proposalKey).filter((nu) => nu !== null))];
    env = { ...env, ...(await lockProposals(sql, nus)) };
  }
  const [step, ops] = [stepOptionsOf(options, options.handlers), pgStepOps(sql, options, pass.outbox, done)];
  let threw: Threw | null = null;
  await eachInOrder(sql, work, options, pass.holds, async (row, now, key) => {
    const event = facts.get(row.id) as HandlerEvent;
    const e = {
      event,
      traceContext: row.trace_context,
      threw: careful?.threw?.id === row.id ? careful.threw.error : undefined,
    };
    const kept = pass.outbox.length;
    let report: StepReport;
    try {
      report = await drive(eventStep(e, { ...env, now }, step), ops);
    } catch (err) {
      if (!(err instanceof Aborted)) throw err;
      threw = { id: row.id, error: err.error };
      return 'abort';
    }
    tell(() => options.onProcessed?.(event.evento ?? event.kind, report.outcome));
    if (report.outcome !== 'done') {
      pass.outbox.length = kept; // its messages roll back with its work
      const { failure } = report;
      tell(() => tellFailure(failure, event, options));
      // A dead letter no longer holds its proposal back.
      if (failure.nextAttemptAt !== null) return retryLater(sql, options, key, failure.nextAttemptAt);
    }
    pass.finished += 1;
    return 'next';
  });
  if (careful !== null) return pass;
  if (threw !== null) {
    await sql.query('ROLLBACK TO SAVEPOINT consig_batch');
    await sql.query('RELEASE SAVEPOINT consig_batch');
    return threw;
  }
  if (done!.length > 0) await sql.query(DONE_ALL, [done!.map((d) => d.id), done!.map((d) => d.at)]);
  await sql.query('RELEASE SAVEPOINT consig_batch');
  for (const f of later) f();
  return pass;
}

type Step = 'next' | 'stop' | 'abort';

/** Whether the watermark has reached `row` (null: no relay to wait for). */
function below(row: EventRow, watermark: Date | null): boolean {
  return watermark === null || row.order_at.getTime() <= watermark.getTime();
}

/** Each key's first event above the watermark: the key is held until the watermark reaches it. */
function heldOf(work: Work): Hold[] {
  return work.keys.flatMap(({ key, rows }) => {
    const first = rows.find((r) => !below(r, work.watermark));
    return first === undefined ? [] : [{ key, until: first.order_at }];
  });
}

/**
 * Runs `step` on the batch's events in received_at order across its keys: the order the replicas
 * acknowledged them, SQLite mode's order, so that an event of one key never runs before an earlier
 * event of another key in the same batch (a registry result before its proposal's next event). A
 * key stops at its first event above the watermark (pushed to `holds`), at a retry not due yet (it
 * holds its proposal's later events back, and is queued again when due), and at the first step that
 * says 'stop' (a failure to retry later); 'abort' ends the whole batch. Each key that stopped
 * nowhere and loaded a full batch is queued again.
 */
async function eachInOrder(
  sql: PgSql,
  work: Work,
  options: TurnOptions,
  holds: Hold[],
  step: (row: EventRow, now: Date, key: string) => Promise<Step>,
): Promise<void> {
  const all = work.keys.flatMap(({ key, rows }) => rows.map((row) => ({ key, row })));
  all.sort((a, b) => byReceipt(a.row, b.row));
  const stopped = new Set<string>();
  for (const { key, row } of all) {
    if (stopped.has(key)) continue;
    if (!below(row, work.watermark)) {
      holds.push({ key, until: row.order_at });
      stopped.add(key);
      continue;
    }
    const now = options.now();
    const next = notDue(row, now)
      ? await retryLater(sql, options, key, row.next_attempt_at as Date)
      : await step(row, now, key);
    if (next === 'abort') return;
    if (next === 'stop') stopped.add(key);
  }
  const full = work.keys.filter((w) => w.rows.length === TURN_BATCH && !stopped.has(w.key)).map((w) => w.key);
  if (full.length > 0) await options.queueTurns(sql, full);
}

/** Whether a partner's handler would run for an event of the batch that the watermark has reached. */
function partnerWork(work: Work, options: TurnOptions): boolean {
  const handlers = options.handlers;
  if (handlers === undefined || handlers.empty) return false;
  return work.keys.some((w) =>
    w.rows.some((r) => below(r, work.watermark) && handlers.handlersFor(r).length > 0),
  );
}

/** A retry not due yet holds its proposal's later events back (order), until then. */
function notDue(row: EventRow, now: Date): boolean {
  return row.next_attempt_at !== null && row.next_attempt_at.getTime() > now.getTime();
}

/** `key` queued again at `at` (a retry's time), and stopped in this turn. */
async function retryLater(sql: PgSql, options: TurnOptions, key: string, at: Date | string): Promise<Step> {
  await options.queueTurns(sql, [key], new Date(at));
  return 'stop';
}

function toFacts(row: EventRow): HandlerEvent {
  return handlerEventOf({
    ...row,
    id: Number(row.id),
    nu_proposta: row.nu_proposta === null ? null : canonicalNu(row.nu_proposta),
    received_at: row.received_at.toISOString(),
  });
}

/**
 * Locks the proposals `nus` name (FOR UPDATE, in nu_proposta order) and returns their statuses,
 * null for a proposal with no row yet, and those whose personal data was erased: an
 * {@link EffectsEnv.statuses} and {@link EffectsEnv.erased} for a batch of events.
 */
async function lockProposals(
  sql: PgSql,
  nus: readonly string[],
): Promise<{ statuses: Map<string, ProposalStatus | null>; erased: Set<string> }> {
  const statuses = new Map<string, ProposalStatus | null>(nus.map((nu) => [nu, null]));
  const erased = new Set<string>();
  if (nus.length === 0) return { statuses, erased };
  // Plain text, planned at each run: a batch runs it once (the note on SQL above).
  const rows = await sql.query<{ nu_proposta: string; status: ProposalStatus; erased: boolean }>(
    `SELECT nu_proposta, status, personal_erased_at IS NOT NULL AS erased FROM proposals
     WHERE nu_proposta = ANY($1::text[]) ORDER BY nu_proposta FOR UPDATE`,
    [nus],
  );
  for (const r of rows) {
    statuses.set(r.nu_proposta, r.status);
    if (r.erased) erased.add(r.nu_proposta);
  }
  return { statuses, erased };
}
