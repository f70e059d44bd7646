import type { Pool } from 'pg';
import type { DestinationStream } from 'pino';
import type { Clock } from '../../src/clock';
import { readSharedAnswers } from '../../src/postgres/pg-delivery-alarm';
import { checkOut, sqlOf } from '../../src/postgres/pg-sql';
import { DeliveryWatch } from '../../src/http/delivery-watch';
import { createLogger } from '../../src/logger';
import { createMetrics, type Metrics } from '../../src/metrics';
import { LogSink } from '../helpers/app';
import { sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import { clusterBed } from '../helpers/cluster-bed';
import type { TestReceiver } from '../helpers/receiver';

/**
 * The deactivation and silence alarms in cluster mode (interface §6.1, rule 4). The service counts
 * the failed attempts to its callback URL whatever replica answered them, so the alarm must count
 * every replica's answers: it reads them back from PostgreSQL, where each relay moves them. Real
 * replicas on a real PostgreSQL this file starts; the silence is judged on a clock the test moves.
 */

const bed = clusterBed({ prefix: 'alarm' });
let pool: Pool;
beforeEach(() => {
  pool = bed.pool;
});

const replica = (id: string): Promise<TestReceiver> =>
  bed.replica({ REPLICA_ID: id, CLUSTER_CONCURRENCY: '1' });

async function gauge(metrics: Metrics, name: string): Promise<number> {
  const text = await metrics.registry.getSingleMetricAsString(name);
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (!m?.[1]) throw new Error(`no sample for ${name} in:\n${text}`);
  return Number(m[1]);
}

const messages = (r: { logs: LogSink }, level: string) =>
  r.logs.lines.filter((l) => l.level === level).map((l) => String(l.msg));

it('three 401s answered by three replicas are one run: the last replica raises the alarm, and a 200 anywhere ends it', async () => {
  const ids = ['a', 'b', 'c'];
  const replicas: TestReceiver[] = [];
  for (const id of ids) replicas.push(await replica(id));
  for (const [i, r] of replicas.entries()) {
    expect((await sendSigned(r.url, delivery(), '/webhooks', 'a-wrong-secret')).status).toBe(401);
    // The next one only once this one is in PostgreSQL: the run is read in the order of the answers.
    await waitFor(
      async () =>
        Number(
          (await pool.query('SELECT count(*) AS n FROM deliveries WHERE replica = $1', [ids[i]])).rows[0].n,
        ) === 1,
      `the 401 of replica ${ids[i]} relayed`,
    );
  }
  const last = replicas[2] as TestReceiver;
  // Each replica alone saw one failure: only the run read back from PostgreSQL reaches three.
  await waitFor(
    async () => (await gauge(last.metrics, 'consig_webhook_deactivation_alarm')) === 1,
    'the deactivation alarm raised on the replica that answered the third 401',
  );
  expect(await gauge(last.metrics, 'consig_webhook_consecutive_failed_answers')).toBe(3);
  expect(await gauge(last.metrics, 'consig_webhook_consecutive_invalid_signatures')).toBe(3);
  expect(messages(last, 'error')).toEqual([
    expect.stringMatching(
      /^3 consecutive webhook deliveries rejected for invalid signature across the replicas: .*WEBHOOK_SECRETS/,
    ),
  ]);
  // No replica's own run reached three, so none of them spoke for itself.
  for (const r of replicas.slice(0, 2))
    expect(messages(r, 'error').filter((m) => !m.includes('across the replicas'))).toEqual([]);

  // A 200 at another replica ends the run for the cluster.
  const first = replicas[0] as TestReceiver;
  expect((await first.send(delivery())).status).toBe(200);
  await waitFor(
    async () => (await gauge(first.metrics, 'consig_webhook_consecutive_failed_answers')) === 0,
    'the run ended on the replica that answered 200',
  );
  expect(await gauge(first.metrics, 'consig_webhook_deactivation_alarm')).toBe(0);
});

/** A clock the test moves by hand. */
function manualClock(start: number) {
  let now = start;
  const clock: Clock = { now: () => new Date(now), monotonic: () => performance.now() };
  return { clock, advance: (ms: number) => (now += ms) };
}

async function insertDelivery(replicaId: string, spoolId: number, at: Date, outcome: string): Promise<void> {
  await pool.query(
    `INSERT INTO deliveries (replica, spool, spool_id, received_at, path, outcome, http_status, duration_ms)
     VALUES ($1, $1, $2, $3, '/webhooks', $4, $5, 1)`,
    [replicaId, spoolId, at, outcome, outcome === 'accepted' ? 200 : 401],
  );
}

describe('the watch on the answers read back from PostgreSQL', () => {
  const HOUR = 3_600_000;
  const t0 = Date.parse('2026-11-24T10:00:00Z');

  async function watchOn(time: ReturnType<typeof manualClock>, reachable: { ok: boolean }) {
    const metrics = createMetrics({ defaultMetrics: false });
    const logs = new LogSink();
    const watch = new DeliveryWatch({
      metrics,
      logger: createLogger('debug', logs as unknown as DestinationStream),
      clock: time.clock,
      signatureHeader: 'x-service-signature',
      maxBodyBytes: 1_000_000,
      silenceMs: HOUR,
      shared: async () => {
        if (!reachable.ok) return null;
        const client = await checkOut(pool);
        try {
          return await readSharedAnswers(sqlOf(client));
        } finally {
          client.release();
        }
      },
    });
    return { watch, metrics, logs };
  }

  beforeEach(async () => {
    // The tables, migrated by a replica that then stops.
    await bed.stop(await replica('migrator'));
  });

  it('folds the answers of every replica in the order they were answered, counting from the latest 200', async () => {
    await insertDelivery('a', 1, new Date(t0), 'invalid_signature');
    await insertDelivery('b', 1, new Date(t0 + 1000), 'accepted');
    await insertDelivery('c', 1, new Date(t0 + 3000), 'payload_too_large');
    await insertDelivery('a', 2, new Date(t0 + 2000), 'forbidden'); // relayed late, answered earlier
    const client = await checkOut(pool);
    try {
      const shared = await readSharedAnswers(sqlOf(client));
      expect(shared.run).toEqual([
        { answer: 'forbidden', at: t0 + 2000 },
        { answer: 'payload_too_large', at: t0 + 3000 },
      ]);
      expect(shared.lastDeliveryAt).toBe(t0 + 3000);
    } finally {
      client.release();
    }
  });

  it('judges the silence on the last delivery at any replica and the proposals in flight in PostgreSQL', async () => {
    const time = manualClock(t0);
    const reachable = { ok: true };
    const { watch, metrics, logs } = await watchOn(time, reachable);
    await insertDelivery('a', 1, new Date(t0), 'accepted');
    await pool.query(
      `INSERT INTO proposals (nu_proposta, stage, status, created_at, updated_at)
       VALUES ('7', 'averbacao', 'averbacao_solicitada', now(), now())`,
    );
    time.advance(HOUR);
    await watch.readShared();
    expect(await gauge(metrics, 'consig_webhook_silence_alarm')).toBe(1);
    expect(logs.lines.filter((l) => l.level === 'error').map((l) => String(l.msg))).toEqual([
      expect.stringMatching(/^no webhook delivery for 60 min while 1 proposals are in flight/),
    ]);

    // Another replica heard from the service: no silence, though this one heard nothing.
    await insertDelivery('b', 1, new Date(t0 + HOUR - 1000), 'accepted');
    await watch.readShared();
    expect(await gauge(metrics, 'consig_webhook_silence_alarm')).toBe(0);

    // PostgreSQL away: the run of this replica alone is judged, and nothing is raised blindly.
    reachable.ok = false;
    time.advance(2 * HOUR);
    await watch.readShared();
    expect(await gauge(metrics, 'consig_webhook_silence_alarm')).toBe(0);
    watch.stop();
  });
});
