import { Router } from 'express';
import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Readiness } from '../domain/watermark';
import type { LocalFile } from './app-deps';
import { BUSY_RETRY_AFTER_SECONDS } from './errors';

/**
 * `/healthz`: the process runs. `/readyz`: the database is open, migrated and takes a write, so
 * deliveries can be acknowledged. A standby (another process holds the processing lease) is ready:
 * it ingests like the holder, and the body says `processing: false`. The probe's write waits for
 * another connection's lock for a short slice only (it runs on the event loop that answers
 * webhooks): a locked file answers 503 with `Retry-After` at once. A cluster replica is ready once
 * its relay has published a heartbeat (others then wait for what it takes; docs/cluster.md §10), or
 * CLUSTER_HOLDBACK_MAX_MS after it started: `ordered` says which. A replica that refuses
 * PostgreSQL's schema (issue 46: newer and breaking, or behind while MIGRATE_ON_START=false) is not
 * ready, whatever else holds: 503 `refused` with the reason; nor is one whose schema is not in
 * place yet (migrating, or waiting for another replica's migration): 503 `schema_migrating`.
 */
export function healthRoutes(deps: {
  store: LocalFile;
  logger: Logger;
  clock: Clock;
  isProcessing?: (() => boolean) | undefined;
  /** Cluster mode: whether this replica takes part in the order across replicas yet (ClusterNode). */
  readiness?: (() => Readiness) | undefined;
}): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', (_req, res) => {
    try {
      deps.store.probeWrite(deps.clock.now());
      const processing = deps.isProcessing?.();
      const order = deps.readiness?.();
      if (order?.refused !== undefined) {
        // Issue 46: out of rotation, with why; the webhook routes answer 503 too.
        res.status(503).set('retry-after', '5').json({
          status: 'refused',
          error: 'schema_incompatible',
          message: order.refused,
          processing,
        });
        return;
      }
      if (order?.migrating === true) {
        res.status(503).set('retry-after', '1').json({
          status: 'starting',
          error: 'schema_migrating',
          message:
            "this replica is migrating PostgreSQL's schema, or waiting for another replica's migration: it takes traffic once the schema is in place (webhooks are answered 503 meanwhile)",
          processing,
        });
        return;
      }
      if (order !== undefined && !order.ready) {
        res.status(503).set('retry-after', '1').json({
          status: 'starting',
          error: 'not_ordered_yet',
          message:
            'this replica has not published its relay heartbeat to PostgreSQL yet, so the others would not wait for what it takes: send it traffic once this answers 200 (it acknowledges webhooks meanwhile; ready anyway CLUSTER_HOLDBACK_MAX_MS after start)',
          processing,
        });
        return;
      }
      res.json(
        processing === undefined
          ? { status: 'ready' }
          : { status: 'ready', processing, ...(order === undefined ? {} : { ordered: order.ordered }) },
      );
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
