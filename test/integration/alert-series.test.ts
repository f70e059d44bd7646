import {
  alertExpressions,
  formatSelector,
  parseSamples,
  selectorsIn,
  seriesWithoutSample,
} from '../helpers/alert-series';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Every series deploy/prometheus/alerts.yml reads has a sample on GET /metrics of a receiver in
 * SQLite mode from its start, before any delivery (issue 44): the labelled counters that rules read
 * with `increase()` or `rate()` at 0, so that the first event is an increase. The selectors come
 * from the rules themselves (test/helpers/alert-series.ts), so a new rule is checked the day it is
 * written. Cluster mode's replicas: cluster-alert-series.test.ts, the same check on PostgreSQL.
 */

describe('the selectors of the alerting rules, as PromQL reads them', () => {
  it('are the vector selectors of an expression, not its functions, keywords, label lists or ranges', () => {
    const read = (expr: string): string[] => selectorsIn(expr).map(formatSelector);
    expect(read('increase(a_total{clock="order"}[15m]) > 0')).toEqual(['a_total{clock="order"}']);
    expect(read('sum without (route) (increase(b_total{outcome="x",route=~"/w.*"}[5m])) > 0')).toEqual([
      'b_total{outcome="x",route=~"/w.*"}',
    ]);
    expect(
      read(
        'up == 0 and on (job) group by (job) (present_over_time(c[1d])) unless max by (le) (d offset 5m) == bool 2',
      ),
    ).toEqual(['up', 'c', 'd']);
    expect(read('e > 0 and ignoring (destination) f{a!=\'1\', b!~"2|3"} == 1 or {__name__="g"}')).toEqual([
      'e',
      'f{a!="1",b!~"2|3"}',
      'g',
    ]);
    expect(read('absent(h) or abs(i) > 0.02 or rate(j[5m:1m]) > 1e3')).toEqual(['h', 'i', 'j']);
  });

  it('are found in every rule of alerts.yml', () => {
    const rules = alertExpressions();
    expect(rules.length).toBeGreaterThan(25);
    expect(rules.filter((r) => selectorsIn(r.expr).length === 0)).toEqual([]);
    expect(selectorsIn(rules.find((r) => r.alert === 'ConsigOrderClockStepped')?.expr ?? '')).toEqual([
      { metric: 'consig_cluster_clock_steps_total', matchers: [{ label: 'clock', op: '=', value: 'order' }] },
    ]);
  });

  it('are each matched against /metrics sample by sample, labels included', () => {
    const rules =
      'groups:\n  - name: t\n    rules:\n      - alert: A\n        expr: increase(x_total{clock="order"}[15m]) > 0\n';
    expect(seriesWithoutSample('x_total{clock="wall"} 0\n', rules)).toEqual([
      'x_total{clock="order"} (read by A)',
    ]);
    expect(seriesWithoutSample('# TYPE x_total counter\nx_total{clock="order"} 0\n', rules)).toEqual([]);
    expect(parseSamples('y{a="q\\"r",b="s"} 1')).toEqual([{ name: 'y', labels: { a: 'q"r', b: 's' } }]);
  });
});

describe('GET /metrics in SQLite mode, at startup', () => {
  let receiver: TestReceiver;

  beforeAll(async () => {
    // A destination, so that the per-destination series have their known label value; never
    // reached (nothing is sent before the scrape).
    receiver = await startTestReceiver({
      env: { FORWARD_URL: 'http://127.0.0.1:9/', FORWARD_SECRET: 'alert-series-forward-secret' },
    });
  });

  afterAll(async () => {
    await receiver?.stop();
  });

  it('has a sample of every series an alert reads, before any delivery', async () => {
    const res = await fetch(`${receiver.url}/metrics`);
    expect(res.status).toBe(200);
    expect(seriesWithoutSample(await res.text())).toEqual([]);
  });
});
