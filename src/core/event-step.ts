import { registrationOf } from '../domain/event-effects';
import { type HandlerEvent, routeName, type Router } from '../domain/event-router';
import type { Destination } from '../domain/forwarding/destinations';
import { type OutboxEntry, outboxEntries, type ProcessedEvent } from '../domain/forwarding/messages';
import { asError, type HandlerFailure, handlerFailure } from '../domain/handler-failure';
import { type HandlerStage, stagesFor } from '../domain/handler-order';
import { effectsFrom, effectsParams, type EffectsRow, OUTBOX_EFFECTS } from '../domain/sql/outbox-effects';
import { erasedEvent } from '../domain/subject';
import { processingAttributes, processingName, type TraceAttributes, type Traces } from '../domain/tracing';
import { type EffectsEnv, type NamedStatement, type EffectStep, stageEffects } from './effects';

/**
 * The event step, written once for both stores (issue 33): what processing one loaded event does,
 * as a program that yields what it needs of its store — the built-in stages' statements
 * (effects.ts), the partner's handlers, the outbox's entries, the `done` mark — inside a savepoint
 * of its own; or, when anything of it throws, the savepoint rolled back and the failure recorded by
 * domain/handler-failure.ts's rule (retry later, or dead). It returns what became of the event.
 *
 * A store runs it with a driver ({@link driveSync}, {@link drive}) given its {@link StepOps}:
 * SQLite mode's turn synchronously on the pipeline's connection (an event a partner's async handler
 * handles runs on the async driver, in a transaction of its own: runtime/single/pipeline.ts); cluster
 * mode's turn awaited in pg-boss's transaction (runtime/cluster/turn.ts, whose fast pass runs a batch's
 * events under one savepoint, their done marks written together: its ops skip the per-event
 * savepoints, collect the done marks, and abort the pass at a rollback). What runs the events, and
 * when (the p-queue under the file lease; pg-boss turns under the watermark), stays each store's.
 */

/** What the step asks of its store beyond effects.ts's statements and first polls. */
export type StepRequest =
  | EffectStep
  /** The event's savepoint; `rollback` carries what threw (then the savepoint is released too). */
  | { readonly savepoint: 'set' | 'release' | 'rollback'; readonly error?: Error }
  /** The partner's handlers of the event, in order (stage `partner` of domain/handler-order.ts). */
  | { readonly partner: HandlerEvent; readonly now: Date }
  /** The messages the event causes, to store with its effects (contract §8). */
  | { readonly outbox: readonly OutboxEntry[] }
  /** `program` run inside a tracing span: the event's processing span, or a child for one stage. */
  | { readonly span: SpanRequest; readonly program: StepProgram<unknown> };

export type SpanRequest =
  | { readonly processing: string | null; readonly name: string; readonly attributes: TraceAttributes }
  | { readonly stage: HandlerStage };

/** A program of the step: yields requests, is given each one's answer (a statement's rows). */
export type StepProgram<R> = Generator<StepRequest, R, unknown>;

/** What became of the event: done, or its failure recorded. */
export type StepReport =
  { readonly outcome: 'done' } | { readonly outcome: 'retry' | 'dead'; readonly failure: HandlerFailure };

export interface StepOptions {
  readonly maxAttempts: number;
  readonly backoff: { readonly baseMs: number; readonly maxMs: number };
  readonly random: () => number;
  /** Forwarding and the change feed; null: nothing is read back or stored. */
  readonly outbox: { readonly destinations: readonly Destination[]; readonly feedEnabled: boolean } | null;
  /** Whether the partner stage has handlers for `event` (no span for a stage with nothing to run). */
  partnerFor(event: HandlerEvent): boolean;
  /** Whether to ask for spans (tracing on). */
  readonly traced: boolean;
}

/** One loaded event. */
export interface StepEvent {
  readonly event: HandlerEvent;
  /** Its delivery's trace context. */
  readonly traceContext: string | null;
  /** What this attempt already threw (cluster mode's careful pass): recorded, not run again. */
  readonly threw?: Error;
}

const statement = (name: string, text: string): NamedStatement => ({ name: `consig_step_${name}`, text });

/** The step's own statements, the same text on both stores. */
export const STEP_SQL = {
  // Its values in the order of their placeholders: SQLite binds them without a map.
  done: statement(
    'done',
    `UPDATE events SET status = 'done', attempts = attempts + 1, processed_at = $1, next_attempt_at = NULL,
       last_error = NULL WHERE id = $2`,
  ),
  // processed_at: when a dead letter died (a retry has none yet).
  failed: statement(
    'failed',
    `UPDATE events SET status = $2, attempts = $3, last_error = $4, next_attempt_at = $5, processed_at = $6
       WHERE id = $1`,
  ),
  outbox: { name: 'consig_outbox_effects', text: OUTBOX_EFFECTS, rowMode: 'array' } as NamedStatement,
  // An event of a proposal whose personal data was erased, stored erased (domain/subject.ts).
  erasedBody: statement('erased_body', 'UPDATE events SET body = $1 WHERE id = $2'),
} as const;

const SET = { savepoint: 'set' } as const;
const RELEASE = { savepoint: 'release' } as const;

/** The event step: its work and `done` mark in a savepoint, or its failure recorded. */
export function* eventStep(e: StepEvent, env: EffectsEnv, options: StepOptions): StepProgram<StepReport> {
  yield SET;
  try {
    if (e.threw !== undefined) throw e.threw;
    const work = eventWork(e.event, env, options);
    if (!options.traced) yield* work;
    else {
      const attributes = processingAttributes(e.event, e.traceContext !== null);
      const span = { processing: e.traceContext, name: processingName(e.event), attributes };
      yield { span, program: work };
    }
    yield RELEASE;
    return { outcome: 'done' };
  } catch (err) {
    const error = asError(err);
    yield { savepoint: 'rollback', error };
    const { event } = e;
    const failure = handlerFailure({ ...options, attempts: event.attempts, now: env.now, error, event });
    const at = env.now.toISOString();
    const { status, attempts, lastError, nextAttemptAt } = failure;
    const diedAt = status === 'dead' ? at : null;
    yield {
      statement: STEP_SQL.failed,
      params: [event.id, status, attempts, lastError, nextAttemptAt, diedAt],
    };
    return { outcome: failure.outcome, failure };
  }
}

/**
 * Every stage of domain/handler-order.ts that handles the event, then its `done` mark. When the life
 * cycle finds the proposal's personal data erased (issue 45), the event is erased too, stored so,
 * and the later stages see it so.
 */
function* eventWork(received: HandlerEvent, env: EffectsEnv, options: StepOptions): StepProgram<void> {
  let event = received;
  for (const stage of stagesOf(event)) {
    if (stage === 'partner' && !options.partnerFor(event)) continue;
    // Nor a registry stage with nothing to do (most events carry no requestId).
    if (
      (stage === 'registry_tracking' || stage === 'registry_results') &&
      registrationOf(stage, event) === null
    )
      continue;
    // No forwarding stage (and no span for it) when no message is made: no destination, no feed.
    if (stage === 'forwarding' && !makesMessages(options.outbox)) continue;
    if (stage === 'partner' && !options.traced) yield { partner: event, now: env.now };
    else {
      const work: StepProgram<boolean | undefined | void> =
        stage === 'partner'
          ? partnerWork(event, env.now)
          : stage === 'forwarding'
            ? forwardingWork(event, env, options)
            : stageEffects(stage, event, env);
      const erased = options.traced ? yield { span: { stage }, program: work } : yield* work;
      if (erased === true && event.rawBody !== null) {
        event = erasedEvent(event);
        yield { statement: STEP_SQL.erasedBody, params: [env.dialect.body(event.rawBody!), event.id] };
      }
    }
  }
  yield { statement: STEP_SQL.done, params: [env.now.toISOString(), event.id] };
}

function* partnerWork(event: HandlerEvent, now: Date): StepProgram<void> {
  yield { partner: event, now };
}

/** {@link stagesFor}, once per route (an event name, or `registry`): the pipeline asks per event. */
const STAGES = new Map<string, readonly HandlerStage[]>();
function stagesOf(event: HandlerEvent): readonly HandlerStage[] {
  const route = routeName(event);
  let stages = STAGES.get(route);
  if (stages === undefined) {
    stages = stagesFor(event);
    // Bounded: an unknown `evento` is never processed (it is stored `ignored`), but a route is a string.
    if (STAGES.size < 256) STAGES.set(route, stages);
  }
  return stages;
}

/** Whether the outbox makes messages at all: a destination, or the change feed. */
function makesMessages(outbox: StepOptions['outbox']): boolean {
  return outbox !== null && (outbox.destinations.length > 0 || outbox.feedEnabled);
}

/** The outbox (contract §8): what the event left behind, read back, and the messages it causes. */
function* forwardingWork(event: HandlerEvent, env: EffectsEnv, options: StepOptions): StepProgram<void> {
  const { outbox } = options;
  if (outbox === null) return;
  const processed = processedOf(event);
  const [row] = (yield { statement: STEP_SQL.outbox, params: effectsParams(processed) }) as EffectsRow[];
  if (row === undefined) return;
  const effects = effectsFrom(env.dialect, processed, row);
  const entries = outboxEntries(effects, env.now.toISOString(), outbox.destinations, outbox.feedEnabled);
  if (entries.length > 0) yield { outbox: entries };
}

/** The event as the outbox's messages describe it. */
function processedOf(event: HandlerEvent): ProcessedEvent {
  return {
    id: event.id,
    kind: event.kind,
    evento: event.evento,
    nu_proposta: event.nuProposta,
    request_id: event.requestId,
    dedup_key: event.dedupKey,
    received_at: event.receivedAt,
    payload: event.payload,
    raw_body: event.rawBody,
  };
}

/**
 * How a store answers a step's requests (sqlite/sqlite-step-ops.ts, postgres/pg-step-ops.ts): the
 * step's interpreter, not a statement runner (its `rows` hands a statement to the store's own:
 * SQLite's prepared handles, PostgreSQL's PgSql). `sync` at once, `async` at once or by a promise.
 */
export interface StepOps<P extends 'sync' | 'async'> {
  rows(statement: NamedStatement, params: readonly unknown[]): Answer<P, readonly unknown[]>;
  firstPoll(requestId: string, at: Date): Answer<P, void>;
  savepoint(kind: 'set' | 'release' | 'rollback', error: Error | undefined): Answer<P, void>;
  partner(event: HandlerEvent, now: Date): Answer<P, void>;
  outbox(entries: readonly OutboxEntry[]): Answer<P, void>;
  /** Runs `fn` inside the span (only asked for when the options say `traced`). */
  span<T>(span: SpanRequest, fn: () => Answer<P, T>): Answer<P, T>;
}

/**
 * The ops' `span` and the trace context an outbox message keeps (that of the processing that caused
 * it: its attempts' parent), on `traces`; with tracing off, `fn` alone and no context.
 */
export function stepTracing(traces: Traces | undefined) {
  return {
    span: <T>(span: SpanRequest, fn: () => T): T => {
      if (traces === undefined) return fn();
      return 'stage' in span
        ? traces.stage(span.stage, fn)
        : traces.processing(span.processing, span.name, span.attributes, fn);
    },
    context: (): string | null => traces?.current() ?? null,
  };
}

// An async store may answer at once (a request it only notes): the driver then does not wait a tick.
type Answer<P, T> = P extends 'sync' ? T : T | Promise<T>;

/**
 * Runs `program` synchronously. A request that throws is thrown into the program (its failure
 * path); what the program throws itself comes out.
 */
export function driveSync<R>(program: StepProgram<R>, ops: StepOps<'sync'>): R {
  let next = program.next();
  while (next.done !== true) {
    let answer: unknown;
    try {
      answer = answerWith(next.value, ops, driveSync);
    } catch (err) {
      next = program.throw(err);
      continue;
    }
    next = program.next(answer);
  }
  return next.value;
}

/** {@link driveSync}, each request awaited. */
export async function drive<R>(program: StepProgram<R>, ops: StepOps<'async'>): Promise<R> {
  let next = program.next();
  while (next.done !== true) {
    let answer: unknown;
    try {
      const a = answerWith(next.value, ops, drive);
      answer = a instanceof Promise ? await a : a;
    } catch (err) {
      next = program.throw(err);
      continue;
    }
    next = program.next(answer);
  }
  return next.value;
}

/** The ops' answer to one request; a span's program run inside it by the same driver. */
function answerWith<P extends 'sync' | 'async'>(
  r: StepRequest,
  ops: StepOps<P>,
  run: (program: StepProgram<unknown>, ops: StepOps<P>) => unknown,
): unknown {
  if ('statement' in r) return ops.rows(r.statement, r.params);
  if ('savepoint' in r) return ops.savepoint(r.savepoint, r.error);
  if ('outbox' in r) return ops.outbox(r.outbox);
  if ('span' in r) return ops.span(r.span, () => run(r.program, ops) as Answer<P, unknown>);
  if ('partner' in r) return ops.partner(r.partner, r.now);
  return ops.firstPoll(r.firstPoll.requestId, r.firstPoll.at);
}

/** Where a failure is told (after its transaction rolled back): error handlers, then its log line. */
export interface FailureSinks {
  /** The store's own hook (the handler-failure metric). */
  readonly onError?: ((error: Error, event: HandlerEvent) => void) | undefined;
  /** A partner's handlers (`configureHandlers`): their `onError`s. */
  readonly handlers?: Pick<Router<unknown>, 'emitError'> | null | undefined;
  readonly logger: Pick<EffectsEnv['logger'], 'warn'> & {
    error(fields: Record<string, unknown>, message: string): void;
  };
}

/** Tells a failure's error handlers and writes its one log line (domain/handler-failure.ts). */
export function tellFailure(failure: HandlerFailure, event: HandlerEvent, sinks: FailureSinks): void {
  sinks.onError?.(failure.error, event);
  sinks.handlers?.emitError(failure.error, event);
  sinks.logger[failure.log.level](failure.log.fields, failure.log.message);
}

/** What a store's processing settings make of the step's options (SQLite mode's and a turn's alike). */
export function stepOptionsOf(
  settings: Pick<StepOptions, 'maxAttempts' | 'backoff'> & {
    outbox?: StepOptions['outbox'] | undefined;
    random?: () => number;
    traces?: Traces | undefined;
  },
  handlers: Pick<Router<unknown>, 'handlersFor'> | null | undefined,
): StepOptions {
  return {
    maxAttempts: settings.maxAttempts,
    backoff: settings.backoff,
    random: settings.random ?? Math.random,
    outbox: settings.outbox ?? null,
    traced: settings.traces !== undefined,
    partnerFor: (event) => handlers != null && handlers.handlersFor(event).length > 0,
  };
}
