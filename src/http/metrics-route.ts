import { Router } from 'express';
import type { Metrics } from '../metrics';
import type { Store } from '../store/store';

/** `/metrics`: Prometheus text; the gauges read from the database are refreshed per scrape. */
export function metricsRoute(deps: { store: Store; metrics: Metrics }): Router {
  const { store, metrics } = deps;
  const router = Router();
  router.get('/metrics', async (_req, res) => {
    for (const [status, n] of Object.entries(store.events.countByStatus()))
      metrics.eventsByStatus.set({ status }, n);
    const averbacoes = store.averbacoes.counts();
    for (const [status, n] of Object.entries(averbacoes.byStatus)) metrics.averbacoes.set({ status }, n);
    metrics.averbacoesStale.set(averbacoes.stale);
    metrics.averbacoesWaiting.set(averbacoes.waiting);
    res.set('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  return router;
}
