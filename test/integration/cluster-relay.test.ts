import { createHash } from 'node:crypto';
import type { Pool } from 'pg';
import { type Engine, EVENTS_QUEUE, type TurnData, startEngine } from '../../src/postgres/pg-queues';
import { Relay } from '../../src/runtime/cluster/relay';
import type { SpoolGap } from '../../src/domain/relay-gap';
import { openSpool } from '../../src/sqlite/spool';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { lockKeys } from '../../src/postgres/pg-locks';
import { sqlOf } from '../../src/postgres/pg-sql';
import { startTestApp, type TestApp } from '../helpers/app';
import { runCliAsync } from '../helpers/process';
import {
  count,
  drain,
  memoryLogger,
  openPool,
  recordingTurns,
  relayOf,
  rows,
  sendSigned,
  waitFor,
} from '../helpers/cluster-db';
import { delivery, postRaw } from '../helpers/payloads';
import { createTestDatabase, startTestPostgres, workerPostgres, migrateUrl } from '../helpers/postgres';

/**
 * The relay of cluster mode (contract §10, docs/cluster.md §6), unmocked: replicas are the real
 * HTTP receiver (signature check, group-commit writer) on real SQLite files, which are their
 * spools; the relay moves those files' rows into a real PostgreSQL that this file starts.
 */

let pg: LocalPostgres;
beforeAll(async () => {
  pg = await workerPostgres();
});
afterAll(async () => {
  await pg?.stop();
});

let url: string;
let pool: Pool;
const apps: TestApp[] = [];
const engines: Engine[] = [];
beforeEach(async () => {
  url = await createTestDatabase(pg, 'relay');
  await migrateUrl(url);
  pool = openPool(url);
});
afterEach(async () => {
  for (const e of engines.splice(0)) await e.stop(2000).catch(() => undefined);
  for (const a of apps.splice(0)) await a.close();
  await pool.end();
});

/** A replica's receiving half: the production HTTP server and writer on a SQLite file of its own. */
async function replica(env: Record<string, string> = {}): Promise<TestApp> {
  const app = await startTestApp({ MAX_BODY_BYTES: '4096', ...env });
  apps.push(app);
  return app;
}

/** Sends and expects the local answer `status` (accepted, duplicate, quarantined). */
async function ack(app: TestApp, body: unknown, status: string, path = '/webhooks'): Promise<number> {
  const res = await sendSigned(app.url, body, path);
  expect(res.status).toBe(200);
  expect(res.body.status).toBe(status);
  return Number(res.body.event_id);
}

interface PgEvent {
  id: string;
  dedup_key: string;
  kind: string;
  evento: string | null;
  nu_proposta: string | null;
  request_id: string | null;
  status: string;
  duplicates: number;
  first_replica: string | null;
  last_duplicate_at: Date | null;
  processed_at: Date | null;
  last_error: string | null;
  body: Buffer | null;
  body_bytes: number;
}

const pgEvents = (p: Pool = pool) =>
  rows<PgEvent>(
    p,
    `SELECT id, dedup_key, kind, evento, nu_proposta, request_id, status, duplicates, first_replica, last_duplicate_at,
       processed_at, last_error, body, body_bytes FROM events ORDER BY id`,
  );

async function pgEvent(dedupKey: string, p: Pool = pool): Promise<PgEvent> {
  const found = (await pgEvents(p)).filter((e) => e.dedup_key === dedupKey);
  expect(found).toHaveLength(1);
  return found[0]!;
}

interface PgDelivery {
  replica: string;
  spool: string;
  spool_id: string;
  outcome: string;
  http_status: number;
  dedup_key: string | null;
  event_id: string | null;
  path: string;
  body_bytes: number | null;
  secret_index: number | null;
  remote_addr: string | null;
  detail: string | null;
  duration_ms: number;
  received_at: Date;
}

const pgDeliveries = (p: Pool = pool) =>
  rows<PgDelivery>(
    p,
    `SELECT replica, spool, spool_id, outcome, http_status, dedup_key, event_id, path, body_bytes, secret_index,
       remote_addr, detail, duration_ms, received_at FROM deliveries ORDER BY id`,
  );

const webhookId = (body: Record<string, unknown>) => (body.metadata as { webhook_id: string }).webhook_id;

/** The spool's rows in id order (what the relay reads). */
function spooled(app: TestApp) {
  return app.store.db
    .prepare(
      `SELECT id, received_at, path, outcome, http_status, dedup_key, duration_ms, body_bytes, secret_index,
         remote_addr, detail FROM deliveries ORDER BY id`,
    )
    .all() as {
    id: number;
    received_at: string;
    path: string;
    outcome: string;
    http_status: number;
    dedup_key: string | null;
    duration_ms: number;
    body_bytes: number | null;
    secret_index: number | null;
    remote_addr: string | null;
    detail: string | null;
  }[];
}

/** The audit rows of 401/413 are written with the writer's next batch: wait until `n` rows are spooled. */
const spooledCount = (app: TestApp, n: number) =>
  waitFor(() => spooled(app).length === n, `${n} deliveries spooled`, 10_000);

describe('deduplication across replicas', () => {
  it('the same delivery acknowledged by two replicas is one event: duplicates 1, first_replica the first relayed', async () => {
    const a = await replica();
    const b = await replica();
    const body = delivery('proposta.criada', { nu_proposta: 501 });
    await ack(a, body, 'accepted');
    await ack(b, body, 'accepted');
    const ka = recordingTurns();
    const kb = recordingTurns();
    await drain(relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: ka.queueTurns }).relay);
    await drain(relayOf(pool, b.store.db, { replicaId: 'replica-b', queueTurns: kb.queueTurns }).relay);

    const events = await pgEvents();
    expect(events).toHaveLength(1);
    const e = events[0]!;
    expect(e).toMatchObject({
      dedup_key: webhookId(body),
      duplicates: 1,
      first_replica: 'replica-a',
      status: 'pending',
      evento: 'proposta.criada',
      nu_proposta: '501',
      kind: 'event',
    });
    expect(e.last_duplicate_at).not.toBeNull();
    const deliveries = await pgDeliveries();
    expect(deliveries.map((d) => [d.replica, d.outcome, d.event_id])).toEqual([
      ['replica-a', 'accepted', e.id],
      ['replica-b', 'accepted', e.id],
    ]);
    // The copy needs no processing: only the first relay queued the proposal's key.
    expect(ka.calls.flat()).toEqual(['p:501']);
    expect(kb.calls.flat()).toEqual([]);
    const spools = await rows<{ replica: string; relayed_through: string }>(
      pool,
      'SELECT replica, relayed_through FROM relay_spools ORDER BY replica',
    );
    expect(spools).toEqual([
      { replica: 'replica-a', relayed_through: '1' },
      { replica: 'replica-b', relayed_through: '1' },
    ]);
  });

  it('a local `duplicate` answer adds 1, whether it is relayed in the batch of its original or a later one', async () => {
    const a = await replica();
    const b = await replica();
    const one = delivery('proposta.criada', { nu_proposta: 511 });
    const two = delivery('proposta.criada', { nu_proposta: 512 });
    await ack(a, one, 'accepted');
    await ack(a, one, 'duplicate');
    const ra = relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: recordingTurns().queueTurns });
    await drain(ra.relay); // original and its duplicate in one batch
    expect((await pgEvent(webhookId(one))).duplicates).toBe(1);

    await ack(a, one, 'duplicate');
    await drain(ra.relay); // a later batch
    expect((await pgEvent(webhookId(one))).duplicates).toBe(2);

    // The other replica: its first copy (accepted there) and its own duplicate answer.
    await ack(b, one, 'accepted');
    await ack(b, one, 'duplicate');
    await drain(
      relayOf(pool, b.store.db, { replicaId: 'replica-b', queueTurns: recordingTurns().queueTurns }).relay,
    );
    const e = await pgEvent(webhookId(one));
    expect(e.duplicates).toBe(4);
    expect(e.first_replica).toBe('replica-a');

    // Batches of one: the duplicate is relayed after its original committed.
    await ack(a, two, 'accepted');
    await ack(a, two, 'duplicate');
    const single = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
      batch: 1,
    });
    expect(await drain(single.relay)).toBe(2);
    expect((await pgEvent(webhookId(two))).duplicates).toBe(1);

    const deliveries = await pgDeliveries();
    expect(deliveries).toHaveLength(7);
    // Every copy and every duplicate answer points at the one event.
    const ids = new Map((await pgEvents()).map((x) => [x.dedup_key, x.id]));
    for (const d of deliveries) expect(d.event_id).toBe(ids.get(d.dedup_key!));
    expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(2);
  });
});

describe('a batch relayed again', () => {
  it('after a crash between PostgreSQL’s COMMIT and the spool’s cursor: no count changes, no row is inserted, nothing is queued', async () => {
    const a = await replica();
    const b = await replica();
    const d1 = delivery('proposta.criada', { nu_proposta: 601 });
    const d2 = delivery('proposta.aprovada', { nu_proposta: 601 });
    await ack(a, d1, 'accepted');
    await ack(a, d2, 'accepted');
    await ack(a, d1, 'duplicate');
    await ack(a, 'not json, quarantined', 'quarantined');
    const bad = await postRaw(`${a.url}/webhooks`, JSON.stringify(d2), {
      'x-service-signature': 'sha256=00',
    });
    expect(bad.status).toBe(401);
    await spooledCount(a, 5);
    await ack(b, d1, 'accepted');

    const turns = recordingTurns();
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: turns.queueTurns, batch: 2 }).relay,
    );
    await drain(relayOf(pool, b.store.db, { replicaId: 'replica-b', queueTurns: turns.queueTurns }).relay);
    const snapshot = async () => ({
      events: await pgEvents(),
      deliveries: await rows(pool, 'SELECT * FROM deliveries ORDER BY id'),
      spools: await rows(pool, 'SELECT spool, replica, relayed_through FROM relay_spools ORDER BY spool'),
    });
    const before = await snapshot();
    expect(before.events).toHaveLength(3);
    expect(before.deliveries).toHaveLength(6);
    expect((await pgEvent(webhookId(d1))).duplicates).toBe(2);
    const queued = turns.calls.flat().length;
    expect(queued).toBeGreaterThan(0);

    // The crash: PostgreSQL has the batches, the spool's cursor never moved.
    a.store.db.prepare('UPDATE relay_cursor SET relayed_through = 0').run();
    const again = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: turns.queueTurns,
      batch: 2,
    });
    expect(await drain(again.relay)).toBe(3); // it did send the 5 rows again
    expect(await snapshot()).toEqual(before);
    expect(turns.calls.flat()).toHaveLength(queued);
    expect(again.spool.relayedThrough()).toBe(5);

    // Half the spool again, followed by a new delivery and a new duplicate answer: only those count.
    a.store.db.prepare('UPDATE relay_cursor SET relayed_through = 2').run();
    const d3 = delivery('proposta.criada', { nu_proposta: 602 });
    await ack(a, d3, 'accepted');
    await ack(a, d2, 'duplicate');
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: turns.queueTurns, batch: 2 }).relay,
    );
    const after = await snapshot();
    expect(after.deliveries).toHaveLength(8);
    expect(after.events).toHaveLength(4);
    expect((await pgEvent(webhookId(d1))).duplicates).toBe(2);
    expect((await pgEvent(webhookId(d2))).duplicates).toBe(1);
    expect((await pgEvent(webhookId(d3))).duplicates).toBe(0);
    // Only the new event needs processing. Replica b's last heartbeat is older than it, so the
    // watermark has not reached it: its key is held (released by a relay's next beat), not queued.
    expect(turns.calls.flat().slice(queued)).toEqual([]);
    expect(await rows(pool, 'SELECT key FROM held_keys')).toEqual([{ key: 'p:602' }]);
  });

  it('a batch whose turn fails is rolled back whole, and relayed in full on the next try', async () => {
    const a = await replica();
    const d1 = delivery('proposta.criada', { nu_proposta: 611 });
    await ack(a, d1, 'accepted');
    await ack(a, d1, 'duplicate');
    let fail = true;
    const { relay, spool } = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: async () => {
        if (fail) throw new Error('turn refused');
      },
    });
    await expect(relay.relayOnce()).rejects.toThrow('turn refused');
    expect(await count(pool, 'SELECT count(*) AS n FROM deliveries')).toBe(0);
    expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(0);
    expect(spool.relayedThrough()).toBe(0);
    fail = false;
    expect(await relay.relayOnce()).toBe(2);
    expect((await pgEvent(webhookId(d1))).duplicates).toBe(1);
    expect(await count(pool, 'SELECT count(*) AS n FROM deliveries')).toBe(2);
  });
});

describe('what arrives, and how', () => {
  it('quarantined and ignored events arrive with their status and are not queued (pg-boss)', async () => {
    const engine = await startEngine(url, { max: 3, logger: memoryLogger() });
    engines.push(engine);
    const a = await replica();
    const ok = delivery('proposta.criada', { nu_proposta: 701 });
    const unknown = delivery('proposta.reavaliada', { nu_proposta: 702 });
    await ack(a, ok, 'accepted');
    await ack(a, unknown, 'accepted');
    await ack(a, 'this is not JSON', 'quarantined');
    await ack(a, '[1,2,3]', 'quarantined');
    await ack(a, { requestId: 'req-703', status: 'processing' }, 'accepted', '/webhooks/registry');
    const { relay } = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: (sql, keys) => engine.queueTurns(sql, keys),
    });
    await drain(relay);

    const events = await pgEvents();
    expect(events.map((e) => [e.kind, e.evento, e.status])).toEqual([
      ['event', 'proposta.criada', 'pending'],
      ['event', 'proposta.reavaliada', 'ignored'],
      ['event', null, 'invalid'],
      ['event', null, 'invalid'],
      ['registry', null, 'pending'],
    ]);
    const [created, ignored, notJson, notObject, registry] = events;
    expect(created!.processed_at).toBeNull();
    expect(ignored!.processed_at).not.toBeNull();
    expect(notJson!.processed_at).not.toBeNull();
    expect(notJson!.last_error).toBe('body is not JSON');
    expect(notObject!.last_error).toBe('body is not a JSON object');
    expect(registry!.request_id).toBe('req-703');

    const jobs = await rows<{ singleton_key: string; data: { key: string }; state: string }>(
      pool,
      'SELECT singleton_key, data, state FROM pgboss.job WHERE name = $1 ORDER BY singleton_key',
      [EVENTS_QUEUE],
    );
    // Only the pending events' work keys: not the ignored proposal 702, not the quarantined e:<id>.
    expect(jobs.map((j) => [j.singleton_key, j.data.key, j.state])).toEqual([
      ['p:701', 'p:701', 'created'],
      ['r:req-703', 'r:req-703', 'created'],
    ]);
    const quarantined = (await pgDeliveries()).filter((d) => d.outcome === 'quarantined');
    expect(quarantined.map((d) => d.event_id)).toEqual([notJson!.id, notObject!.id]);
  });

  it('one turn per work key however many of its events a batch carries; none for a batch of copies', async () => {
    const engine = await startEngine(url, { max: 3, logger: memoryLogger() });
    engines.push(engine);
    const a = await replica();
    const b = await replica();
    const bodies = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'].map((evento) =>
      delivery(evento, { nu_proposta: 711 }),
    );
    for (const body of bodies) {
      await ack(a, body, 'accepted');
      await ack(b, body, 'accepted');
    }
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'a', queueTurns: (s, k) => engine.queueTurns(s, k) }).relay,
    );
    await drain(
      relayOf(pool, b.store.db, { replicaId: 'b', queueTurns: (s, k) => engine.queueTurns(s, k) }).relay,
    );
    expect(
      await count(pool, 'SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND singleton_key = $2', [
        EVENTS_QUEUE,
        'p:711',
      ]),
    ).toBe(1);
    expect((await pgEvents()).map((e) => e.duplicates)).toEqual([1, 1, 1]);
  });

  it('401 and 413 deliveries arrive as delivery rows without events; every row as it was spooled', async () => {
    const a = await replica();
    const good = delivery('proposta.criada', { nu_proposta: 721 });
    const raw = JSON.stringify(delivery('proposta.aprovada', { nu_proposta: 721 }));
    expect(
      (await postRaw(`${a.url}/webhooks`, raw, { 'x-service-signature': 'sha256=' + '0'.repeat(64) })).status,
    ).toBe(401);
    expect((await postRaw(`${a.url}/webhooks`, raw)).status).toBe(401);
    const big = await sendSigned(a.url, { evento: 'proposta.criada', pad: 'x'.repeat(6000) });
    expect(big.status).toBe(413);
    await ack(a, good, 'accepted');
    await spooledCount(a, 4);
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: recordingTurns().queueTurns }).relay,
    );

    const deliveries = await pgDeliveries();
    expect(deliveries.map((d) => [d.outcome, d.http_status, d.event_id === null])).toEqual([
      ['invalid_signature', 401, true],
      ['invalid_signature', 401, true],
      ['payload_too_large', 413, true],
      ['accepted', 200, false],
    ]);
    expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(1);
    const local = spooled(a);
    deliveries.forEach((d, i) => {
      const s = local[i]!;
      expect({
        spool_id: Number(d.spool_id),
        received_at: d.received_at.toISOString(),
        path: d.path,
        outcome: d.outcome,
        http_status: d.http_status,
        dedup_key: d.dedup_key,
        duration_ms: d.duration_ms,
        body_bytes: d.body_bytes,
        secret_index: d.secret_index,
        remote_addr: d.remote_addr,
        detail: d.detail,
      }).toEqual({ ...s, spool_id: s.id, id: undefined, received_at: new Date(s.received_at).toISOString() });
    });
  });

  it('bodies arrive byte for byte: UTF-8 text as sent, a non-UTF-8 quarantined body as bytea', async () => {
    const a = await replica();
    const pretty = Buffer.from(
      `{\r\n  "evento": "proposta.criada",\r\n  "dados": {"nu_proposta": 731, "no_conveniada": "Prefeitura de São João – ç ✓ 😀"},\r\n  "metadata": {"webhook_id": "wh_bytes_${process.pid}_1", "tentativa": 1}\r\n}\r\n`,
      'utf8',
    );
    const bom = Buffer.concat([
      Buffer.from([0xef, 0xbb, 0xbf]),
      Buffer.from(JSON.stringify(delivery('proposta.criada', { nu_proposta: 732 })), 'utf8'),
    ]);
    const notUtf8 = Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28, 0x22, 0x7d]);
    const withNul = Buffer.from('quarantined\u0000after a NUL byte', 'utf8');
    const sent = [
      { raw: pretty, status: 'accepted' },
      { raw: bom, status: 'accepted' },
      { raw: notUtf8, status: 'quarantined' },
      { raw: withNul, status: 'quarantined' },
    ];
    const keys: string[] = [];
    for (const s of sent) {
      const id = await ack(a, s.raw, s.status);
      const row = a.store.db.prepare('SELECT dedup_key FROM events WHERE id = ?').get(id) as {
        dedup_key: string;
      };
      keys.push(row.dedup_key);
    }
    expect(keys[2]).toBe(`sha256:${createHash('sha256').update(notUtf8).digest('hex')}`);
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: recordingTurns().queueTurns }).relay,
    );
    for (const [i, s] of sent.entries()) {
      const e = await pgEvent(keys[i]!);
      expect(e.body_bytes).toBe(s.raw.length);
      expect(e.body!.toString('hex')).toBe(s.raw.toString('hex'));
    }
  });

  it('a replaced spool (new spool id, ids from 1 again, same REPLICA_ID) is relayed in full', async () => {
    const first = await replica();
    const d = [1, 2, 3, 4, 5].map((i) => delivery('proposta.criada', { nu_proposta: 740 + i }));
    for (const body of d.slice(0, 3)) await ack(first, body, 'accepted');
    const old = relayOf(pool, first.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
    });
    await drain(old.relay);
    await apps.splice(apps.indexOf(first), 1)[0]!.close(); // the volume is gone

    const second = await replica();
    for (const body of [d[3]!, d[4]!, d[0]!]) await ack(second, body, 'accepted');
    const fresh = relayOf(pool, second.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
    });
    expect(fresh.spool.id).not.toBe(old.spool.id);
    expect(fresh.spool.relayedThrough()).toBe(0);
    await drain(fresh.relay);

    const deliveries = await pgDeliveries();
    expect(
      deliveries.map((x) => [x.replica, x.spool === old.spool.id ? 'old' : 'new', Number(x.spool_id)]),
    ).toEqual([
      ['replica-a', 'old', 1],
      ['replica-a', 'old', 2],
      ['replica-a', 'old', 3],
      ['replica-a', 'new', 1],
      ['replica-a', 'new', 2],
      ['replica-a', 'new', 3],
    ]);
    const events = await pgEvents();
    expect(events.map((e) => e.dedup_key)).toEqual([0, 1, 2, 3, 4].map((i) => webhookId(d[i]!)));
    expect(events.map((e) => e.duplicates)).toEqual([1, 0, 0, 0, 0]);
    expect(await count(pool, "SELECT count(*) AS n FROM relay_spools WHERE replica = 'replica-a'")).toBe(2);
  });
});

describe('PostgreSQL away', () => {
  it('relayOnce throws, the spool keeps everything, and after the restart everything arrives once', async () => {
    // A server of its own, durable (not `fast`: with synchronous_commit off a crash loses commits
    // already acknowledged to the relay, which then has moved its cursor past them): this test crashes it.
    const own = await startTestPostgres({});
    const ownUrl = await createTestDatabase(own, 'outage');
    await migrateUrl(ownUrl);
    const ownPool = openPool(ownUrl);
    try {
      const a = await replica();
      const bodies = Array.from({ length: 10 }, (_, i) =>
        delivery('proposta.criada', { nu_proposta: 800 + i }),
      );
      for (const body of bodies.slice(0, 5)) await ack(a, body, 'accepted');
      const errors: Error[] = [];
      const { relay, spool } = relayOf(ownPool, a.store.db, {
        replicaId: 'replica-a',
        queueTurns: recordingTurns().queueTurns,
        onError: (err) => errors.push(err),
      });
      expect(await relay.relayOnce()).toBe(5);

      own.kill9();
      // The replica keeps acknowledging: its answers never touch PostgreSQL.
      for (const body of bodies.slice(5)) await ack(a, body, 'accepted');
      await ack(a, bodies[0], 'duplicate');
      await expect(relay.relayOnce()).rejects.toThrow();
      expect(spool.relayedThrough()).toBe(5);
      expect(spool.backlog().count).toBe(6);

      // The loop keeps trying through the outage and catches up by itself once the server is back.
      relay.start();
      await waitFor(() => errors.length >= 1, 'the relay loop to fail at least once');
      await own.restart({ mode: 'immediate' });
      await waitFor(() => spool.backlog().count === 0, 'the relay to catch up after the restart');
      await relay.stop();

      const events = await pgEvents(ownPool);
      expect(events.map((e) => e.dedup_key)).toEqual(bodies.map(webhookId));
      expect(events.map((e) => e.duplicates)).toEqual([1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
      const deliveries = await pgDeliveries(ownPool);
      expect(deliveries.map((d) => Number(d.spool_id))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
      expect(spool.relayedThrough()).toBe(11);
    } finally {
      await ownPool.end();
      await own.stop();
    }
  });

  it('a committed batch survives a crash even where synchronous_commit is off by default (docs/cluster.md §5.3)', async () => {
    // An operator may turn synchronous_commit off for the database (the throughput lever of
    // docs/cluster.md §5.3 and §7); the relay's own transaction must stay durable all the same:
    // once it commits, the spool's cursor moves past the rows and nothing will send them again.
    const own = await startTestPostgres({ settings: { synchronous_commit: 'off', wal_writer_delay: '10s' } });
    const ownUrl = await createTestDatabase(own, 'async');
    await migrateUrl(ownUrl);
    const ownPool = openPool(ownUrl);
    try {
      const a = await replica();
      const bodies = [1, 2, 3].map((i) => delivery('proposta.criada', { nu_proposta: 850 + i }));
      for (const body of bodies) await ack(a, body, 'accepted');
      const { relay, spool } = relayOf(ownPool, a.store.db, {
        replicaId: 'replica-a',
        queueTurns: recordingTurns().queueTurns,
      });
      expect(await relay.relayOnce()).toBe(3);
      expect(spool.backlog().count).toBe(0); // the spool will not send them again
      own.kill9();
      await own.restart({ mode: 'immediate' });
      const events = await waitFor(() => pgEvents(ownPool), 'PostgreSQL back after the crash');
      expect(events.map((e) => e.dedup_key)).toEqual(bodies.map(webhookId));
    } finally {
      await ownPool.end();
      await own.stop();
    }
  });
});

describe('PostgreSQL lost commits (a standby promoted while it lagged; issue 32)', () => {
  /**
   * What a promoted asynchronous standby holds: a prefix of the old primary's history. The last
   * batches of this spool are gone from it (deliveries, events and the spool's record together, as
   * they were one transaction each), and its record says so.
   */
  async function loseBatchesAfter(spoolId: string, through: number): Promise<void> {
    await pool.query(
      `WITH gone AS (DELETE FROM deliveries WHERE spool = $1 AND spool_id > $2 RETURNING dedup_key)
       DELETE FROM events WHERE dedup_key IN (SELECT dedup_key FROM gone)`,
      [spoolId, through],
    );
    await pool.query('UPDATE relay_spools SET relayed_through = $2 WHERE spool = $1', [spoolId, through]);
  }

  it('the next transaction finds the gap, publishes nothing over it, and sends it again: every acknowledged delivery arrives once', async () => {
    const a = await replica();
    const bodies = Array.from({ length: 5 }, (_, i) => delivery('proposta.criada', { nu_proposta: 900 + i }));
    for (const body of bodies.slice(0, 4)) await ack(a, body, 'accepted');
    const logger = memoryLogger();
    const gaps: [SpoolGap, number][] = [];
    const spool = openSpool(a.store.db);
    const relay = new Relay(pool, spool, {
      replicaId: 'replica-a',
      batch: 2,
      intervalMs: 20,
      queueTurns: recordingTurns().queueTurns,
      now: () => new Date(),
      logger,
      onGap: (gap, resend) => void gaps.push([gap, resend]),
    });
    expect(await drain(relay)).toBe(2);
    expect(spool.relayedThrough()).toBe(4);

    await loseBatchesAfter(spool.id, 2);
    await ack(a, bodies[4], 'accepted');
    // An idle beat first: it must not publish the spool's cursor (4) over what PostgreSQL lacks.
    expect(await relay.beat()).toBe(0);
    expect(await rows(pool, 'SELECT relayed_through FROM relay_spools')).toEqual([{ relayed_through: '2' }]);
    expect(spool.relayedThrough()).toBe(2); // rewound on disk too: retention keeps rows 3 and 4
    expect(gaps).toEqual([[{ from: 3, through: 4 }, 2]]);
    const error = logger.lines.find((l) => l.level === 'error');
    expect(error?.fields).toMatchObject({
      spool: spool.id,
      gap_from: 3,
      gap_through: 4,
      missing: 2,
      resend: 2,
    });
    expect(error?.message).toMatch(/PostgreSQL lacks deliveries .* failed over and lost commits/);

    await drain(relay);
    expect((await pgEvents()).map((e) => e.dedup_key)).toEqual(bodies.map(webhookId));
    expect((await pgDeliveries()).map((d) => Number(d.spool_id))).toEqual([1, 2, 3, 4, 5]);
    expect(await rows(pool, 'SELECT relayed_through FROM relay_spools')).toEqual([{ relayed_through: '5' }]);
    expect(gaps).toHaveLength(1); // found once
  });

  it('a batch in flight finds the gap too, and a restarted relay (cursor from the spool) finds it as well', async () => {
    const a = await replica();
    const bodies = Array.from({ length: 6 }, (_, i) => delivery('proposta.criada', { nu_proposta: 910 + i }));
    for (const body of bodies.slice(0, 3)) await ack(a, body, 'accepted');
    await drain(
      relayOf(pool, a.store.db, { replicaId: 'replica-a', queueTurns: recordingTurns().queueTurns }).relay,
    );
    const spoolId = openSpool(a.store.db).id;
    // Lost everything, the spool's record included: the standby never saw this spool.
    await loseBatchesAfter(spoolId, 0);
    await pool.query('DELETE FROM relay_spools WHERE spool = $1', [spoolId]);
    for (const body of bodies.slice(3)) await ack(a, body, 'accepted');

    // A new process: its cursor is the spool's (3), PostgreSQL has nothing of it.
    const restarted = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
      batch: 2,
    });
    expect(await restarted.relay.relayOnce()).toBe(2); // the batch from 3 abandoned; 1-2 sent instead
    await drain(restarted.relay);
    expect((await pgEvents()).map((e) => e.dedup_key)).toEqual(bodies.map(webhookId));
    expect(await rows(pool, 'SELECT relayed_through FROM relay_spools')).toEqual([{ relayed_through: '6' }]);
  });
});

describe('relay verify (the built CLI)', () => {
  it('ok while PostgreSQL holds every relayed delivery; the gap and exit 1 after lost commits; ok once sent again', async () => {
    const a = await replica();
    const b = await replica();
    for (let i = 0; i < 4; i += 1)
      await ack(a, delivery('proposta.criada', { nu_proposta: 930 + i }), 'accepted');
    await ack(b, delivery('proposta.criada', { nu_proposta: 939 }), 'accepted');
    const relayA = relayOf(pool, a.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
    });
    await drain(relayA.relay);
    await drain(
      relayOf(pool, b.store.db, { replicaId: 'replica-b', queueTurns: recordingTurns().queueTurns }).relay,
    );
    await ack(a, delivery('proposta.criada', { nu_proposta: 935 }), 'accepted'); // not relayed yet
    const verify = (...args: string[]) =>
      runCliAsync(['relay', 'verify', ...args], { DATABASE_URL: url, DATABASE_PATH: a.dbPath });

    const fine = await verify();
    expect(fine.stderr).toBe('');
    expect(fine.status).toBe(0);
    expect(fine.stdout).toContain(
      `spool ${relayA.spool.id} (${a.dbPath}): relayed through 4, PostgreSQL relayed_through 4; ok`,
    );
    expect(fine.stdout).toContain('1 deliveries not relayed yet');
    expect(fine.stdout).toMatch(/spool \S+ of replica-b: not here/);

    await pool.query(
      `WITH gone AS (DELETE FROM deliveries WHERE spool = $1 AND spool_id IN (2, 3, 4) RETURNING dedup_key)
       DELETE FROM events WHERE dedup_key IN (SELECT dedup_key FROM gone)`,
      [relayA.spool.id],
    );
    await pool.query('UPDATE relay_spools SET relayed_through = 1 WHERE spool = $1', [relayA.spool.id]);
    const gap = await verify('--json');
    expect(gap.status).toBe(1);
    expect(gap.stderr).toContain('1 spool(s) hold relayed deliveries PostgreSQL does not have');
    expect(JSON.parse(gap.stdout).verdicts[0]).toMatchObject({
      spool: relayA.spool.id,
      relayedThrough: 4,
      recorded: 1,
      missing: [{ from: 2, through: 4 }],
      backlog: 1,
    });
    const text = await verify(a.dbPath, b.dbPath);
    expect(text.status).toBe(1);
    expect(text.stdout).toContain('GAP: 3 relayed deliveries missing (spool ids 2-4)');
    expect(text.stdout).not.toContain('not here');

    await drain(relayA.relay); // the relay finds the gap and sends it again
    const again = await verify();
    expect(again.status).toBe(0);
    expect(again.stdout).toContain('relayed through 5, PostgreSQL relayed_through 5; ok');
  });

  it('a clear error outside cluster mode', async () => {
    const r = await runCliAsync(['relay', 'verify'], { DATABASE_PATH: '/nonexistent/consig.db' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('relay verify compares spools with PostgreSQL: set DATABASE_URL');
  });
});

describe('a new PostgreSQL timeline (postgres/pg-queues.ts releaseClaimsBefore)', () => {
  it('the first replica to see it fails the claims left from before, so they run at once; once per timeline', async () => {
    const engine = await startEngine(url, { max: 3, logger: memoryLogger() });
    engines.push(engine);
    await engine.queueTurns(sqlOf(pool), ['p:1', 'p:2']);
    // Claimed by a worker that died with the old primary: never completed, never failed.
    const claimed = await engine.boss.fetch<TurnData>(EVENTS_QUEUE, { batchSize: 2 });
    expect(claimed).toHaveLength(2);
    const stateOf = async (id: string) => (await engine.boss.getJobById(EVENTS_QUEUE, id))?.state;
    expect(await stateOf(claimed[0]!.id)).toBe('active');

    expect(await engine.releaseClaimsBefore(sqlOf(pool), 1)).toBe(2);
    expect(await stateOf(claimed[0]!.id)).toBe('retry');
    expect(await stateOf(claimed[1]!.id)).toBe('retry');
    // The other replicas seeing the same timeline do nothing; a later timeline is new again.
    expect(await engine.releaseClaimsBefore(sqlOf(pool), 1)).toBe(0);
    expect(await engine.releaseClaimsBefore(sqlOf(pool), 2)).toBe(0);
    expect(await rows(pool, 'SELECT timeline FROM cluster_timelines ORDER BY 1')).toEqual([
      { timeline: '1' },
      { timeline: '2' },
    ]);
  });
});

describe('the turn lock (postgres/pg-locks.ts)', () => {
  const waiting = () =>
    count(pool, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");

  it('a batch waits for a turn running on one of its keys, and commits once it has', async () => {
    const a = await replica();
    await ack(a, delivery('proposta.criada', { nu_proposta: 841 }), 'accepted');
    const turn = await pool.connect();
    try {
      await turn.query('BEGIN');
      await lockKeys(sqlOf(turn), ['p:841']);
      const relaying = relayOf(pool, a.store.db, {
        replicaId: 'a',
        queueTurns: recordingTurns().queueTurns,
      }).relay.relayOnce();
      await waitFor(waiting, 'the batch waiting for the turn');
      expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(0);
      await turn.query('COMMIT');
      expect(await relaying).toBe(1);
      expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(1);
    } finally {
      turn.release();
    }
  });

  it('a turn that starts while a batch adds to its key waits for the batch, and then sees its event', async () => {
    const a = await replica();
    await ack(a, delivery('proposta.criada', { nu_proposta: 842 }), 'accepted');
    let reached!: () => void;
    const inFlight = new Promise<void>((r) => (reached = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { relay } = relayOf(pool, a.store.db, {
      replicaId: 'a',
      queueTurns: async () => {
        reached();
        await gate; // the batch holds its transaction open after its INSERTs
      },
    });
    const relaying = relay.relayOnce();
    await inFlight;
    const turn = await pool.connect();
    try {
      await turn.query('BEGIN');
      const locked = lockKeys(sqlOf(turn), ['p:842']);
      await waitFor(waiting, 'the turn waiting for the batch');
      release();
      await locked;
      const seen = await turn.query("SELECT count(*)::int AS n FROM events WHERE nu_proposta = '842'");
      expect(seen.rows[0].n).toBe(1);
      await turn.query('COMMIT');
      expect(await relaying).toBe(1);
    } finally {
      turn.release();
    }
  });
});

describe('events.id is commit order', () => {
  it('two relays running at once: each spool’s events get increasing ids, per proposal too', async () => {
    const a = await replica();
    const b = await replica();
    const proposals = [821, 822, 823];
    const order = new Map<TestApp, string[]>([
      [a, []],
      [b, []],
    ]);
    for (let i = 0; i < 24; i++)
      for (const app of [a, b]) {
        const body = delivery('proposta.criada', { nu_proposta: proposals[i % 3] });
        await ack(app, body, 'accepted');
        order.get(app)!.push(webhookId(body));
      }
    const ra = relayOf(pool, a.store.db, {
      replicaId: 'a',
      queueTurns: recordingTurns().queueTurns,
      batch: 4,
    });
    const rb = relayOf(pool, b.store.db, {
      replicaId: 'b',
      queueTurns: recordingTurns().queueTurns,
      batch: 4,
    });
    for (;;) {
      const [na, nb] = await Promise.all([ra.relay.relayOnce(), rb.relay.relayOnce()]);
      if (na === 0 && nb === 0) break;
    }
    const idOf = new Map((await pgEvents()).map((e) => [e.dedup_key, Number(e.id)]));
    expect(idOf.size).toBe(48);
    const idsA = order.get(a)!.map((k) => idOf.get(k)!);
    const idsB = order.get(b)!.map((k) => idOf.get(k)!);
    const increasing = (ids: number[]) => ids.every((id, i) => i === 0 || id > ids[i - 1]!);
    expect(increasing(idsA)).toBe(true);
    expect(increasing(idsB)).toBe(true);
    for (const nu of proposals) {
      const ids = await rows<{ id: string; first_replica: string }>(
        pool,
        'SELECT id, first_replica FROM events WHERE nu_proposta = $1 ORDER BY id',
        [String(nu)],
      );
      for (const replicaId of ['a', 'b']) {
        const mine = ids.filter((r) => r.first_replica === replicaId).map((r) => Number(r.id));
        const expected = (replicaId === 'a' ? idsA : idsB).filter((_, i) => proposals[i % 3] === nu);
        expect(mine).toEqual(expected);
      }
    }
    // The batches did interleave (the relays really ran side by side).
    expect(Math.min(...idsA) < Math.max(...idsB) && Math.min(...idsB) < Math.max(...idsA)).toBe(true);
  });

  it('a batch waits for the one in flight: no id commits behind a higher one already visible', async () => {
    const a = await replica();
    const b = await replica();
    const ba = delivery('proposta.criada', { nu_proposta: 831 });
    const bb = delivery('proposta.aprovada', { nu_proposta: 831 });
    await ack(a, ba, 'accepted');
    await ack(b, bb, 'accepted');
    let reached!: () => void;
    const inFlight = new Promise<void>((r) => (reached = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const ra = relayOf(pool, a.store.db, {
      replicaId: 'a',
      queueTurns: async () => {
        reached();
        await gate; // A holds its transaction open after its INSERTs
      },
    });
    const rb = relayOf(pool, b.store.db, { replicaId: 'b', queueTurns: recordingTurns().queueTurns });
    const first = ra.relay.relayOnce();
    await inFlight;
    const second = rb.relay.relayOnce();
    await waitFor(
      () => count(pool, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"),
      "B's batch waiting for the relay lock",
    );
    // Neither batch is visible, and B has not taken an id past A's uncommitted one.
    expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(0);
    release();
    expect(await Promise.all([first, second])).toEqual([1, 1]);
    const idA = Number((await pgEvent(webhookId(ba))).id);
    const idB = Number((await pgEvent(webhookId(bb))).id);
    expect(idB).toBeGreaterThan(idA);
  });
});
