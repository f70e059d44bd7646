import { seriesWithoutSample } from '../helpers/alert-series';
import { clusterBed } from '../helpers/cluster-bed';

/**
 * Every series deploy/prometheus/alerts.yml reads has a sample on GET /metrics of a cluster replica
 * from its start (issue 44), as alert-series.test.ts checks in SQLite mode: a real replica on a real
 * PostgreSQL, connected and its relay beating, before any delivery and before any clock step (the
 * labelled counters the rules read with `increase()` must be at 0 by then, or the first step, 503
 * or handler run is never seen as an increase).
 */

const bed = clusterBed({ prefix: 'alert_series' });

it('a replica has a sample of every series an alert reads, before any delivery', async () => {
  const replica = await bed.replica({
    FORWARD_URL: 'http://127.0.0.1:9/',
    FORWARD_SECRET: 'alert-series-forward-secret',
  });
  const res = await fetch(`${replica.url}/metrics`);
  expect(res.status).toBe(200);
  expect(seriesWithoutSample(await res.text())).toEqual([]);
});

it('an ingest-only replica (CLUSTER_CONCURRENCY=0) too', async () => {
  const replica = await bed.replica({
    REPLICA_ID: 'replica-ingest',
    CLUSTER_CONCURRENCY: '0',
    FORWARD_URL: 'http://127.0.0.1:9/',
    FORWARD_SECRET: 'alert-series-forward-secret',
  });
  const res = await fetch(`${replica.url}/metrics`);
  expect(res.status).toBe(200);
  expect(seriesWithoutSample(await res.text())).toEqual([]);
});
