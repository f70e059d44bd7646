import { type StepOps, STEP_SQL, stepTracing } from '../core/event-step';
import type { EventHandler, Router } from '../domain/event-router';
import type { OutboxEntry } from '../domain/forwarding/messages';
import type { Traces } from '../domain/tracing';
import { type ClusterLogger, handlerSqlOf, type PgSql } from './pg-sql';

/**
 * How PostgreSQL answers the event step's requests (core/event-step.ts), inside the transaction its
 * caller opened: a turn's (the cluster runtime's turn.ts, in pg-boss's transaction) or a port's
 * effect program (pg-port.ts `effects`). The parallel of sqlite/sqlite-step-ops.ts.
 */

/** Queues a registration's first poll in `sql`'s transaction (the cluster runtime's engine). */
export type SchedulePoll = (sql: PgSql, requestId: string, at: Date) => Promise<void>;

/** What the ops run with: the first polls' queue; a turn's tracing, partner's handlers and logger. */
export interface PgStepDeps {
  schedulePoll: SchedulePoll;
  traces?: Traces | undefined;
  /** A partner's own handlers (`configureHandlers`): asked for only when it has some for an event. */
  handlers?: Router<EventHandler> | undefined;
  logger?: ClusterLogger | undefined;
}

/** A `done` mark the fast pass writes with the batch's others: the event, and when it ran. */
export type Done = { id: unknown; at: unknown };

const NO_ROWS: readonly unknown[] = [];

/** The event's savepoint, on its own (the careful pass). */
async function savepoint(sql: PgSql, kind: 'set' | 'release' | 'rollback'): Promise<void> {
  if (kind === 'set') await sql.query('SAVEPOINT consig_event');
  else {
    if (kind === 'rollback') await sql.query('ROLLBACK TO SAVEPOINT consig_event');
    await sql.query('RELEASE SAVEPOINT consig_event');
  }
}

/** The fast pass's end: an event threw, and the batch is run again event by event. */
export class Aborted extends Error {
  constructor(readonly error: Error) {
    super(error.message);
  }
}

/**
 * PostgreSQL's answers to the event step, or to an effect program alone (pg-port.ts
 * `effects`), on the caller's transaction: statements prepared, a first poll queued with pg-boss in
 * the transaction, the messages collected in `entries`. With `done` (the fast pass): the events'
 * savepoints are the batch's, their `done` marks collected to be written together, and a rollback
 * ends the pass ({@link Aborted}).
 */
export function pgStepOps(
  sql: PgSql,
  options: PgStepDeps,
  entries: OutboxEntry[] = [],
  done?: Done[],
): StepOps<'async'> {
  const tracing = stepTracing(options.traces);
  return {
    rows: (s, params) => {
      if (done === undefined || s !== STEP_SQL.done) return sql.prepared(s, params);
      done.push({ id: params[1], at: params[0] });
      return NO_ROWS;
    },
    firstPoll: (requestId, at) => options.schedulePoll(sql, requestId, at),
    savepoint: (kind, error) => {
      if (done === undefined) return savepoint(sql, kind);
      if (kind === 'rollback') throw new Aborted(error as Error);
      return undefined;
    },
    // Asked for only when `handlers` has some for the event: a turn's, whose options have a logger.
    partner: async (event, now) => {
      const partner = { sql: handlerSqlOf(sql), now, logger: options.logger as ClusterLogger };
      for (const handler of options.handlers?.handlersFor(event) ?? []) await handler(event, partner);
    },
    outbox: (list) => {
      const traceContext = tracing.context();
      entries.push(...(traceContext === null ? list : list.map((e) => ({ ...e, traceContext }))));
    },
    span: tracing.span,
  };
}
