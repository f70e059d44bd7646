import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { OUTBOX_LOCK_KEY, storeOutbox } from '../../src/postgres/pg-outbox';
import { checkOut, sqlOf } from '../../src/postgres/pg-sql';
import type { OutboxEntry } from '../../src/domain/forwarding/messages';
import { count, openPool, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import { createTestDatabase, startTestPostgres, migrateUrl } from '../helpers/postgres';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { bodyOf, FakeDestination } from '../helpers/destination';
import { tempDir } from '../helpers/tmp';

/**
 * The outbox in cluster mode, end to end (contract §8, issue 13): the turns write it, the replica
 * holding a destination's lock sends it, `/admin/feed` on any replica reads it; its ids follow
 * commit order (the outbox lock), so a cursor never skips a message. Real receivers, a real
 * PostgreSQL this file starts, a real HTTP destination.
 */

const TOKEN = 'feed-admin-token';

let pg: LocalPostgres;
beforeAll(async () => {
  // Durable (fsync and synchronous_commit on): this file SIGKILLs the server, and a fast server
  // loses its last commits then (pg-boss's queues, created a moment before, among them).
  pg = await startTestPostgres({ fast: false });
});
afterAll(async () => {
  await pg?.stop();
});

let url: string;
let pool: Pool;
const receivers: TestReceiver[] = [];
beforeEach(async () => {
  url = await createTestDatabase(pg, 'feed');
  pool = openPool(url);
});
afterEach(async () => {
  for (const r of receivers.splice(0)) await r.stop();
  await pool.end();
});

async function replica(name: string, env: Record<string, string> = {}): Promise<TestReceiver> {
  const r = await startTestReceiver({
    env: {
      DATABASE_URL: url,
      REPLICA_ID: name,
      RELAY_INTERVAL_MS: '20',
      CLUSTER_CONCURRENCY: '2',
      FEED_ENABLED: 'true',
      ADMIN_TOKEN: TOKEN,
      ...env,
    },
  });
  receivers.push(r);
  await waitFor(() => r.runtime.state === 'running', `replica ${name} connected to PostgreSQL`);
  return r;
}

interface FeedAnswer {
  status: number;
  body: {
    messages?: { id: string; type: string; data: Record<string, unknown> }[];
    cursor?: string;
    error?: string;
  };
}

async function feed(r: { url: string }, query = '', token = TOKEN): Promise<FeedAnswer> {
  const res = await fetch(`${r.url}/admin/feed${query}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: (await res.json()) as FeedAnswer['body'] };
}

async function ack(r: { url: string }, body: unknown): Promise<void> {
  const res = await sendSigned(r.url, body);
  expect(res.status).toBe(200);
}

it('any replica serves the feed from PostgreSQL: every change once, in order, paged by cursor', async () => {
  const a = await replica('replica-a');
  const b = await replica('replica-b');
  // Two proposals, their events spread over both replicas.
  const steps = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'];
  for (const [i, evento] of steps.entries()) {
    await ack(i % 2 === 0 ? a : b, delivery(evento, { nu_proposta: 7001 }));
    await ack(i % 2 === 0 ? b : a, delivery(evento, { nu_proposta: 7002 }));
    // One proposal's next event only once the previous one is processed (the order across
    // replicas is the relay's, docs/cluster.md §9): the feed's order is what is checked here.
    await waitFor(
      async () =>
        (await count(pool, "SELECT count(*) AS n FROM events WHERE status = 'done'")) === 2 * (i + 1),
      `step ${i + 1} processed`,
    );
  }

  // From the other replica, two at a time.
  const seen: { id: string; type: string; data: Record<string, unknown> }[] = [];
  let cursor = '';
  for (let page = 0; page < 10; page++) {
    const answer = await feed(page % 2 === 0 ? b : a, `?limit=2${cursor ? `&after=${cursor}` : ''}`);
    expect(answer.status).toBe(200);
    seen.push(...(answer.body.messages ?? []));
    cursor = answer.body.cursor as string;
    if ((answer.body.messages ?? []).length < 2) break;
  }
  expect(seen.map((m) => m.type)).toEqual(Array(6).fill('proposal.changed'));
  const path = (nu: number) => seen.filter((m) => m.data.nu_proposta === nu).map((m) => m.data.to);
  expect(path(7001)).toEqual(['em_analise', 'pre_aprovada', 'aprovada']);
  expect(path(7002)).toEqual(['em_analise', 'pre_aprovada', 'aprovada']);
  // The CPF is masked (FEED_FULL_CPF unset), as in SQLite mode.
  const proposal = seen[0]!.data.proposal as { nu_cpf: string | null };
  if (proposal.nu_cpf !== null) expect(proposal.nu_cpf).toMatch(/\*/);
  // The feed's order is the outbox's id order.
  const ids = await rows<{ webhook_id: string }>(pool, 'SELECT webhook_id FROM forward_messages ORDER BY id');
  expect(seen.map((m) => m.id)).toEqual(ids.map((r) => r.webhook_id));

  // Nothing newer: an empty page, the same cursor back; a long-poll is answered by the next change.
  const idle = await feed(a, `?after=${cursor}`);
  expect(idle.body).toEqual({ messages: [], cursor });
  const waiting = feed(b, `?after=${cursor}&wait=20`);
  await ack(a, delivery('proposta.negada', { nu_proposta: 7001 }));
  const woken = await waiting;
  expect(woken.body.messages?.map((m) => [m.data.nu_proposta, m.data.to])).toEqual([[7001, 'negada']]);
});

it('the token is required, the console asks to sign in, and PostgreSQL away is a 503 while webhooks still get 200', async () => {
  const a = await replica('replica-a');
  expect((await feed(a, '', 'wrong-token')).status).toBe(401);
  // The console is served in cluster mode too (test/integration/cluster-console.test.ts): sign in first.
  const consolePage = await fetch(`${a.url}/console`, { redirect: 'manual' });
  expect([consolePage.status, consolePage.headers.get('location')]).toEqual([
    303,
    '/console/login?next=%2Fconsole',
  ]);
  expect((await feed(a, '?after=not-a-cursor')).body.error).toBe('invalid_cursor');

  // PostgreSQL gone (SIGKILL): the feed cannot be read, the webhook is still acknowledged from the spool.
  pg.kill9();
  const away = await feed(a);
  expect(away.status).toBe(503);
  expect(away.body.error).toBe('log_unavailable');
  await ack(a, delivery('proposta.criada', { nu_proposta: 7101 }));
  // Back: the spooled delivery is relayed and processed, and the feed shows it.
  await pg.restart({ mode: 'fast' });
  await waitFor(async () => {
    const answer = await feed(a);
    return answer.status === 200 && (answer.body.messages ?? []).some((m) => m.data.nu_proposta === 7101);
  }, 'the change made while PostgreSQL was away is in the feed');
});

it('message ids follow commit order: a second writer waits for the first to commit', async () => {
  await migrateUrl(url);
  // Two events to hang messages on.
  await pool.query(
    `INSERT INTO events (dedup_key, kind, evento, received_at, status) VALUES
       ('k1', 'event', 'proposta.criada', now(), 'done'), ('k2', 'event', 'proposta.criada', now(), 'done')`,
  );
  const [e1, e2] = await rows<{ id: string }>(pool, 'SELECT id FROM events ORDER BY id');
  const entry = (eventId: string, webhookId: string): OutboxEntry => ({
    message: {
      type: 'proposal.changed',
      webhookId,
      eventId: Number(eventId),
      evento: 'proposta.criada',
      nuProposta: 1,
      requestId: null,
      orderKey: 'p:1',
      createdAt: new Date().toISOString(),
      body: { id: webhookId, type: 'proposal.changed', created_at: new Date().toISOString(), data: {} },
    },
    destinations: [],
  });
  const first = await checkOut(pool);
  const second = await checkOut(pool);
  try {
    await first.query('BEGIN');
    await storeOutbox(sqlOf(first), [entry(e1!.id, 'msg_first')]);
    await second.query('BEGIN');
    let secondDone = false;
    const secondStore = storeOutbox(sqlOf(second), [entry(e2!.id, 'msg_second')]).then(() => {
      secondDone = true;
    });
    // The second writer is blocked on the outbox lock, not inserting beside the first.
    await waitFor(
      async () =>
        (await count(
          pool,
          "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = $1",
          [Number(OUTBOX_LOCK_KEY & 0xffffffffn)],
        )) === 1,
      'the second writer waiting for the outbox lock',
    );
    expect(secondDone).toBe(false);
    await first.query('COMMIT');
    await secondStore;
    await second.query('COMMIT');
  } finally {
    first.release();
    second.release();
  }
  const order = await rows<{ webhook_id: string }>(
    pool,
    'SELECT webhook_id FROM forward_messages ORDER BY id',
  );
  expect(order.map((r) => r.webhook_id)).toEqual(['msg_first', 'msg_second']);
});

it('forwarding: two replicas, every change delivered to the destination once, in order per proposal, by whichever replica holds it', async () => {
  const dest = await FakeDestination.start();
  const dir = tempDir();
  try {
    const file = join(dir.dir, 'destinations.json');
    writeFileSync(
      file,
      JSON.stringify({
        destinations: [{ name: 'crm', url: dest.url, secret: 'crm-secret', types: ['proposal.changed'] }],
      }),
    );
    const env = { DESTINATIONS_FILE: file, FEED_ENABLED: 'false' };
    const a = await replica('replica-a', env);
    const b = await replica('replica-b', env);
    const steps = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada', 'averbacao.solicitada'];
    const nus = [7201, 7202, 7203];
    for (const [i, evento] of steps.entries()) {
      for (const [j, nu] of nus.entries())
        await ack((i + j) % 2 === 0 ? a : b, delivery(evento, { nu_proposta: nu }));
      await waitFor(
        async () =>
          (await count(pool, "SELECT count(*) AS n FROM events WHERE status = 'done'")) ===
          nus.length * (i + 1),
        `step ${i + 1} processed`,
      );
    }
    const total = steps.length * nus.length;
    await waitFor(() => dest.accepted().length >= total, `${total} messages delivered`);
    await waitFor(
      async () =>
        (await count(pool, "SELECT count(*) AS n FROM forward_deliveries WHERE status = 'delivered'")) ===
        total,
      'every delivery recorded as delivered',
    );
    // Each message once (the destination answered 200 at once: no reason to send anything twice).
    expect([...dest.byWebhookId().values()].map((list) => list.length)).toEqual(Array(total).fill(1));
    for (const nu of nus) {
      const path = dest
        .accepted()
        .map((r) => bodyOf(r))
        .filter((m) => m.data.nu_proposta === nu)
        .map((m) => m.data.to);
      expect(path).toEqual(['em_analise', 'pre_aprovada', 'aprovada', 'averbacao_solicitada']);
    }
    // Exactly one replica holds the destination; the figures of /metrics come from PostgreSQL on both.
    const holders = [a, b].filter((r) => r.runtime.sender?.holding().includes('crm'));
    expect(holders).toHaveLength(1);
    for (const r of [a, b]) {
      const metrics = await (await fetch(`${r.url}/metrics`)).text();
      expect(metrics).toMatch(/consig_forward_backlog\{destination="crm"\} 0/);
    }
    // The feed is off: its route says so.
    expect((await feed(a)).status).toBe(404);
  } finally {
    for (const r of receivers.splice(0)) await r.stop();
    await dest.close();
    dir.cleanup();
  }
});
