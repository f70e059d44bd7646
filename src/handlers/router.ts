import { type HandlerEvent, Router } from '../domain/event-router';
import type { Db } from '../store/database';
import type { Logger } from '../logger';

/**
 * Handlers by event name, in the spirit of octokit's `on("issues.opened", fn)` / `onAny` /
 * `onError`. The life-cycle handler is registered through this same mechanism, and so are a
 * partner's own.
 *
 * Handlers are synchronous on purpose: the pipeline runs every handler of an event and marks the
 * event `done` in ONE SQLite transaction, so their database effects happen exactly once, even
 * across a crash. Work that must leave the process (an HTTP call, a message) belongs in an outbox
 * table written here and sent afterwards, as the built-in forwarding does (handlers/forwarding.ts).
 */

export type { ErrorHandler, HandlerEvent } from '../domain/event-router';
export { routeName } from '../domain/event-router';

export interface HandlerContext {
  /** The pipeline's connection, inside the event's transaction. */
  readonly db: Db;
  readonly now: Date;
  readonly logger: Logger;
}

export type Handler = (event: HandlerEvent, ctx: HandlerContext) => void;

/** SQLite mode's router: synchronous handlers on the pipeline's connection. */
export class EventRouter extends Router<Handler> {}
