import {
  type EventHandler,
  type EventHandlerContext,
  type HandlerEvent,
  type HandlerSql,
  handlerEventOf,
  Router,
} from '../domain/event-router';
import { asError, handlerFailure } from '../domain/handler-failure';
import type { HandlerContext } from '../handlers/router';
import type { Db } from '../store/database';
import { handlerSqlOn } from '../store/handler-sql';
import { type EventForWork, type PipelineQueries, pipelineQueries } from '../store/pipeline-queries';
import { processingAttributes, type Traces } from '../domain/tracing';
import type { Reported } from './outcome';

/**
 * SQLite mode's path for an event a partner's handler (`configureHandlers`, the one handler API of
 * both modes) handles. Those handlers are asynchronous and the pipeline's turn is one synchronous
 * better-sqlite3 transaction, so such an event leaves the turn and runs alone, in a transaction of
 * its own on a connection of its own: BEGIN IMMEDIATE, every handler of the event in order (the
 * built-ins and forwarding bound to that connection, the partner's awaited between them, writing
 * through `sql` on it), the `done` mark, COMMIT; or, when anything throws, ROLLBACK and the failure
 * recorded as in the turn (domain/handler-failure.ts). Its own connection, because other code on
 * the pipeline's connection (the sender's records) may run while a handler awaits, and would
 * otherwise join, or be rolled back with, the event's transaction. The write lock is held until the
 * handlers return: a handler should await nothing but `sql`. Events of other kinds keep the turn's
 * synchronous path, unchanged.
 */

/** A step of such an event: a built-in handler (synchronous) or a partner's (awaited). */
export type Step = (event: HandlerEvent, ctx: HandlerContext & EventHandlerContext) => void | Promise<void>;

export interface PartnerHandlers {
  /** The partner's handlers: an event any of them handles takes this path. */
  readonly partner: Router<EventHandler>;
  /** Every handler of such an event, in domain/handler-order.ts's order, the built-ins bound to `db`. */
  readonly steps: Router<Step>;
  /** The path's own connection to the file. */
  readonly db: Db;
}

export interface PartnerEventOptions {
  maxAttempts: number;
  backoff: { baseMs: number; maxMs: number };
  random: () => number;
  logger: HandlerContext['logger'];
  fence?: (now: Date) => boolean;
  /** Tracing: the event runs inside a span continuing its delivery's trace. @default undefined (off) */
  traces?: Traces | undefined;
}

export class PartnerEvents {
  private readonly q: PipelineQueries;
  private readonly sql: HandlerSql;

  constructor(
    private readonly handlers: PartnerHandlers,
    private readonly options: PartnerEventOptions,
  ) {
    this.q = pipelineQueries(handlers.db);
    this.sql = handlerSqlOn(handlers.db);
  }

  /** Whether `event` takes this path. */
  handles(event: Pick<HandlerEvent, 'kind' | 'evento'>): boolean {
    return this.handlers.partner.handlersFor(event).length > 0;
  }

  /** Told of every handler failure, in either path. */
  emitError(error: Error, event: HandlerEvent): void {
    this.handlers.partner.emitError(error, event);
  }

  /** Runs event `id` in its own transaction. Never throws. */
  async run(id: number, now: Date): Promise<Reported> {
    const { db } = this.handlers;
    try {
      db.exec('BEGIN IMMEDIATE');
    } catch (err) {
      return { id, outcome: 'unavailable', error: asError(err) };
    }
    let row: EventForWork | undefined;
    let event: HandlerEvent | undefined;
    try {
      if (this.options.fence && !this.options.fence(now)) throw new Error('processing lease not held');
      row = this.q.load(id);
      if (!row || (row.status !== 'pending' && row.status !== 'failed')) {
        this.rollback();
        return { id, outcome: 'skipped' };
      }
      event = handlerEventOf(row);
      const ctx = { db, sql: this.sql, now, logger: this.options.logger };
      const steps = this.handlers.steps.handlersFor(event);
      const { traces } = this.options;
      const runSteps = async (e: HandlerEvent) => {
        for (const step of steps) await step(e, ctx);
      };
      if (traces === undefined) await runSteps(event);
      else
        await traces.processing(row.trace_context, processingAttributes(event), () =>
          runSteps(event as HandlerEvent),
        );
      this.q.markDone(id, now.toISOString());
    } catch (err) {
      this.rollback();
      if (row === undefined || event === undefined)
        return { id, outcome: 'unavailable', error: asError(err) };
      return this.failed(row, event, err, now);
    }
    try {
      db.exec('COMMIT');
    } catch (err) {
      // Nothing of the event is stored: it runs again in a moment, this attempt not counted.
      this.rollback();
      return { id, outcome: 'unavailable', error: asError(err) };
    }
    return { id, outcome: 'done', row, event };
  }

  private failed(row: EventForWork, event: HandlerEvent, err: unknown, now: Date): Reported {
    const failure = handlerFailure({ ...this.options, attempts: row.attempts, now, error: err, event });
    try {
      this.q.markFailed(row.id, failure.status, failure.attempts, failure.lastError, failure.nextAttemptAt);
    } catch (markErr) {
      return { id: row.id, outcome: 'unavailable', error: asError(markErr) };
    }
    return { id: row.id, outcome: failure.outcome, row, event, failure };
  }

  private rollback(): void {
    try {
      if (this.handlers.db.inTransaction) this.handlers.db.exec('ROLLBACK');
    } catch {
      // SQLite rolled back already (it does on some errors): nothing left to undo.
    }
  }
}

/** The router of a {@link PartnerHandlers}' steps. */
export class StepRouter extends Router<Step> {}
