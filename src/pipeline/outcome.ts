import type { HandlerFailure } from '../domain/handler-failure';
import type { HandlerEvent } from '../handlers/router';
import type { EventForWork } from '../store/pipeline-queries';

/**
 * What the pipeline says of each event it ran, in a file of its own: the pipeline (pipeline.ts)
 * reports it, and the partner's turn (partner-event.ts), which the pipeline drives, reports it too.
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
  row?: EventForWork;
  event?: HandlerEvent;
  /** The database refused the work ('unavailable'). */
  error?: Error;
  /** What a handler's failure does ('retry', 'dead'). */
  failure?: HandlerFailure;
}
