import { Router } from 'express';
import type { Clock } from '../clock';
import type { Config } from '../config';
import { EVENT_STATUSES } from '../domain/event-status';
import { REGISTRY_STATUSES } from '../domain/catalogue';
import { DEFAULT_STUCK_AFTER, stuckCutoffs } from '../domain/stuck';
import type { Metrics } from '../metrics';
import type { StoreGauges } from '../core/gauges';
import type { StorePort } from '../core/store-port';

/** `/metrics`: Prometheus text; the gauges read from the database are refreshed per scrape. */
export interface MetricsRouteDeps {
  /** The store (core/store-port.ts): its `gauges`, the log's figures wherever the log is. */
  port: Pick<StorePort, 'gauges'>;
  metrics: Metrics;
  clock: Clock;
  /** STUCK_AFTER. @default DEFAULT_STUCK_AFTER */
  config?: Partial<Pick<Config, 'stuckAfter'>>;
}

export function metricsRoute(deps: MetricsRouteDeps): Router {
  const { metrics, clock } = deps;
  const stuckAfter = deps.config?.stuckAfter ?? DEFAULT_STUCK_AFTER;
  const router = Router();
  router.get('/metrics', async (_req, res) => {
    const now = clock.now();
    const cutoffs = stuckCutoffs(stuckAfter, now);
    // null: the store does not answer now (PostgreSQL away); the gauges keep their last values.
    const figures = await deps.port.gauges(cutoffs);
    if (figures !== null) setFigures(metrics, figures, now);
    res.set('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  return router;
}

/** The log's figures, wherever the log is (SQLite here, PostgreSQL in cluster mode): core/gauges.ts. */
export type SharedFigures = StoreGauges;

function setFigures(metrics: Metrics, f: SharedFigures, now: Date): void {
  // Every status, 0 included: a status whose last row left (dead letters replayed) reads 0, not
  // the last count it had (alerts on `consig_events{status="dead"}` must clear).
  for (const status of EVENT_STATUSES) metrics.eventsByStatus.set({ status }, f.eventsByStatus[status] ?? 0);
  for (const status of REGISTRY_STATUSES)
    metrics.averbacoes.set({ status }, f.averbacoesByStatus[status] ?? 0);
  metrics.averbacoesStale.set(f.averbacoesStale);
  metrics.averbacoesWaiting.set(f.averbacoesWaiting);
  const oldest = f.oldestUnprocessedAt === null ? null : new Date(f.oldestUnprocessedAt).getTime();
  metrics.pipelineLag.set(oldest === null ? 0 : Math.max(0, (now.getTime() - oldest) / 1000));
  for (const [status, n] of Object.entries(f.stuckByStatus)) metrics.proposalsStuck.set({ status }, n);
}
