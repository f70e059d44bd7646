/**
 * The package's public API, for a partner who embeds the receiver and registers handlers of its
 * own next to the life-cycle one (`configureRouter`). Everything else is internal.
 */
export { loadConfig, type Config } from './config';
export { EventRouter } from './handlers/router';
export type { Handler, HandlerContext, HandlerEvent } from './handlers/router';
export { ClusterEventRouter } from './domain/event-router';
export type { ClusterHandler, ClusterHandlerContext, ClusterHandlerSql } from './domain/event-router';
export { createLogger } from './logger';
export { startReceiver, type Receiver, type StartOptions } from './main';
