import { own, parseJsonOrUndefined } from './json';

/**
 * Handlers by event name, in the spirit of octokit's `on("issues.opened", fn)` / `onAny` /
 * `onError`: the routing alone, for any kind of handler. A partner's handlers are written once for
 * both modes ({@link HandlerRouter}: `async (event, { sql, now, logger })`, `sql` inside the event's
 * transaction in either store). The built-in stages are the event step's (core/event-step.ts).
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
  /** What the event is deduplicated on (`events.dedup_key`): the delivery's webhook_id, or a digest. */
  readonly dedupKey: string;
  readonly tentativa: number | null;
  readonly receivedAt: string;
  readonly attempts: number;
  /** The body as stored (text), for handlers that keep it whole. */
  readonly rawBody: string | null;
  /** The parsed body (never throws: undefined when it does not parse). */
  readonly payload: unknown;
  readonly dados: unknown;
}

/** An `events` row as both stores read it for processing (the same column names in each). */
export interface EventRowForHandlers {
  readonly id: number;
  readonly kind: HandlerEvent['kind'];
  readonly evento: string | null;
  /** As the store's canonical form gives it: an integer proposal number as a number. */
  readonly nu_proposta: number | string | null;
  readonly request_id: string | null;
  readonly registry_status: string | null;
  readonly webhook_id: string | null;
  readonly dedup_key: string;
  readonly tentativa: number | null;
  readonly received_at: string;
  readonly attempts: number;
  /** The raw body: text (SQLite) or bytes (PostgreSQL's bytea); null once pruned. */
  readonly body: string | Uint8Array | null;
}

const utf8 = new TextDecoder();

/** What handlers (and the life cycle) see of a stored event: the body parsed once, never throwing. */
export function handlerEventOf(row: EventRowForHandlers): HandlerEvent {
  const rawBody = row.body === null ? null : typeof row.body === 'string' ? row.body : utf8.decode(row.body);
  const payload = rawBody === null ? undefined : parseJsonOrUndefined(rawBody);
  return {
    id: row.id,
    kind: row.kind,
    evento: row.evento,
    nuProposta: row.nu_proposta,
    requestId: row.request_id,
    registryStatus: row.registry_status,
    webhookId: row.webhook_id,
    dedupKey: row.dedup_key,
    tentativa: row.tentativa,
    receivedAt: row.received_at,
    attempts: row.attempts,
    rawBody,
    payload,
    dados: own(payload, 'dados'),
  };
}

export type ErrorHandler = (error: Error, event: HandlerEvent) => void;

/** The routing name of an event: its `evento`, or `registry` for registry results and polls. */
export function routeName(event: Pick<HandlerEvent, 'kind' | 'evento'>): string {
  return event.kind === 'event' ? (event.evento ?? '') : 'registry';
}

/** What a route with no handler of its own answers (one empty list, not a new one per event). */
const NONE: readonly never[] = [];

export class Router<H> {
  private readonly byName = new Map<string, H[]>();
  private readonly any: H[] = [];
  private readonly errorHandlers: ErrorHandler[] = [];

  /** Runs `handler` for the named event(s), in registration order. `registry` names registry results. */
  on(names: string | readonly string[], handler: H): this {
    for (const name of typeof names === 'string' ? [names] : names) {
      const list = this.byName.get(name) ?? [];
      list.push(handler);
      this.byName.set(name, list);
    }
    return this;
  }

  /** Runs `handler` for every event, after the named handlers. */
  onAny(handler: H): this {
    this.any.push(handler);
    return this;
  }

  /** Told of every handler failure (after the transaction rolled back); must not throw. */
  onError(handler: ErrorHandler): this {
    this.errorHandlers.push(handler);
    return this;
  }

  handlersFor(event: Pick<HandlerEvent, 'kind' | 'evento'>): readonly H[] {
    const named = this.byName.get(routeName(event)) ?? NONE;
    return [...named, ...this.any];
  }

  /** Whether any handler is registered at all. */
  get empty(): boolean {
    return this.byName.size === 0 && this.any.length === 0;
  }

  emitError(error: Error, event: HandlerEvent): void {
    for (const h of this.errorHandlers) {
      try {
        h(error, event);
      } catch {
        // An error handler that throws must not take processing down.
      }
    }
  }
}

/**
 * A partner handler's statements, inside the event's transaction in either store: PostgreSQL's
 * placeholders (`$1`, `$2`, … numbered from 1, each usable more than once) in both; rows for a
 * statement that returns any (`SELECT`, `RETURNING`), none otherwise. In SQLite mode a boolean is
 * bound as 1/0 and a Date as its ISO-8601 text (what SQLite can store).
 */
export interface HandlerSql {
  query<R = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<{ rows: R[] }>;
}

export interface HandlerLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export interface EventHandlerContext {
  readonly sql: HandlerSql;
  /** The time the event is processed at (the receiver's clock). */
  readonly now: Date;
  readonly logger: HandlerLogger;
}

/**
 * A partner's handler, the same in both modes: awaited inside the event's transaction, after the
 * built-in handlers and before forwarding (domain/handler-order.ts). Its writes through `ctx.sql`
 * commit exactly once with the event's `done` mark, or roll back with it when any handler of the
 * event throws (the event then retries, and eventually is dead). It runs once per attempt: what it
 * does outside `sql` happens again when the event is retried or its transaction could not commit.
 */
export type EventHandler = (event: HandlerEvent, ctx: EventHandlerContext) => Promise<void> | void;

/** The router `configureHandlers` receives. */
export class HandlerRouter extends Router<EventHandler> {}
