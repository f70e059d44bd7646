import { Router } from 'express';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Store } from '../store/store';

/** `/healthz`: the process runs. `/readyz`: the database is open, migrated and takes a write. */
export function healthRoutes(deps: { store: Store; logger: Logger; clock: Clock }): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', (_req, res) => {
    try {
      deps.store.probeWrite(deps.clock.now());
      res.json({ status: 'ready' });
    } catch (err) {
      const message = (err as Error).message;
      deps.logger.warn({ err: message }, 'readiness probe failed');
      res.status(503).json({ status: 'unavailable', error: 'storage_unavailable', message });
    }
  });
  return router;
}
