import type { NamedStatement } from '../core/effects';
import { type StepOps, stepTracing } from '../core/event-step';
import type { HandlerEvent } from '../domain/event-router';
import type { OutboxEntry } from '../domain/forwarding/messages';
import type { Traces } from '../domain/tracing';
import type { Db } from './database';
import { forwardOutbox } from './sqlite-outbox';
import { prepareShared } from './sqlite-prepare';

/**
 * How SQLite answers the event step's requests (core/event-step.ts) on one connection, inside the
 * transaction its caller opened: each statement prepared once, the savepoint as SQLite's own, the
 * outbox's messages inserted at once (one writer: no lock to wait for), a first poll needing no
 * step (the poller reads the row's `next_poll_at`, written with it). The partner stage is the
 * caller's: synchronous handlers for the turn, awaited ones for an event that leaves it.
 */

export interface SqliteStepDeps {
  readonly traces: Traces | undefined;
}

const NO_ROWS: readonly unknown[] = [];

/** The store's part of the ops, the partner stage left to the caller. */
function common(db: Db, deps: SqliteStepDeps) {
  // Each statement prepared once on this connection (a handle of prepareShared's).
  const prepared = new Map<NamedStatement, ReturnType<typeof prepareShared>>();
  const outbox = forwardOutbox(db);
  const savepoint = {
    set: db.prepare('SAVEPOINT consig_event'),
    release: db.prepare('RELEASE consig_event'),
    rollback: db.prepare('ROLLBACK TO consig_event'),
  };
  const tracing = stepTracing(deps.traces);
  return {
    rows(s: NamedStatement, params: readonly unknown[]): readonly unknown[] {
      let p = prepared.get(s);
      if (p === undefined) prepared.set(s, (p = prepareShared(db, s.text, { raw: s.rowMode === 'array' })));
      return p.reader ? p.all(params) : (p.run(params), NO_ROWS);
    },
    firstPoll: () => undefined,
    savepoint(kind: 'set' | 'release' | 'rollback'): void {
      savepoint[kind].run();
      if (kind === 'rollback') savepoint.release.run();
    },
    outbox(entries: readonly OutboxEntry[]): void {
      const traceContext = tracing.context();
      for (const e of entries) outbox.insert(e.message, e.destinations, traceContext);
    },
    span: tracing.span,
  };
}

/**
 * The turn's ops. The partner's handlers are asynchronous: an event any of them handles leaves the
 * turn (runtime/single/pipeline.ts) and runs on {@link sqliteAsyncStepOps}, so the turn has none to run.
 */
export function sqliteStepOps(db: Db, deps: SqliteStepDeps): StepOps<'sync'> {
  return { ...common(db, deps), partner: () => undefined };
}

/** The ops of an event a partner's asynchronous handler handles, on its own connection. */
export function sqliteAsyncStepOps(
  db: Db,
  deps: SqliteStepDeps & { partner(event: HandlerEvent, now: Date): Promise<void> },
): StepOps<'async'> {
  return { ...common(db, deps), partner: deps.partner };
}
