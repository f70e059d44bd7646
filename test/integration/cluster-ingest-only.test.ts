import type { Pool } from 'pg';
import { EVENTS_QUEUE, POLL_QUEUE } from '../../src/postgres/pg-queues';
import { FORWARD_LOCK_CLASS } from '../../src/runtime/cluster/forwarder';
import { RETENTION_QUEUE } from '../../src/runtime/cluster/pg-retention';
import { clusterBed } from '../helpers/cluster-bed';
import { count, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { FakeDestination } from '../helpers/destination';
import { type FakeService, startFakeService } from '../helpers/fake-service';
import { delivery } from '../helpers/payloads';
import type { TestReceiver } from '../helpers/receiver';

/**
 * Ingest-only replicas (CLUSTER_CONCURRENCY=0): a replica that acknowledges and relays to
 * PostgreSQL, queues the turns, serves the admin API and the feed, but registers no turn or
 * registry-poll worker in pg-boss and takes no destination; a replica with workers processes and
 * sends everything. Real replicas (the whole receiver with DATABASE_URL), a real PostgreSQL this
 * file starts, a real HTTP destination and a real HTTP fake of the service.
 */

const TOKEN = 'ingest-only-admin-token';
const FORWARD_SECRET = `whsec_${Buffer.from('ingest-only-lender-secret-01234').toString('base64')}`;

const bed = clusterBed({ prefix: 'ingest_only', env: { ADMIN_TOKEN: TOKEN, FEED_ENABLED: 'true' } });
let pool: Pool;
let destination: FakeDestination;
let service: FakeService;
beforeEach(async () => {
  pool = bed.pool;
  destination = await FakeDestination.start();
  service = await startFakeService();
  service.on('GET', '/request/:id', { json: { requestId: 'req-7301', status: 'completed' } });
});
afterEach(async () => {
  await destination.close();
  await service.close();
});

/** A replica with what an ingest-only one must leave alone configured: a destination, the service's API. */
function replica(name: string, concurrency: string, env: Record<string, string> = {}): Promise<TestReceiver> {
  return bed.replica({
    REPLICA_ID: name,
    CLUSTER_CONCURRENCY: concurrency,
    FORWARD_URL: destination.url,
    FORWARD_SECRET,
    SERVICE_BASE_URL: service.url,
    SERVICE_ACCESS_TOKEN: 'access-token-1',
    REGISTRY_WEBHOOK_GRACE_MS: '0',
    REGISTRY_POLL_INTERVAL_MS: '200',
    ...env,
  });
}

async function scrape(r: TestReceiver): Promise<{ holder: number | null; connected: number | null }> {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  const value = (name: string) => {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    return m?.[1] === undefined ? null : Number(m[1]);
  };
  return { holder: value('consig_processing_holder'), connected: value('consig_cluster_connected') };
}

async function readyz(r: TestReceiver): Promise<unknown> {
  const res = await fetch(`${r.url}/readyz`);
  return { status: res.status, body: await res.json() };
}

/** Forwarding locks held in the database, by whichever replica (forwarder.ts's two-int key form). */
const forwardLocks = () =>
  count(
    pool,
    `SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::oid AND objsubid = 2
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [FORWARD_LOCK_CLASS],
  );

const turnStates = () =>
  rows<{ state: string; n: string }>(
    pool,
    'SELECT state, count(*) AS n FROM pgboss.job WHERE name = $1 GROUP BY state ORDER BY state',
    [EVENTS_QUEUE],
  );

/**
 * How long the test watches an ingest-only replica do nothing. A replica with workers fetches a
 * turn at once on pg-boss's NOTIFY, and polls every 0.5 s besides (src/runtime/cluster/node.ts); the tests'
 * handler backoff is 10–40 ms. Three seconds is six polling intervals: with workers running, every
 * event here would be done long before.
 */
const IDLE_WATCH_MS = 3000;

it('an ingest-only replica acknowledges and relays but processes nothing; a processing replica then processes it all', async () => {
  const a = await replica('ingest-a', '0', { RETENTION_DAYS: '30' });

  // No turn or registry-poll worker in pg-boss; retention is still offered and taken (hourly, mostly
  // PostgreSQL's work); no destination's lock.
  expect(a.runtime.workerQueues()).toEqual([RETENTION_QUEUE]);
  expect(a.runtime.processing).toBe(false);
  expect(await readyz(a)).toEqual({
    status: 200,
    body: { status: 'ready', processing: false, ordered: true },
  });
  expect(await scrape(a)).toEqual({ holder: 0, connected: 1 });

  const sent = [
    delivery('proposta.criada', { nu_proposta: 7101 }),
    delivery('proposta.pre_aprovada', { nu_proposta: 7101 }),
    delivery('proposta.aprovada', { nu_proposta: 7101 }),
    delivery('proposta.criada', { nu_proposta: 7102 }),
    delivery('proposta.pre_aprovada', { nu_proposta: 7102 }),
    delivery('averbacao.solicitada', { nu_proposta: 7103, dados: { requestId: 'req-7301' } }),
  ];
  for (const body of sent) {
    const res = await sendSigned(a.url, body);
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('accepted');
  }
  await waitFor(
    async () => (await count(pool, 'SELECT count(*) AS n FROM events')) === sent.length,
    'every delivery relayed to PostgreSQL',
  );
  // The relay queued one turn per work key, in its transaction.
  expect(await turnStates()).toEqual([{ state: 'created', n: '3' }]);

  await new Promise((r) => setTimeout(r, IDLE_WATCH_MS));
  expect(await rows(pool, 'SELECT status, count(*) AS n FROM events GROUP BY status')).toEqual([
    { status: 'pending', n: '6' },
  ]);
  expect(await count(pool, 'SELECT count(*) AS n FROM proposals')).toBe(0);
  expect(await count(pool, 'SELECT count(*) AS n FROM averbacoes')).toBe(0);
  expect(await turnStates()).toEqual([{ state: 'created', n: '3' }]);
  expect(service.requestsTo('GET', '/request/')).toEqual([]);
  expect(a.runtime.sender?.holding()).toEqual([]);
  expect(await forwardLocks()).toBe(0);
  expect(destination.requests).toEqual([]);
  // Nothing processed, so nothing stored for the feed; the route answers all the same.
  const empty = await fetch(`${a.url}/admin/feed`, { headers: { authorization: `Bearer ${TOKEN}` } });
  expect(empty.status).toBe(200);
  expect(((await empty.json()) as { messages: unknown[] }).messages).toEqual([]);

  const b = await replica('processing-b', '2');
  expect(b.runtime.workerQueues()).toEqual([EVENTS_QUEUE, POLL_QUEUE]);
  expect(b.runtime.processing).toBe(true);
  expect(await readyz(b)).toEqual({
    status: 200,
    body: { status: 'ready', processing: true, ordered: true },
  });
  expect(await scrape(b)).toEqual({ holder: 1, connected: 1 });

  await waitFor(
    async () => (await count(pool, "SELECT count(*) AS n FROM events WHERE status = 'done'")) === sent.length,
    'every event processed by the processing replica',
  );
  expect(await rows(pool, 'SELECT nu_proposta, status FROM proposals ORDER BY nu_proposta')).toEqual([
    { nu_proposta: '7101', status: 'aprovada' },
    { nu_proposta: '7102', status: 'pre_aprovada' },
    { nu_proposta: '7103', status: 'averbacao_solicitada' },
  ]);
  // The registration's poll ran on b (the only poll worker), and completed it.
  await waitFor(
    async () =>
      (await rows<{ status: string }>(pool, 'SELECT status FROM averbacoes'))[0]?.status === 'completed',
    'the registration polled to completion',
  );
  // b sends the destination; a still holds nothing.
  await waitFor(() => b.runtime.sender?.holding().includes('default'), 'b holds the destination');
  await waitFor(() => destination.requests.length > 0, 'messages sent to the destination');
  expect(a.runtime.sender?.holding()).toEqual([]);
  expect(await forwardLocks()).toBe(1);

  // The ingest-only replica goes on answering; what it takes now is processed by b.
  expect((await sendSigned(a.url, delivery('proposta.aprovada', { nu_proposta: 7102 }))).status).toBe(200);
  await waitFor(
    async () =>
      (await rows<{ status: string }>(pool, "SELECT status FROM proposals WHERE nu_proposta = '7102'"))[0]
        ?.status === 'aprovada',
    "a's new delivery processed by b",
  );
  // a serves the feed of what b processed, and still reports itself as not processing.
  const feed = await fetch(`${a.url}/admin/feed?limit=100`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(feed.status).toBe(200);
  const messages = ((await feed.json()) as { messages: { type: string }[] }).messages;
  expect(messages.filter((m) => m.type === 'proposal.changed').length).toBeGreaterThanOrEqual(7);
  expect(await scrape(a)).toEqual({ holder: 0, connected: 1 });
  expect(a.runtime.workerQueues()).toEqual([RETENTION_QUEUE]);
});
