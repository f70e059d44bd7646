import type { Clock } from './clock';
import type { ServiceClient } from './client';
import type { DeferralPolicy } from './domain/answer-first';
import type { HandlerRouter } from './domain/event-router';
import type { Logger } from './logger';

/**
 * What startReceiver takes besides the configuration. Its own file so that main.ts and the
 * modes' composition (src/runtime/, what differs by mode) both read it without importing each other.
 */
export interface StartOptions {
  logger: Logger;
  /** @default the system clock */
  clock?: Clock;
  /**
   * A partner's own handlers, written once for both modes: `router.on(name, async (event, { sql,
   * now, logger }) => …)`, each awaited inside the event's transaction (SQLite mode: its own
   * transaction on the file; cluster mode: the event's savepoint of the turn), after the built-in
   * handlers and before forwarding, writing with `sql.query(text, [$1, $2…])` (docs/handlers.md).
   * @default none
   */
  configureHandlers?: (router: HandlerRouter) => void;
  /** Handler retry backoff (tests shorten it). @default 1 s … 10 min */
  handlerBackoff?: { baseMs: number; maxMs: number };
  /** @default 1000 ms */
  sweepIntervalMs?: number;
  /**
   * The service's API (status query for the poller, averbação start for the admin route).
   * @default built from SERVICE_* (none when SERVICE_BASE_URL is unset)
   */
  serviceClient?: ServiceClient | null;
  /** Poller tick (tests shorten it). @default 1000 ms */
  pollTickMs?: number;
  /** How often the sender looks at each destination without a nudge (tests shorten it). @default 1000 ms */
  forwardPollMs?: number;
  /** How long background work may be held by the answers before it gets a slice anyway. @default DEFAULT_DEFERRAL */
  deferral?: DeferralPolicy;
}
