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

export interface HandlerEvent {
  readonly id: number;
  readonly kind: 'event' | 'registry' | 'poll';
  /** The event name; registry results and polls have `evento` null and are routed as `registry`. */
  readonly evento: string | null;
  readonly nuProposta: number | string | null;
  readonly requestId: string | null;
  readonly registryStatus: string | null;
  readonly webhookId: string | null;
  readonly tentativa: number | null;
  readonly receivedAt: string;
  readonly attempts: number;
  /** The body as stored (text), for handlers that keep it whole. */
  readonly rawBody: string | null;
  /** The parsed body (never throws: undefined when it does not parse). */
  readonly payload: unknown;
  readonly dados: unknown;
}

export interface HandlerContext {
  /** The pipeline's connection, inside the event's transaction. */
  readonly db: Db;
  readonly now: Date;
  readonly logger: Logger;
}

export type Handler = (event: HandlerEvent, ctx: HandlerContext) => void;
export type ErrorHandler = (error: Error, event: HandlerEvent) => void;

/** The routing name of an event: its `evento`, or `registry` for registry results and polls. */
export function routeName(event: Pick<HandlerEvent, 'kind' | 'evento'>): string {
  return event.kind === 'event' ? (event.evento ?? '') : 'registry';
}

export class EventRouter {
  private readonly byName = new Map<string, Handler[]>();
  private readonly any: Handler[] = [];
  private readonly errorHandlers: ErrorHandler[] = [];

  /** Runs `handler` for the named event(s), in registration order. `registry` names registry results. */
  on(names: string | readonly string[], handler: Handler): this {
    for (const name of typeof names === 'string' ? [names] : names) {
      const list = this.byName.get(name) ?? [];
      list.push(handler);
      this.byName.set(name, list);
    }
    return this;
  }

  /** Runs `handler` for every event, after the named handlers. */
  onAny(handler: Handler): this {
    this.any.push(handler);
    return this;
  }

  /** Told of every handler failure (after the transaction rolled back); must not throw. */
  onError(handler: ErrorHandler): this {
    this.errorHandlers.push(handler);
    return this;
  }

  handlersFor(event: Pick<HandlerEvent, 'kind' | 'evento'>): readonly Handler[] {
    const named = this.byName.get(routeName(event)) ?? [];
    return this.any.length === 0 ? named : [...named, ...this.any];
  }

  emitError(error: Error, event: HandlerEvent): void {
    for (const h of this.errorHandlers) {
      try {
        h(error, event);
      } catch {
        // An error handler that throws must not take the pipeline down.
      }
    }
  }
}
