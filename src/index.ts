/**
 * The package's public API, for a partner who embeds the receiver and registers handlers of its
 * own next to the built-in ones (`configureHandlers`, the same in both modes). Everything else is
 * internal.
 */
export { loadConfig, type Config } from './config';
export { HandlerRouter } from './domain/event-router';
export type {
  ErrorHandler,
  EventHandler,
  EventHandlerContext,
  HandlerEvent,
  HandlerLogger,
  HandlerSql,
} from './domain/event-router';
export { createLogger } from './logger';
export { startReceiver, type Receiver, type StartOptions } from './main';
