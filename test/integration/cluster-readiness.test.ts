import { type AddressInfo, createServer, type Socket } from 'node:net';
import { MIGRATION_LOCK_KEY } from '../../src/postgres/pg-migrate';
import { clusterBed } from '../helpers/cluster-bed';
import { sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import type { TestReceiver } from '../helpers/receiver';

/**
 * `/readyz` of a cluster replica (issue 22): a replica the others have not heard of holds nothing
 * back, so a load balancer must not send it traffic before its relay's first heartbeat; it still
 * acknowledges what reaches it. With PostgreSQL away nobody processes, and a fleet restarted in an
 * outage must take the service's deliveries: ready anyway CLUSTER_HOLDBACK_MAX_MS after start.
 * Real receivers on loopback, a real PostgreSQL.
 */

const bed = clusterBed({ prefix: 'readiness' });

async function readyz(
  r: TestReceiver,
): Promise<{ status: number; retryAfter: string | null; body: unknown }> {
  const res = await fetch(`${r.url}/readyz`);
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.json() };
}

it('PostgreSQL away: 503 "starting" with Retry-After while within the bound, webhooks still 200; ready (ordered: false) after it', async () => {
  const waiting = await bed.receiver({
    DATABASE_URL: 'postgres://consig@127.0.0.1:9/nowhere',
    REPLICA_ID: 'replica-w',
    // Raised from the default (5 s) to the most it may be, so that "still within the bound" is what
    // the first probe sees on any machine: this replica becomes ready anyway once the bound has
    // passed since its start, whatever the load (the bound is the next replica's case, at 300 ms).
    CLUSTER_HOLDBACK_MAX_MS: '600000',
  });
  const first = await readyz(waiting);
  expect([first.status, first.retryAfter]).toEqual([503, '1']);
  expect(first.body).toMatchObject({ status: 'starting', error: 'not_ordered_yet', processing: false });
  // PostgreSQL refused the connection: the spool acknowledges (once that first try has failed).
  await waitFor(
    async () =>
      (await sendSigned(waiting.url, delivery('proposta.criada', { nu_proposta: 9901 }))).status === 200,
    'a webhook acknowledged while PostgreSQL is away',
  );

  const bounded = await bed.receiver({
    DATABASE_URL: 'postgres://consig@127.0.0.1:9/nowhere',
    REPLICA_ID: 'replica-b',
    // Lowered, so that the test waits 300 ms for the bound rather than the default 5 s.
    CLUSTER_HOLDBACK_MAX_MS: '300',
  });
  let last = await readyz(bounded);
  await waitFor(async () => (last = await readyz(bounded)).status === 200, '/readyz 200 after the bound');
  expect(last.body).toEqual({ status: 'ready', processing: false, ordered: false });
});

it('PostgreSQL there: ready once the relay has published its heartbeat, ordered: true', async () => {
  // At the default CLUSTER_HOLDBACK_MAX_MS (no raise needed: bed.replica waits for the heartbeat,
  // so the 200 comes from it, ordered: true, whether or not the bound has passed).
  const r = await bed.replica({ REPLICA_ID: 'replica-r' });
  expect(await readyz(r)).toEqual({
    status: 200,
    retryAfter: null,
    body: { status: 'ready', processing: true, ordered: true },
  });
});

it('migrating: 503 "schema_migrating" while it waits for the migration lock, past CLUSTER_HOLDBACK_MAX_MS; ready once the schema is in place (issue 46)', async () => {
  // Another runner (a migrate Job, a newer replica) holds the migration lock: this replica's schema
  // is not in place until it has run after it. The session lock is held on a connection of the test's.
  const holder = await bed.pool.connect();
  const key = MIGRATION_LOCK_KEY.toString();
  try {
    await holder.query('SELECT pg_advisory_lock($1)', [key]);
    const r = await bed.receiver({
      DATABASE_URL: bed.url,
      REPLICA_ID: 'replica-m',
      RELAY_INTERVAL_MS: '20',
      // Lowered: without the migrating rule this replica would be ready 300 ms after its start.
      CLUSTER_HOLDBACK_MAX_MS: '300',
    });
    let last = await readyz(r);
    await waitFor(
      async () =>
        (last = await readyz(r)).status === 503 &&
        (last.body as { error?: string }).error === 'schema_migrating',
      '/readyz 503 schema_migrating',
    );
    // Well past the 300 ms bound: still out of rotation, as the schema still waits for the lock.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    last = await readyz(r);
    expect([last.status, last.retryAfter]).toEqual([503, '1']);
    expect(last.body).toMatchObject({ status: 'starting', error: 'schema_migrating', processing: false });
    // Nor does it acknowledge: what it took would reach PostgreSQL after the migration, possibly after
    // later events of the same proposal taken by the others (the upgrade tier's c2).
    const held = await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 9902 }));
    expect([held.status, held.headers['retry-after'], held.body.error]).toEqual([
      503,
      '1',
      'schema_migrating',
    ]);

    await holder.query('SELECT pg_advisory_unlock($1)', [key]);
    // Past the bound, it is ready as soon as the schema is in place; ordered once its relay beats.
    await waitFor(
      async () =>
        (last = await readyz(r)).status === 200 && (last.body as { ordered?: boolean }).ordered === true,
      '/readyz 200 ordered once migrated',
    );
    expect(last.body).toEqual({ status: 'ready', processing: true, ordered: true });
  } finally {
    holder.release();
  }
});

it('before it has read the schema (PostgreSQL answers nothing yet): webhooks 503 "schema_unread"; acknowledged once PostgreSQL is known away (issue 46)', async () => {
  // A server that takes the connection and says nothing: the replica cannot know the schema yet.
  const sockets = new Set<Socket>();
  const silent = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const { port } = silent.address() as AddressInfo;
  try {
    const r = await bed.receiver({
      DATABASE_URL: `postgres://consig@127.0.0.1:${port}/nowhere`,
      REPLICA_ID: 'replica-u',
      // Raised: the hold lasts at most this long since the start, whatever PostgreSQL says.
      CLUSTER_HOLDBACK_MAX_MS: '600000',
    });
    await waitFor(() => sockets.size > 0, 'the replica connecting');
    const held = await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 9903 }));
    expect([held.status, held.headers['retry-after'], held.body.error]).toEqual([503, '1', 'schema_unread']);
    // PostgreSQL turns out to be away (the connection is cut): the spool acknowledges, as at any outage.
    for (const socket of sockets) socket.destroy();
    silent.close();
    await waitFor(
      async () =>
        (await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 9903 }))).status === 200,
      'acknowledged once PostgreSQL is known away',
    );
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
});
