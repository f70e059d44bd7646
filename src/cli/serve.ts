import type { Config } from '../config';
import { createLogger } from '../logger';
import { startReceiver } from '../main';

/**
 * `serve`: migrate, listen, and stop cleanly. The first SIGTERM/SIGINT stops accepting and waits
 * for in-flight requests and their commits; a second one forces the exit.
 */
export async function serve(config: Config): Promise<void> {
  const logger = createLogger(config.logLevel, undefined, { traceIds: config.tracing !== null });
  process.on('unhandledRejection', (reason) => {
    logger.error(
      { err: reason instanceof Error ? reason.message : String(reason) },
      'unhandled promise rejection',
    );
  });
  process.on('uncaughtException', (err) => {
    // State may be inconsistent after this; everything acknowledged is already in SQLite, so exit
    // and let the supervisor restart us.
    logger.fatal({ err: err.message, stack: err.stack }, 'uncaught exception: exiting');
    logger.flush();
    process.exit(70);
  });

  for (const warning of config.warnings) logger.warn(warning);
  const receiver = await startReceiver(config, { logger });
  let signals = 0;
  const stop = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: forcing exit');
      logger.flush();
      process.exit(130);
    }
    logger.info({ signal }, 'shutting down: no new connections, finishing in-flight deliveries');
    receiver.close().then(
      () => {
        logger.flush();
        process.exitCode = 0;
        setImmediate(() => process.exit(0));
      },
      (err: Error) => {
        logger.error({ err: err.message }, 'error during shutdown');
        logger.flush();
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
