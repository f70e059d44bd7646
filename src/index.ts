/**
 * The package's public API, for a partner who embeds the receiver and registers handlers of its
 * own next to the built-in ones (`configureHandlers`, the same in both modes). Everything else is
 * internal. `EventRouter`/`Handler`/`HandlerContext` (`configureRouter`) and the `Cluster*` ones
 * (`configureClusterRouter`) are deprecated.
 */
export { loadConfig, type Config } from './config';
export { EventRouter } from './handlers/router';
export type { Handler, HandlerContext, HandlerEvent } from './handlers/router';
export { ClusterEventRouter, HandlerRouter } from './domain/event-router';
export type {
  ClusterHandler,
  ClusterHandlerContext,
  ClusterHandlerSql,
  ErrorHandler,
  EventHandler,
  EventHandlerContext,
  HandlerLogger,
  HandlerSql,
} from './domain/event-router';
export { createLogger } from './logger';
export { startReceiver, type Receiver, type StartOptions } from './main';
