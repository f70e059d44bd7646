import { Router } from 'express';
import type { Clock } from '../clock';
import type { Config } from '../config';
import { EVENT_STATUSES } from '../domain/event-status';
import { REGISTRY_STATUSES } from '../domain/catalogue';
import { DEFAULT_STUCK_AFTER, stuckCutoffs } from '../domain/stuck';
import type { Metrics } from '../metrics';
import { proposalLists } from '../store/proposal-lists';
import type { Store } from '../store/store';

/** `/metrics`: Prometheus text; the gauges read from the database are refreshed per scrape. */
export function metricsRoute(deps: {
  store: Store;
  metrics: Metrics;
  clock: Clock;
  /** STUCK_AFTER. @default DEFAULT_STUCK_AFTER */
  config?: Partial<Pick<Config, 'stuckAfter'>>;
}): Router {
  const { store, metrics, clock } = deps;
  const lists = proposalLists(store.db);
  const stuckAfter = deps.config?.stuckAfter ?? DEFAULT_STUCK_AFTER;
  const router = Router();
  router.get('/metrics', async (_req, res) => {
    // Every status, 0 included: a status whose last row left (dead letters replayed) reads 0, not
    // the last count it had (alerts on `consig_events{status="dead"}` must clear).
    const events: Record<string, number> = store.events.countByStatus();
    for (const status of EVENT_STATUSES) metrics.eventsByStatus.set({ status }, events[status] ?? 0);
    const averbacoes = store.averbacoes.counts();
    const byStatus: Record<string, number> = averbacoes.byStatus;
    for (const status of REGISTRY_STATUSES) metrics.averbacoes.set({ status }, byStatus[status] ?? 0);
    metrics.averbacoesStale.set(averbacoes.stale);
    metrics.averbacoesWaiting.set(averbacoes.waiting);
    const now = clock.now();
    const oldest = store.events.oldestUnprocessedAt();
    metrics.pipelineLag.set(oldest === null ? 0 : Math.max(0, (now.getTime() - Date.parse(oldest)) / 1000));
    for (const [status, n] of Object.entries(lists.stuckCounts(stuckCutoffs(stuckAfter, now))))
      metrics.proposalsStuck.set({ status }, n);
    res.set('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  return router;
}
