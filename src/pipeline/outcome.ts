import type { HandlerFailure } from '../domain/handler-failure';
import type { HandlerEvent } from '../domain/event-router';

/**
 * What the pipeline (pipeline.ts) says of each event it ran: in its turn, or alone for an event a
 * partner's handler handles.
 */

/**
 * `unavailable`: the database refused the work itself; the event is tried again shortly.
 * `partner`: a partner's handler handles it; it runs after the turn, in its own transaction.
 */
export type ProcessOutcome = 'done' | 'retry' | 'dead' | 'skipped' | 'unavailable' | 'partner';

/** What became of one event. */
export interface Reported {
  id: number;
  outcome: ProcessOutcome;
  event?: HandlerEvent;
  /** The database refused the work ('unavailable'). */
  error?: Error;
  /** What a handler's failure does ('retry', 'dead'). */
  failure?: HandlerFailure;
}
