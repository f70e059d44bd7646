import { Router } from 'express';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Store } from '../store/store';
import { BUSY_RETRY_AFTER_SECONDS } from './errors';

/**
 * `/healthz`: the process runs. `/readyz`: the database is open, migrated and takes a write, so
 * deliveries can be acknowledged. A standby (another process holds the processing lease) is ready:
 * it ingests like the holder, and the body says `processing: false`. The probe's write waits for
 * another connection's lock for a short slice only (it runs on the event loop that answers
 * webhooks): a locked file answers 503 with `Retry-After` at once.
 */
export function healthRoutes(deps: {
  store: Store;
  logger: Logger;
  clock: Clock;
  isProcessing?: (() => boolean) | undefined;
}): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', (_req, res) => {
    try {
      deps.store.probeWrite(deps.clock.now());
      const processing = deps.isProcessing?.();
      res.json(processing === undefined ? { status: 'ready' } : { status: 'ready', processing });
    } catch (err) {
      const message = (err as Error).message;
      deps.logger.warn({ err: message }, 'readiness probe failed');
      res
        .status(503)
        .set('retry-after', String(BUSY_RETRY_AFTER_SECONDS))
        .json({ status: 'unavailable', error: 'storage_unavailable', message });
    }
  });
  return router;
}
