import { createServer } from 'node:net';
import { chmodSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool, PoolClient } from 'pg';
import { ClusterNode } from '../../src/runtime/cluster/node';
import { pgStoreSql, transactionOn } from '../../src/postgres/pg-statements';
import { RETENTION_QUEUE } from '../../src/runtime/cluster/pg-retention';
import { PassInterrupted, pruneBodies, pruneForwarded } from '../../src/core/prune-pass';
import { EVENT_STATUSES } from '../../src/domain/event-status';
import { retentionCutoff } from '../../src/domain/retention';
import type { Db } from '../../src/sqlite/database';
import type { StoreSql } from '../../src/domain/sql/store-sql';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openSpool } from '../../src/sqlite/spool';
import { openStore, type Store } from '../../src/sqlite/store';
import { startTestApp, type TestApp } from '../helpers/app';
import {
  count,
  drain,
  memoryLogger,
  recordingTurns,
  relayOf,
  rows,
  sendSigned,
  waitFor,
} from '../helpers/cluster-db';
import { delivery, postRaw } from '../helpers/payloads';
import { pgBed } from '../helpers/cluster-bed';
import { runCli } from '../helpers/process';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';
import { migrateUrl } from '../helpers/postgres';

/**
 * RETENTION_DAYS and `prune` in cluster mode (contract §10), on a real PostgreSQL this file starts:
 * the same rule on both stores (the same rows in a SQLite log and in PostgreSQL, pruned by each
 * store's code), batches that never wait on a lock, one pass per hour however many replicas offer
 * it, the spools' relayed rows, a redelivery after its spool row left, and the command.
 */

const bed = pgBed({ prefix: 'retention' });
let url: string;
let pool: Pool;
let tmp: ReturnType<typeof tempDir>;
const closers: (() => Promise<void> | void)[] = [];
beforeEach(async () => {
  ({ url, pool } = bed);
  await migrateUrl(url);
  tmp = tempDir();
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  tmp.cleanup();
});

const DAYS = 30;
const DAY_MS = 86_400_000;
/** An instant `days` days before now, as both logs store it. */
const ago = (days: number) => new Date(Date.now() - days * DAY_MS).toISOString();
const cutoff = () => retentionCutoff(new Date(), DAYS);

/** The log on `pool`, each statement group one transaction on a connection of it, as ClusterNode's. */
function poolLog(p: Pool): StoreSql {
  const inTransaction = async <T>(fn: (client: PoolClient) => Promise<T>): Promise<T> => {
    const client = await p.connect();
    try {
      return await transactionOn(client, () => fn(client));
    } finally {
      client.release();
    }
  };
  return pgStoreSql({ read: inTransaction, writing: inTransaction });
}

/** A migrated SQLite log in this test's directory (closed after the test). */
function sqliteLog(name: string): Store {
  const store = openStore(join(tmp.dir, `${name}.db`), { migrate: true });
  closers.push(() => store.close());
  return store;
}

/** The same statement (`?` placeholders) on the SQLite log and on PostgreSQL. */
async function onBoth(db: Db, text: string, params: unknown[]): Promise<void> {
  db.prepare(text).run(...params.map((p) => (typeof p === 'boolean' ? Number(p) : p)));
  let n = 0;
  await pool.query(
    text.replace(/\?/g, () => `$${++n}`),
    params,
  );
}

async function insertEvent(
  db: Db,
  e: { id: number; key: string; status: string; receivedAt: string; body?: boolean },
): Promise<void> {
  const body =
    e.body === false ? null : Buffer.from(JSON.stringify({ evento: 'proposta.criada', key: e.key }));
  await onBoth(
    db,
    `INSERT INTO events (id, dedup_key, webhook_id, kind, evento, received_at, body, body_bytes, status)
     VALUES (?, ?, ?, 'event', 'proposta.criada', ?, ?, ?, ?)`,
    [e.id, e.key, e.key, e.receivedAt, body, body?.length ?? 0, e.status],
  );
}

const sqliteBodiesGone = (db: Db) =>
  (
    db.prepare('SELECT dedup_key FROM events WHERE body IS NULL AND body_pruned_at IS NOT NULL').all() as {
      dedup_key: string;
    }[]
  )
    .map((r) => r.dedup_key)
    .sort();
const pgBodiesGone = async () =>
  (
    await rows<{ dedup_key: string }>(
      pool,
      'SELECT dedup_key FROM events WHERE body IS NULL AND body_pruned_at IS NOT NULL',
    )
  )
    .map((r) => r.dedup_key)
    .sort();

describe('the rule, on both stores', () => {
  // Every status, old and recent, in arrival order (ids follow received_at, as when they arrived).
  const AGES = [
    { age: 'old', days: 40 },
    { age: 'recent', days: 10 },
  ] as const;
  const CASES = AGES.flatMap(({ age, days }) => EVENT_STATUSES.map((status) => ({ status, age, days })));
  // The contract (docs/configuration.md, RETENTION_DAYS): finished events older than the retention lose their bodies.
  const EXPECTED = CASES.filter((c) => c.age === 'old' && ['done', 'ignored', 'invalid'].includes(c.status))
    .map((c) => `${c.age}-${c.status}`)
    .sort();

  it.each([1, 3, 2000])(
    'removes the same bodies in SQLite and in PostgreSQL (batches of %i)',
    async (batch) => {
      const log = sqliteLog('same-rule');
      let id = 0;
      for (const c of CASES)
        await insertEvent(log.db, {
          id: ++id,
          key: `${c.age}-${c.status}`,
          status: c.status,
          receivedAt: ago(c.days),
        });
      const now = new Date();
      const sqlite = await pruneBodies(sqliteStoreSql(log.db), cutoff(), now, { bodyBatch: batch });
      const postgres = await pruneBodies(poolLog(pool), cutoff(), now, { bodyBatch: batch });

      expect(sqliteBodiesGone(log.db)).toEqual(EXPECTED);
      expect(await pgBodiesGone()).toEqual(EXPECTED);
      expect([sqlite.pruned, postgres.pruned]).toEqual([EXPECTED.length, EXPECTED.length]);
      // Rows and dedup keys stay.
      expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(CASES.length);
      // A second pass finds nothing.
      expect((await pruneBodies(poolLog(pool), cutoff(), now, { bodyBatch: batch })).pruned).toBe(0);
    },
  );

  it('in PostgreSQL, an old event relayed late (behind newer ids) loses its body too', async () => {
    const log = sqliteLog('late');
    await insertEvent(log.db, { id: 1, key: 'recent', status: 'done', receivedAt: ago(1) });
    // A spool relayed after an outage: acknowledged 40 days ago, numbered after the recent one.
    await insertEvent(log.db, { id: 2, key: 'late', status: 'done', receivedAt: ago(40) });
    await pruneBodies(poolLog(pool), cutoff(), new Date(), { bodyBatch: 1 });
    expect(await pgBodiesGone()).toEqual(['late']);
  });

  // Messages: which ones go, on both stores (their deliveries' statuses, and their age).
  const MESSAGES = [
    { name: 'old, delivered everywhere', days: 40, deliveries: ['delivered', 'delivered'], gone: true },
    { name: 'old, dead at one destination', days: 40, deliveries: ['delivered', 'dead'], gone: false },
    { name: 'old, still pending at one', days: 40, deliveries: ['pending', 'delivered'], gone: false },
    { name: 'old, to no destination', days: 40, deliveries: [], gone: true },
    { name: 'recent, delivered everywhere', days: 10, deliveries: ['delivered'], gone: false },
    { name: 'old, delivered at its only one', days: 40, deliveries: ['delivered'], gone: true },
  ];

  async function seedMessages(db: Db): Promise<void> {
    let deliveryId = 0;
    for (const [i, m] of MESSAGES.entries()) {
      const id = i + 1;
      const at = ago(m.days);
      await insertEvent(db, { id, key: `m${id}`, status: 'done', receivedAt: at });
      await onBoth(
        db,
        `INSERT INTO forward_messages (id, webhook_id, type, event_id, evento, order_key, created_at, body)
         VALUES (?, ?, 'event.received', ?, 'proposta.criada', ?, ?, '{}')`,
        [id, `msg_${id}`, id, `e:${id}`, at],
      );
      for (const [d, status] of m.deliveries.entries()) {
        deliveryId += 1;
        await onBoth(
          db,
          `INSERT INTO forward_deliveries (id, message_id, destination, order_key, status, attempts, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?, 1, ?, ?)`,
          [deliveryId, id, `dest${d}`, `e:${id}`, status, at, at],
        );
        await onBoth(
          db,
          `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, outcome)
           VALUES (?, 1, ?, 1, ?)`,
          [deliveryId, at, status === 'delivered' ? 'delivered' : 'temporary'],
        );
      }
    }
  }

  const kept = () => MESSAGES.filter((m) => !m.gone).map((m) => `msg_${MESSAGES.indexOf(m) + 1}`);

  it.each([1, 2, 500])(
    'removes the same forwarded messages in SQLite and in PostgreSQL (batches of %i)',
    async (batch) => {
      const log = sqliteLog('messages');
      await seedMessages(log.db);
      const sqlite = await pruneForwarded(sqliteStoreSql(log.db), cutoff(), { messageBatch: batch });
      const postgres = await pruneForwarded(poolLog(pool), cutoff(), { messageBatch: batch });
      const sqliteLeft = (
        log.db.prepare('SELECT webhook_id FROM forward_messages ORDER BY id').all() as {
          webhook_id: string;
        }[]
      ).map((r) => r.webhook_id);
      const pgLeft = (
        await rows<{ webhook_id: string }>(pool, 'SELECT webhook_id FROM forward_messages ORDER BY id')
      ).map((r) => r.webhook_id);
      expect(sqliteLeft).toEqual(kept());
      expect(pgLeft).toEqual(kept());
      expect(postgres.pruned).toBe(sqlite.pruned);
      // Their deliveries and attempts went with them, and nothing else.
      expect(
        await count(
          pool,
          `SELECT count(*) AS n FROM forward_deliveries d
           WHERE NOT EXISTS (SELECT 1 FROM forward_messages m WHERE m.id = d.message_id)`,
        ),
      ).toBe(0);
      const left = MESSAGES.filter((m) => !m.gone).reduce((n, m) => n + m.deliveries.length, 0);
      expect(await count(pool, 'SELECT count(*) AS n FROM forward_deliveries')).toBe(left);
      expect(await count(pool, 'SELECT count(*) AS n FROM forward_attempts')).toBe(left);
    },
  );
});

describe('batches on PostgreSQL', () => {
  async function seedOld(n: number): Promise<void> {
    const log = sqliteLog('seed');
    for (let i = 1; i <= n; i += 1)
      await insertEvent(log.db, { id: i, key: `k${i}`, status: 'done', receivedAt: ago(40) });
  }

  it('a pass stopped between batches leaves whole batches, and the next pass finishes', async () => {
    await seedOld(10);
    let batches = 0;
    await expect(
      pruneBodies(poolLog(pool), cutoff(), new Date(), {
        bodyBatch: 3,
        shouldStop: () => batches >= 2,
        onBatch: () => void (batches += 1),
      }),
    ).rejects.toBeInstanceOf(PassInterrupted);
    expect(await count(pool, 'SELECT count(*) AS n FROM events WHERE body IS NULL')).toBe(6);
    expect((await pruneBodies(poolLog(pool), cutoff(), new Date(), { bodyBatch: 3 })).pruned).toBe(4);
    expect(await count(pool, 'SELECT count(*) AS n FROM events WHERE body IS NULL')).toBe(10);
  });

  /** Holds a row lock in a transaction of its own until the returned function commits it. */
  async function holdLock(text: string, values: unknown[]): Promise<() => Promise<void>> {
    const client: PoolClient = await pool.connect();
    await client.query('BEGIN');
    await client.query(text, values);
    return async () => {
      await client.query('COMMIT');
      client.release();
    };
  }

  it('never waits for a row another transaction holds (a relay counting a duplicate): it is left for the next pass', async () => {
    await seedOld(5);
    // What the relay does to an old event when a copy of it comes in, inside its batch.
    const release = await holdLock('UPDATE events SET duplicates = duplicates + 1 WHERE dedup_key = $1', [
      'k3',
    ]);
    try {
      const first = await pruneBodies(poolLog(pool), cutoff(), new Date(), { bodyBatch: 2 });
      expect(first.pruned).toBe(4);
      expect(
        await count(pool, "SELECT count(*) AS n FROM events WHERE dedup_key = 'k3' AND body IS NULL"),
      ).toBe(0);
    } finally {
      await release();
    }
    expect((await pruneBodies(poolLog(pool), cutoff(), new Date())).pruned).toBe(1);
  });

  it('keeps a message whose delivery another transaction holds (a replay), and removes it once released', async () => {
    const log = sqliteLog('held');
    await insertEvent(log.db, { id: 1, key: 'm1', status: 'done', receivedAt: ago(40) });
    await pool.query(
      `INSERT INTO forward_messages (id, webhook_id, type, event_id, order_key, created_at, body)
       VALUES (1, 'msg_1', 'event.received', 1, 'e:1', $1, '{}')`,
      [ago(40)],
    );
    await pool.query(
      `INSERT INTO forward_deliveries (id, message_id, destination, order_key, status, created_at, updated_at)
       VALUES (1, 1, 'a', 'e:1', 'delivered', now(), now()), (2, 1, 'b', 'e:1', 'delivered', now(), now())`,
    );
    const release = await holdLock("UPDATE forward_deliveries SET status = 'pending' WHERE id = 2", []);
    try {
      expect((await pruneForwarded(poolLog(pool), cutoff())).pruned).toBe(0);
    } finally {
      await release();
    }
    // The replay committed: the message is pending at b, and stays.
    expect((await pruneForwarded(poolLog(pool), cutoff())).pruned).toBe(0);
    await pool.query("UPDATE forward_deliveries SET status = 'delivered' WHERE id = 2");
    expect((await pruneForwarded(poolLog(pool), cutoff())).pruned).toBe(1);
  });
});

describe('one pass per hour, cluster-wide', () => {
  /** Waits until the wall clock is not within `marginS` seconds of an hour's end (pg-boss's slots). */
  async function awayFromHourEnd(marginS = 30): Promise<void> {
    const left = 3600 - ((Date.now() / 1000) % 3600);
    if (left < marginS) await new Promise((r) => setTimeout(r, (left + 1) * 1000));
  }

  function replica(
    name: string,
    passes: string[],
  ): { node: ClusterNode; logger: ReturnType<typeof memoryLogger> } {
    const store = sqliteLog(name);
    const logger = memoryLogger();
    const spool = openSpool(store.db);
    const node = new ClusterNode({
      databaseUrl: url,
      replicaId: name,
      relayBatch: 100,
      relayIntervalMs: 20,
      concurrency: 1,
      maxAttempts: 3,
      backoff: { baseMs: 10, maxMs: 40 },
      schedule: { graceMs: 60_000, intervalMs: 60_000, maxIntervalMs: 60_000, maxAgeMs: 3_600_000 },
      spool,
      statusClient: null,
      logger,
      now: () => new Date(),
      // Each replica offers a pass every 50 ms: dozens of offers during the test, for one hour's slot.
      // (The spool's own schedule is the composition's: test/integration/retention-schedule.test.ts.)
      retention: { days: DAYS, offerEveryMs: 50, onPass: () => void passes.push(name) },
    });
    // Before the spool's file closes (closers run in reverse).
    closers.push(() => node.stop(2000));
    return { node, logger };
  }

  it('two replicas offering it all the time: one pass, by one of them', async () => {
    await awayFromHourEnd();
    const log = sqliteLog('seed');
    for (let i = 1; i <= 5; i += 1)
      await insertEvent(log.db, { id: i, key: `k${i}`, status: 'done', receivedAt: ago(40) });
    const passes: string[] = [];
    const a = replica('replica-a', passes);
    const b = replica('replica-b', passes);
    a.node.start();
    b.node.start();
    await waitFor(() => a.node.state === 'running' && b.node.state === 'running', 'both replicas running');
    await waitFor(() => passes.length > 0, 'a retention pass');
    // Long enough for each replica to offer about 60 more passes and for a worker to fetch any.
    await new Promise((r) => setTimeout(r, 3000));
    expect(passes).toHaveLength(1);
    expect(await count(pool, 'SELECT count(*) AS n FROM pgboss.job WHERE name = $1', [RETENTION_QUEUE])).toBe(
      1,
    );
    expect(await count(pool, 'SELECT count(*) AS n FROM events WHERE body IS NULL')).toBe(5);
    const lines = [...a.logger.lines, ...b.logger.lines];
    expect(lines.filter((l) => l.message === 'retention: pass on PostgreSQL finished')).toHaveLength(1);
    const removed = lines.filter((l) => l.message === 'retention: removed bodies of old finished events');
    expect(removed).toHaveLength(1);
    expect(removed[0]?.fields).toMatchObject({ pruned: 5, retention_days: DAYS, replica: passes[0] });
  });
});

describe("the spool's relayed rows", () => {
  async function relayedReplica(): Promise<{
    app: TestApp;
    relay: ReturnType<typeof relayOf>['relay'];
    spool: ReturnType<typeof relayOf>['spool'];
    turns: string[][];
  }> {
    const app = await startTestApp();
    closers.push(() => app.close());
    const recorded = recordingTurns();
    const { relay, spool } = relayOf(pool, app.store.db, {
      replicaId: 'replica-a',
      queueTurns: recorded.queueTurns,
    });
    return { app, relay, spool, turns: recorded.calls };
  }

  async function ack(app: TestApp, body: unknown, status: string): Promise<void> {
    const res = await sendSigned(app.url, body);
    expect(res.status).toBe(200);
    expect(res.body.status).toBe(status);
  }

  const spoolIds = (db: Db, table: 'deliveries' | 'events') =>
    (db.prepare(`SELECT id FROM ${table} ORDER BY id`).all() as { id: number }[]).map((r) => r.id);
  const age = (db: Db, ids: readonly number[], days: number) => {
    for (const id of ids) {
      const row = db.prepare('SELECT event_id FROM deliveries WHERE id = ?').get(id) as {
        event_id: number | null;
      };
      db.prepare('UPDATE deliveries SET received_at = ? WHERE id = ?').run(ago(days), id);
      if (row.event_id !== null)
        db.prepare('UPDATE events SET received_at = ? WHERE id = ?').run(ago(days), row.event_id);
    }
  };

  it('removes only rows that are relayed and old; what is left is still relayed, and a redelivery is one event', async () => {
    const { app, relay, spool, turns } = await relayedReplica();
    const db = app.store.db;
    const a = delivery('proposta.criada');
    await ack(app, a, 'accepted'); // 1
    await ack(app, delivery('proposta.criada'), 'accepted'); // 2
    await ack(app, a, 'duplicate'); // 3
    const bad = await postRaw(`${app.url}/webhooks`, Buffer.from('{}'), {
      'x-service-signature': 'sha256=00',
    });
    expect(bad.status).toBe(401); // 4
    await ack(app, delivery('proposta.criada'), 'accepted'); // 5
    await ack(app, delivery('proposta.criada'), 'accepted'); // 6
    await drain(relay);
    await ack(app, delivery('proposta.criada'), 'accepted'); // 7: not relayed
    // Arrival order, as in production: 1–4 old, 5–6 recent (relayed), 7 old but not relayed.
    age(db, [1, 2, 3, 4], 40);
    age(db, [7], 40);
    const eventsBefore = spoolIds(db, 'events');
    expect(eventsBefore).toHaveLength(5);

    const removed = spool.prune(cutoff());

    expect(spoolIds(db, 'deliveries')).toEqual([5, 6, 7]);
    // The events of deliveries 1 and 2 (3 was a duplicate of 1; 4 stored none).
    expect(removed).toEqual({ deliveries: 4, events: 2 });
    expect(spoolIds(db, 'events')).toEqual(eventsBefore.slice(2));
    // Nothing relayed twice, nothing lost: 7 goes on as usual.
    expect(spool.backlog().count).toBe(1);
    await drain(relay);
    expect(await count(pool, 'SELECT count(*) AS n FROM deliveries')).toBe(7);
    expect(await count(pool, 'SELECT count(*) AS n FROM events')).toBe(5);

    // `a` again: the spool no longer knows it and answers accepted; PostgreSQL keeps one event, a
    // duplicate more (the local one before, this one now), and no turn for it.
    const key = (a.metadata as { webhook_id: string }).webhook_id;
    const [before] = await rows<{ duplicates: number }>(
      pool,
      'SELECT duplicates FROM events WHERE dedup_key = $1',
      [key],
    );
    expect(before?.duplicates).toBe(1);
    turns.length = 0;
    await ack(app, a, 'accepted');
    await drain(relay);
    const copies = await rows<{ id: string; duplicates: number }>(
      pool,
      'SELECT id, duplicates FROM events WHERE dedup_key = $1',
      [key],
    );
    expect(copies).toHaveLength(1);
    expect(copies[0]?.duplicates).toBe(2);
    expect(turns.flat()).toEqual([]);
    const linked = await rows<{ event_id: string | null }>(
      pool,
      'SELECT event_id FROM deliveries WHERE dedup_key = $1 ORDER BY id',
      [key],
    );
    expect(linked.map((d) => d.event_id)).toEqual([copies[0]?.id, copies[0]?.id, copies[0]?.id]);
  });

  it('keeps the newest row even when everything is relayed and old, so ids never start again', async () => {
    const { app, relay, spool } = await relayedReplica();
    const db = app.store.db;
    for (let i = 0; i < 3; i += 1) await ack(app, delivery('proposta.criada'), 'accepted');
    await drain(relay);
    age(db, [1, 2, 3], 40);
    expect(spool.prune(cutoff())).toEqual({ deliveries: 2, events: 2 });
    expect(spoolIds(db, 'deliveries')).toEqual([3]);
    const next = delivery('proposta.criada');
    await ack(app, next, 'accepted');
    expect(spoolIds(db, 'deliveries')).toEqual([3, 4]);
    await drain(relay);
    expect(
      await count(pool, 'SELECT count(*) AS n FROM events WHERE dedup_key = $1', [
        (next.metadata as { webhook_id: string }).webhook_id,
      ]),
    ).toBe(1);
  });

  it('removes nothing that is not relayed, however old', async () => {
    const { app, spool } = await relayedReplica();
    for (let i = 0; i < 3; i += 1) await ack(app, delivery('proposta.criada'), 'accepted');
    age(app.store.db, [1, 2, 3], 40);
    expect(spool.prune(cutoff())).toEqual({ deliveries: 0, events: 0 });
    expect(spoolIds(app.store.db, 'deliveries')).toEqual([1, 2, 3]);
  });
});

describe('a replica with RETENTION_DAYS', () => {
  let r: TestReceiver | undefined;
  afterEach(async () => {
    await r?.stop();
    r = undefined;
  });

  it('prunes PostgreSQL once connected and its spool of relayed old rows, and logs counts (never a body)', async () => {
    const dir = join(tmp.dir, 'replica');
    mkdirSync(dir);
    const env = { DATABASE_URL: url, REPLICA_ID: 'replica-a', RELAY_INTERVAL_MS: '20' };
    // A first run without retention: three deliveries, relayed.
    const first = await startTestReceiver({ dir, env });
    // It acknowledges once it has read PostgreSQL's schema (issue 46).
    await waitFor(() => first.runtime.readiness().holdWebhooks === undefined, 'the schema read');
    for (let i = 0; i < 3; i += 1)
      expect((await first.send(delivery('proposta.criada'))).body.status).toBe('accepted');
    await waitFor(async () => (await count(pool, 'SELECT count(*) AS n FROM deliveries')) === 3, 'relayed');
    await first.stop();
    const spoolFile = openStore(join(dir, 'consig.db'));
    for (const table of ['deliveries', 'events'])
      spoolFile.db.prepare(`UPDATE ${table} SET received_at = ? WHERE id <= 2`).run(ago(40));
    spoolFile.close();
    const log = sqliteLog('seed');
    await insertEvent(log.db, { id: 100, key: 'old', status: 'done', receivedAt: ago(40) });
    await insertEvent(log.db, { id: 101, key: 'new', status: 'done', receivedAt: ago(1) });

    r = await startTestReceiver({ dir, env: { ...env, RETENTION_DAYS: String(DAYS) } });
    const rec = r;
    const logged = (msg: string) => rec.logs.lines.find((l) => l.msg === msg);
    await waitFor(() => logged('retention: pass on PostgreSQL finished'), 'the first pass on PostgreSQL');
    await waitFor(() => logged('retention: removed relayed rows from the spool'), "the spool's pass");
    expect(await pgBodiesGone()).toEqual(['old']);
    expect(logged('retention: removed bodies of old finished events')).toMatchObject({
      pruned: 1,
      retention_days: DAYS,
      replica: 'replica-a',
    });
    expect(logged('retention: removed relayed rows from the spool')).toMatchObject({
      deliveries: 2,
      events: 2,
      retention_days: DAYS,
      replica: 'replica-a',
    });
    expect(
      (rec.store.db.prepare('SELECT id FROM deliveries').all() as { id: number }[]).map((d) => d.id),
    ).toEqual([3]);
    // Counts only: no body, no CPF.
    const retentionLines = rec.logs.lines.filter((l) => String(l.msg).startsWith('retention:'));
    expect(JSON.stringify(retentionLines)).not.toMatch(/nu_cpf|12345678909|"body"|proposta\.criada/);
  });
});

describe('prune, the command, in cluster mode', () => {
  /** A spool with two relayed deliveries aged past the retention and one recent one. */
  async function spoolBeside(): Promise<string> {
    const app = await startTestApp();
    const { relay } = relayOf(pool, app.store.db, {
      replicaId: 'replica-a',
      queueTurns: recordingTurns().queueTurns,
    });
    for (let i = 0; i < 3; i += 1) {
      const res = await sendSigned(app.url, delivery('proposta.criada'));
      expect(res.body.status).toBe('accepted');
    }
    await drain(relay);
    for (const table of ['deliveries', 'events'])
      app.store.db.prepare(`UPDATE ${table} SET received_at = ? WHERE id <= 2`).run(ago(40));
    // Copied out: the app's directory goes with it.
    const path = join(tmp.dir, 'spool.db');
    await app.store.db.backup(path);
    await app.close();
    // As the receiver creates a spool (owner only): a 0644 copy would be tightened, and said so.
    chmodSync(path, 0o600);
    return path;
  }

  const spoolCount = (path: string) => {
    const store = openStore(path, { readonly: true });
    try {
      return (store.db.prepare('SELECT count(*) AS n FROM deliveries').get() as { n: number }).n;
    } finally {
      store.close();
    }
  };

  it('--json: the keys of SQLite mode, and what left the spool beside it', async () => {
    const spool = await spoolBeside();
    // PostgreSQL's events: the three relayed, aged as in the spool, and done.
    await pool.query(`UPDATE events SET status = 'done', received_at = $1 WHERE id <= 2`, [ago(40)]);
    const r = runCli(['prune', '--days', String(DAYS), '--json'], {
      DATABASE_URL: url,
      DATABASE_PATH: spool,
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(out).toMatchObject({ pruned: 2, forwarded: 0, spool: { deliveries: 2, events: 2 } });
    expect(Date.parse(out.cutoff as string)).toBeGreaterThan(Date.now() - 31 * DAY_MS);
    // The same keys as on SQLite, `spool` added.
    const sqlite = runCli(['prune', '--days', String(DAYS), '--json'], { DATABASE_PATH: spool });
    expect(sqlite.status).toBe(0);
    expect(Object.keys(out).sort()).toEqual([...Object.keys(JSON.parse(sqlite.stdout)), 'spool'].sort());
    expect(spoolCount(spool)).toBe(1);
  });

  it('without a spool beside it, says so; the text names the server without the password', async () => {
    const withPassword = new URL(url);
    withPassword.password = 'Sup3r-s3cret';
    const r = runCli(['prune', '--days', String(DAYS)], {
      DATABASE_URL: withPassword.toString(),
      DATABASE_PATH: join(tmp.dir, 'none.db'),
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^PostgreSQL postgres:\/\/127\.0\.0\.1:\d+\/retention_\d+_\d+:$/m);
    expect(r.stdout).toMatch(/removed the bodies of 0 finished event\(s\)/);
    expect(r.stdout).toMatch(/no spool at .*none\.db: only PostgreSQL was pruned/);
    expect(r.stdout + r.stderr).not.toContain('Sup3r-s3cret');
  });

  it('PostgreSQL unreachable: one line, exit code ≠ 0, and the spool untouched', async () => {
    const spool = await spoolBeside();
    const port = await closedPort();
    const r = runCli(['prune', '--days', String(DAYS), '--json'], {
      DATABASE_URL: `postgres://consig:pw@127.0.0.1:${port}/consig`,
      DATABASE_PATH: spool,
    });
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`127.0.0.1:${port}`);
    expect(spoolCount(spool)).toBe(3);
  });
});

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}
