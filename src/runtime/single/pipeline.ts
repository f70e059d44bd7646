import PQueue from 'p-queue';
import { type Clock, settlesWithin } from '../../clock';
import type { EffectsEnv } from '../../core/effects';
import {
  drive,
  driveSync,
  eventStep,
  type StepOps,
  type StepOptions,
  type StepEvent,
  type StepReport,
  stepOptionsOf,
  tellFailure,
} from '../../core/event-step';
import { type BackgroundGate, whenGateClear } from '../../domain/answer-first';
import { type HandlerEvent, handlerEventOf, type HandlerRouter } from '../../domain/event-router';
import { asError, type HandlerFailure } from '../../domain/handler-failure';
import type { PollScheduleOptions } from '../../domain/registry';
import type { Logger } from '../../logger';
import type { Db, SqliteTransaction } from '../../sqlite/database';
import { handlerSqlOn } from '../../sqlite/sqlite-prepare';
import { sqliteAsyncStepOps, sqliteStepOps } from '../../sqlite/sqlite-step-ops';
import type { Traces } from '../../domain/tracing';
import { sqliteDialect } from '../../domain/sql/dialect';
import { isLockBusy } from '../../domain/errors';
import { workKeyOf } from '../../domain/work-key';
import { type EventForWork, type PipelineQueries, pipelineQueries } from '../../sqlite/pipeline-queries';

/**
 * The event pipeline: stored events → handlers, in an in-process p-queue.
 *
 * - Events of one proposal (one `requestId` for registry results) run one at a time, in the order
 *   they were received (event id order); different proposals are interleaved.
 * - Each event runs the event step written once for both stores (core/event-step.ts: its stages
 *   and its `done` mark in ONE transaction, a savepoint inside the turn's): its effects happen
 *   once. A turn processes up to `batchSize` runnable events in one outer transaction, so the
 *   pipeline pays one commit per turn, not per event; a crash before that commit rolls back every
 *   effect of the turn together with its `done` marks.
 * - A handler that throws rolls its transaction back; the event becomes `failed` with a backoff
 *   kept in the DB (`attempts`, `next_attempt_at`, `last_error`), and its proposal waits for it
 *   (order is kept). After `maxAttempts` it is `dead` and the proposal moves on.
 * - An event a partner's handler (`configureHandlers`, asynchronous) handles leaves the turn and
 *   runs alone after it, the same step awaited in a transaction of its own on a connection of its
 *   own ({@link Pipeline.runPartner}), its proposal waiting for it; every other event keeps the
 *   synchronous turn.
 * - At start, everything `pending` or `failed` is queued again: a crash loses no work. A sweep finds
 *   retries that fell due and events put back by `replay` from another process.
 */

export interface PipelineOptions {
  maxAttempts: number;
  clock: Clock;
  logger: Logger;
  metrics?: {
    processed(evento: string, outcome: 'done' | 'retry' | 'dead'): void;
    depth(n: number): void;
  };
  /** Handler retry backoff: first delay and cap. Default 1 s … 10 min. */
  backoff?: { baseMs: number; maxMs: number };
  random?: () => number;
  /** How often due retries and replays are looked for. Default 1000 ms. */
  sweepIntervalMs?: number;
  /** Events per turn (one outer transaction), after which the event loop gets a turn. Default 256. */
  batchSize?: number;
  /** Events of one proposal per turn, so that a long backlog of one does not hold back others. Default 32. */
  perKeyPerTurn?: number;
  /**
   * Checked at the start of every turn, inside its transaction: false when this process no longer
   * holds the processing lease, and the turn does nothing.
   * @default none (always processes)
   */
  fence?: (now: Date) => boolean;
  /**
   * Called after a turn that processed at least one event has committed (the forwarding sender is
   * told that new messages may be waiting).
   * @default none
   */
  onCommitted?: () => void;
  /**
   * Answers first (issue 23): a turn waits while a webhook answer is being made, and while answers
   * come it stops at `turnBudgetMs` instead of running a full batch.
   * @default none (turns never wait)
   */
  gate?: BackgroundGate;
  /**
   * Milliseconds of processing per turn while answers come (`gate.underLoad()`); otherwise a turn
   * runs up to `batchSize` events, one commit for them all.
   * @default 5
   */
  turnBudgetMs?: number;
  /**
   * A partner's handlers of the one handler API (`configureHandlers`): an event any of them handles
   * runs outside the turn, in a transaction of its own on `db`, a connection of its own.
   * @default none (every event runs in the turn)
   */
  partners?: PartnerHandlers;
  /**
   * The built-in stages' registry schedule (core/effects.ts) and the outbox (forwarding and the
   * change feed; null: no message is made), around the partner's handlers (domain/handler-order.ts).
   */
  stages: {
    schedule: PollScheduleOptions;
    outbox: StepOptions['outbox'];
  };
  /** Told of every handler failure, after the failure is recorded (the metric's hook). @default none */
  onError?: ((error: Error, event: HandlerEvent) => void) | undefined;
  /**
   * Tracing (issue 35): each event runs inside a span continuing its delivery's trace.
   * @default undefined (off)
   */
  traces?: Traces | undefined;
}

interface KeyState {
  ids: number[];
  /** The head event failed and waits for its retry (or the database refused it for a moment). */
  blocked: boolean;
}

/**
 * What became of one event of work key `key`, in a turn or alone. `unavailable`: the database
 * refused the work itself; the key is released again after a short wait. `partner`: a partner's
 * handler handles it; it runs after the turn, in its own transaction, its key waiting for it.
 */
interface Reported {
  id: number;
  key: string;
  outcome: 'done' | 'retry' | 'dead' | 'skipped' | 'unavailable' | 'partner';
  event?: HandlerEvent;
  /** The database refused the work ('unavailable'). */
  error?: Error;
  /** What a handler's failure does ('retry', 'dead'). */
  failure?: HandlerFailure;
}

interface TurnResult {
  outcomes: Reported[];
  /** Runnable events are left for another turn. */
  more: boolean;
}

const DEFAULT_BACKOFF = { baseMs: 1000, maxMs: 600_000 };

/**
 * A partner's handlers (`configureHandlers`, asynchronous) and the connection their events run on:
 * other code on the pipeline's connection (the sender's records) may run while a handler awaits,
 * and would otherwise join, or be rolled back with, the event's transaction. The write lock is held
 * until the handlers return: a handler should await nothing but `sql`.
 */
export interface PartnerHandlers {
  readonly partner: HandlerRouter;
  readonly db: Db;
}

/** How long a proposal waits after the database refused its event, before trying again. */
const UNAVAILABLE_RETRY_MS = 1000;

/**
 * How long a turn waits before trying again when another connection holds the write lock (its
 * BEGIN IMMEDIATE blocked the event loop for the connection's short busy timeout only).
 */
const LOCKED_RETRY_MS = 50;

export class Pipeline {
  private readonly queue: PQueue;
  private readonly q: PipelineQueries;
  private readonly keys = new Map<string, KeyState>();
  private readonly tracked = new Set<number>();
  private sweeper: NodeJS.Timeout | null = null;
  /** Not processing: before start(), after stop(), and while this process is a standby. */
  private stopping = true;
  /**
   * Every event with an id up to this one has been seen (queued, or not pending). Events other
   * processes store in the same file are found above it: ids commit in order (one writer at a
   * time), so a turn that catches up first never runs a proposal's event before an earlier one.
   */
  private watermark = 0;
  private turnScheduled = false;
  /** Set while the file is locked by another connection: the turn's next attempt. */
  private lockRetry: NodeJS.Timeout | null = null;
  /** Whether the running turn got past BEGIN IMMEDIATE (its in-memory state may have changed). */
  private turnEntered = false;
  private readonly runTurn: SqliteTransaction<(now: Date) => TurnResult>;
  private readonly step: StepOptions;
  private readonly ops: StepOps<'sync'>;
  private readonly partners: (PartnerHandlers & { q: PipelineQueries; ops: StepOps<'async'> }) | null;

  constructor(
    private readonly db: Db,
    private readonly options: PipelineOptions,
  ) {
    // One turn at a time: a turn is one synchronous transaction on this connection, so a second
    // turn could only wait for the first. The queue gives stop() its clear/onIdle.
    this.queue = new PQueue({ concurrency: 1 });
    this.q = pipelineQueries(db);
    this.ops = sqliteStepOps(db, { traces: options.traces });
    this.partners = options.partners === undefined ? null : this.partnerPath(options.partners);
    const backoff = options.backoff ?? DEFAULT_BACKOFF;
    this.step = stepOptionsOf({ ...options, backoff, outbox: options.stages.outbox }, this.partners?.partner);
    this.runTurn = db.transaction((now: Date) => {
      this.turnEntered = true;
      return this.collectAndProcess(now);
    });
  }

  /** Queues everything left pending or failed (crash recovery) and starts the sweep. */
  start(): void {
    this.stopping = false;
    const recovered = this.recover();
    if (recovered > 0) this.options.logger.info({ events: recovered }, 'pipeline: recovered backlog');
    this.sweeper = setInterval(() => this.sweep(), this.options.sweepIntervalMs ?? 1000).unref();
    this.reportDepth();
  }

  /** Queues one stored event (called right after its commit). */
  enqueue(id: number, key: string): void {
    if (this.stopping) return; // it stays pending in the DB for the next start
    let state = this.keys.get(key);
    if (this.tracked.has(id)) {
      // A due retry found by the sweep: release the key if this is the event it waits for.
      if (state?.blocked && state.ids[0] === id) {
        state.blocked = false;
        this.scheduleTurn();
      }
      return;
    }
    if (!state) {
      state = { ids: [], blocked: false };
      this.keys.set(key, state);
    }
    const last = state.ids[state.ids.length - 1];
    if (last === undefined || last < id) state.ids.push(id);
    else
      state.ids.splice(
        state.ids.findIndex((x) => x > id),
        0,
        id,
      ); // a replayed older event
    this.tracked.add(id);
    this.scheduleTurn();
  }

  /** Events known to the pipeline and not finished. */
  get depth(): number {
    return this.tracked.size;
  }

  /** Resolves when nothing is running or runnable (blocked retries do not count). */
  async onIdle(): Promise<void> {
    while (this.turnScheduled || this.queue.size > 0 || this.queue.pending > 0) {
      await this.queue.onIdle();
      if (this.turnScheduled) await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * Stops taking work and waits (bounded) for the running turn. What did not finish stays
   * `pending`/`failed` in the DB for the next start.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
    if (this.lockRetry) clearTimeout(this.lockRetry);
    this.lockRetry = null;
    this.queue.clear();
    const finished = await settlesWithin(this.queue.onIdle(), timeoutMs);
    // Forget what was queued: a later start() reloads it from the database, where it stays pending.
    this.keys.clear();
    this.tracked.clear();
    this.watermark = 0;
    this.reportDepth();
    return finished;
  }

  /** Finds retries that fell due and events replayed from another process. */
  sweep(): void {
    if (this.stopping) return;
    try {
      const now = this.options.clock.now().toISOString();
      for (const item of this.q.due(now, 1000)) this.enqueue(item.id, workKeyOf(item));
      this.catchUp();
    } catch (err) {
      this.options.logger.error({ err: (err as Error).message }, 'pipeline sweep failed; trying again');
    }
  }

  /**
   * Loads every pending/failed event not tracked yet, whoever stored it; returns how many were
   * added. One read transaction, so the backlog and the watermark come from one snapshot. A retry
   * not due yet holds its proposal back as it did before the restart (the sweep lets it go when
   * due), as a turn waits for its `next_attempt_at` in cluster mode.
   */
  private recover(): number {
    const before = this.tracked.size;
    const now = this.options.clock.now().toISOString();
    const notDue = new Set<number>();
    this.db.transaction(() => {
      for (const item of this.q.backlog()) {
        if (!this.tracked.has(item.id) && item.next_attempt_at !== null && item.next_attempt_at > now)
          notDue.add(item.id);
        this.enqueue(item.id, workKeyOf(item));
      }
      this.watermark = Math.max(this.watermark, this.q.maxId());
    })();
    for (const state of this.keys.values()) if (notDue.has(state.ids[0] as number)) state.blocked = true;
    return this.tracked.size - before;
  }

  /** Queues the pending events stored since the watermark (by any process sharing the file). */
  private catchUp(): void {
    for (;;) {
      const rows = this.q.after(this.watermark, 1000);
      for (const row of rows) {
        if (row.status === 'pending') this.enqueue(row.id, workKeyOf(row));
        this.watermark = row.id;
      }
      if (rows.length < 1000) return;
    }
  }

  private scheduleTurn(): void {
    // While the file is locked the retry timer schedules the next turn.
    if (this.turnScheduled || this.stopping || this.lockRetry !== null) return;
    this.turnScheduled = true;
    this.reportDepth();
    // setImmediate: requests that arrived meanwhile are read (and their events stored) first, and
    // a turn covers everything runnable by then.
    setImmediate(() =>
      whenGateClear(this.options.gate, () => this.queued(() => this.turn(), 'pipeline turn failed')),
    );
  }

  /** `work` queued after what the queue has; should it throw, the log says `failed`. */
  private queued(work: () => void | Promise<void>, failed: string): void {
    this.queue.add(work).catch((err: Error) => this.options.logger.error({ err: err.message }, failed));
  }

  private turn(): void {
    this.turnScheduled = false;
    if (this.stopping) return;
    let result: TurnResult;
    this.turnEntered = false;
    try {
      // IMMEDIATE: the write lock is taken first, so a file locked by another process is found
      // before the turn changed anything, and costs a short wait, not a reload.
      result = this.runTurn.immediate(this.options.clock.now());
    } catch (err) {
      if (!this.turnEntered && isLockBusy(err)) {
        // The file is locked by another connection: the same work is tried again in a moment.
        this.lockRetry ??= setTimeout(() => {
          this.lockRetry = null;
          this.scheduleTurn();
        }, LOCKED_RETRY_MS).unref();
        return;
      }
      // The commit itself failed: nothing of the turn is stored. Forget what the turn took and
      // reload from the database in a moment (those events are still pending there).
      this.options.logger.error({ err: (err as Error).message }, 'pipeline turn could not commit; retrying');
      for (const state of this.keys.values()) state.ids.length = 0;
      this.keys.clear();
      this.tracked.clear();
      setTimeout(() => {
        try {
          this.recover();
        } catch (e) {
          this.options.logger.error(
            { err: (e as Error).message },
            'pipeline recovery failed; next sweep retries',
          );
        }
      }, UNAVAILABLE_RETRY_MS).unref();
      return;
    }
    // After the commit: tell metrics, error handlers and the log what happened.
    for (const r of result.outcomes) this.report(r);
    if (result.outcomes.some((r) => r.outcome === 'done')) this.options.onCommitted?.();
    for (const { outcome, id, key } of result.outcomes)
      if (outcome === 'unavailable') this.releaseLater(key);
      else if (outcome === 'partner') this.queued(() => this.runPartner(id, key), 'pipeline event failed');
    if (result.more) this.scheduleTurn();
    this.reportDepth();
  }

  /** The database refused `key`'s event: its key is released again in a moment. */
  private releaseLater(key: string): void {
    setTimeout(() => {
      const state = this.keys.get(key);
      if (state) state.blocked = false;
      this.scheduleTurn();
    }, UNAVAILABLE_RETRY_MS).unref();
  }

  /** An event a partner's handler handles, after the turn that found it ({@link runPartnerEvent}). */
  private async runPartner(id: number, key: string): Promise<void> {
    if (this.stopping || this.partners === null) return;
    const r = await this.runPartnerEvent(id, key, this.options.clock.now());
    this.report(r);
    const state = this.keys.get(key);
    if (state !== undefined && state.ids[0] === id) {
      if (r.outcome === 'unavailable') this.releaseLater(key);
      else if (r.outcome !== 'retry') {
        // Finished (or no longer runnable): the key moves on. A retry waits for the sweep.
        state.ids.shift();
        this.tracked.delete(id);
        state.blocked = false;
        if (state.ids.length === 0) this.keys.delete(key);
      }
    }
    if (r.outcome === 'done') this.options.onCommitted?.();
    this.scheduleTurn();
    this.reportDepth();
  }

  /** The partner's events' path: their own connection, the step's ops on it, their handlers awaited. */
  private partnerPath(p: PartnerHandlers): NonNullable<Pipeline['partners']> {
    const { logger, traces } = this.options;
    const sql = handlerSqlOn(p.db);
    const ops = sqliteAsyncStepOps(p.db, {
      traces,
      partner: async (event, now) => {
        for (const handler of p.partner.handlersFor(event)) await handler(event, { sql, now, logger });
      },
    });
    return { ...p, q: pipelineQueries(p.db), ops };
  }

  /**
   * Event `id`, which a partner's (asynchronous) handler handles: the event step awaited alone, in
   * a transaction of its own on the partner's connection (BEGIN IMMEDIATE … COMMIT), the fence
   * checked inside it. Never throws.
   */
  private async runPartnerEvent(id: number, key: string, now: Date): Promise<Reported> {
    const { db, q, ops } = this.partners as NonNullable<Pipeline['partners']>;
    try {
      db.exec('BEGIN IMMEDIATE');
      if (this.options.fence && !this.options.fence(now)) throw new Error('processing lease not held');
      const e = runnable(q.load(id));
      const r: Reported =
        e === null
          ? { id, key, outcome: 'skipped' }
          : reported(id, key, e.event, await drive(eventStep(e, this.envAt(now), this.step), ops));
      db.exec(r.outcome === 'skipped' ? 'ROLLBACK' : 'COMMIT');
      return r;
    } catch (err) {
      // Nothing of the event is stored (or its transaction never began): it runs again in a moment,
      // this attempt not counted.
      try {
        if (db.inTransaction) db.exec('ROLLBACK');
      } catch {
        // SQLite rolled back already (it does on some errors): nothing left to undo.
      }
      return { id, key, outcome: 'unavailable', error: asError(err) };
    }
  }

  /** Inside the turn's transaction: take runnable events, oldest proposals first, and run them. */
  private collectAndProcess(now: Date): TurnResult {
    // Another process may hold the processing lease by now: process nothing (the leadership loop
    // stops this pipeline at its next tick).
    if (this.options.fence && !this.options.fence(now)) return { outcomes: [], more: false };
    this.catchUp();
    const batchSize = this.options.batchSize ?? 256;
    const perKey = this.options.perKeyPerTurn ?? 32;
    const full = this.turnLimit(batchSize);
    const outcomes: Reported[] = [];
    const env = this.envAt(now); // one for the turn's events
    let more = false;
    for (const [key, state] of this.keys) {
      if (full(outcomes.length)) {
        more = true;
        break;
      }
      if (state.blocked) continue;
      let n = 0;
      while (state.ids.length > 0 && n < perKey && !full(outcomes.length)) {
        const id = state.ids[0] as number;
        const r = this.runOne(id, key, env);
        outcomes.push(r);
        if (r.outcome === 'retry' || r.outcome === 'unavailable' || r.outcome === 'partner') {
          state.blocked = true;
          break;
        }
        state.ids.shift();
        this.tracked.delete(id);
        n += 1;
      }
      if (state.ids.length === 0) this.keys.delete(key);
      else if (!state.blocked) more = true;
    }
    return { outcomes, more };
  }

  /**
   * Whether a turn that processed `n` events must stop: at `batchSize`, or while answers come at
   * its time budget (a request arriving during a synchronous turn waits for its end).
   */
  private turnLimit(batchSize: number): (n: number) => boolean {
    if (this.options.gate?.underLoad() !== true) return (n) => n >= batchSize;
    const { clock } = this.options;
    const endsAt = clock.monotonic() + (this.options.turnBudgetMs ?? 5);
    return (n) => n >= batchSize || (n > 0 && clock.monotonic() >= endsAt);
  }

  /** Runs one event's step (its own savepoint). Never throws. */
  private runOne(id: number, key: string, env: EffectsEnv): Reported {
    let e: StepEvent | null;
    try {
      e = runnable(this.q.load(id));
    } catch (err) {
      return { id, key, outcome: 'unavailable', error: err as Error };
    }
    if (e === null) return { id, key, outcome: 'skipped' };
    if (this.step.partnerFor(e.event)) return { id, key, outcome: 'partner' };
    try {
      return reported(id, key, e.event, driveSync(eventStep(e, env, this.step), this.ops));
    } catch (err) {
      // The failure could not be recorded (the database refused it): its savepoint is given up.
      try {
        this.ops.savepoint('rollback', undefined);
      } catch {
        // Nothing of it left (SQLite rolled back already).
      }
      return { id, key, outcome: 'unavailable', error: err as Error };
    }
  }

  /** The event step's environment (core/effects.ts) at `now`. */
  private envAt(now: Date): EffectsEnv {
    return {
      dialect: sqliteDialect,
      now,
      logger: this.options.logger,
      schedule: this.options.stages.schedule,
    };
  }

  private report(r: Reported): void {
    if (r.outcome === 'skipped' || r.outcome === 'partner') return;
    if (r.outcome === 'unavailable') {
      this.options.logger.error(
        { err: r.error?.message, event_id: r.id },
        'pipeline could not process an event; retrying',
      );
      return;
    }
    const event = r.event as HandlerEvent;
    this.options.metrics?.processed(event.evento ?? event.kind, r.outcome);
    if (r.outcome === 'done') return;
    tellFailure(r.failure as HandlerFailure, event, { ...this.options, handlers: this.partners?.partner });
  }

  private reportDepth(): void {
    this.options.metrics?.depth(this.tracked.size);
  }
}

/** The event as loaded when it is still to run (pending, or failed and due), else null. */
function runnable(row: EventForWork | undefined): StepEvent | null {
  if (row === undefined || (row.status !== 'pending' && row.status !== 'failed')) return null;
  return { event: handlerEventOf(row), traceContext: row.trace_context };
}

/** What the pipeline says of an event its step ran. */
function reported(id: number, key: string, event: HandlerEvent, report: StepReport): Reported {
  return report.outcome === 'done'
    ? { id, key, outcome: 'done', event }
    : { id, key, outcome: report.outcome, event, failure: report.failure };
}
