import { delivery, postRaw, signed } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { join } from 'node:path';
import { openStore } from '../../src/sqlite/store';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import { pruneForwarded } from '../../src/core/prune-pass';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { tempDir } from '../helpers/tmp';
import {
  deliveriesStored,
  eventBody,
  eventByDedupKey,
  eventsByStatus,
  eventsListed,
} from '../helpers/events';

let r: TestReceiver | undefined;
afterEach(async () => {
  await r?.stop();
  r = undefined;
});

describe('ALLOWED_CIDRS and TRUST_PROXY', () => {
  it('refuses addresses outside the list with 403 before reading the body, and audits it', async () => {
    r = await startTestReceiver({ env: { ALLOWED_CIDRS: '10.0.0.0/8' } });
    const res = await r.send(delivery());
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ error: 'forbidden' });
    await new Promise((done) => setImmediate(done));
    expect(deliveriesStored(r.store.db)[0]).toMatchObject({
      outcome: 'forbidden',
      http_status: 403,
      remote_addr: '127.0.0.1',
    });
    expect(eventsListed(r.store.db)).toHaveLength(0);
    expect((await fetch(`${r.url}/healthz`)).status).toBe(200); // other routes are not restricted
  });

  it('behind a trusted proxy, the forwarded address decides; a forged one does not', async () => {
    r = await startTestReceiver({ env: { ALLOWED_CIDRS: '10.0.0.0/8', TRUST_PROXY: '1' } });

    const body = signed(delivery());
    const ok = await postRaw(`${r.url}/webhooks`, body.raw, {
      'x-service-signature': body.signature,
      'x-forwarded-for': '10.20.30.40',
    });
    expect(ok.status).toBe(200);
    const forged = await postRaw(`${r.url}/webhooks`, body.raw, {
      'x-service-signature': body.signature,
      'x-forwarded-for': '10.20.30.40, 198.51.100.9',
    });
    expect(forged.status).toBe(403);
  });
});

describe('retention', () => {
  it('RETENTION_DAYS removes bodies of old finished events; their dedup keys still catch duplicates', async () => {
    const tmp = tempDir();
    try {
      const first = await startTestReceiver({ dir: tmp.dir });
      const old = delivery('proposta.criada', { webhook_id: 'wh_old', nu_proposta: 1 });
      await first.send(old);
      await first.send(delivery('proposta.criada', { webhook_id: 'wh_new', nu_proposta: 2 }));
      await eventually(() => eventsByStatus(first.store.db).done === 2, 'processed');
      // Age the first one by 40 days, as if it had arrived then.
      first.store.db
        .prepare("UPDATE events SET received_at = '2020-01-01T00:00:00.000Z' WHERE dedup_key = 'wh_old'")
        .run();
      await first.close();

      r = await startTestReceiver({ dir: tmp.dir, env: { RETENTION_DAYS: '30' } });
      const rec = r;
      await eventually(
        () =>
          eventByDedupKey(rec.store.db, 'wh_old') !== undefined &&
          eventBody(rec.store.db, eventByDedupKey(rec.store.db, 'wh_old')?.id as number) === null,
        'pruned',
      );
      expect(eventBody(rec.store.db, eventByDedupKey(rec.store.db, 'wh_new')?.id as number)).not.toBeNull();
      const again = await r.send(old);
      expect(again.body.status).toBe('duplicate');
      expect(rec.logs.lines.some((l) => l.msg === 'retention: removed bodies of old finished events')).toBe(
        true,
      );
    } finally {
      await r?.stop();
      r = undefined;
      tmp.cleanup();
    }
  });

  it('pruneForwarded removes old messages delivered everywhere and keeps pending, dead and new ones', async () => {
    const tmp = tempDir();
    try {
      const store = openStore(join(tmp.dir, 'consig.db'), { migrate: true });
      const outbox = forwardOutbox(store.db);
      const message = (eventId: number, createdAt: string) => ({
        type: 'event.received' as const,
        webhookId: `msg_${eventId}`,
        eventId,
        evento: 'proposta.criada',
        nuProposta: eventId,
        requestId: null,
        orderKey: `p:${eventId}`,
        createdAt,
        body: { id: `msg_${eventId}`, type: 'event.received' as const, created_at: createdAt, data: {} },
      });
      const old = '2020-01-01T00:00:00.000Z';
      const ids = [1, 2, 3].map((e) => outbox.insert(message(e, old), ['a', 'b']) as number);
      const recent = outbox.insert(message(4, '2026-11-20T00:00:00.000Z'), ['a']) as number;
      const set = store.db.prepare(
        'UPDATE forward_deliveries SET status = ? WHERE message_id = ? AND destination = ?',
      );
      for (const d of ['a', 'b']) set.run('delivered', ids[0], d); // 1: delivered everywhere
      set.run('delivered', ids[1], 'a');
      set.run('dead', ids[1], 'b'); // 2: dead at b
      set.run('delivered', ids[2], 'a'); // 3: still pending at b
      set.run('delivered', recent, 'a'); // 4: delivered, but newer than the cutoff
      store.db
        .prepare(
          `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, outcome)
           SELECT id, 1, ?, 1, 'delivered' FROM forward_deliveries`,
        )
        .run(old);
      const { pruned } = await pruneForwarded(
        sqliteStoreSql(store.db),
        new Date('2026-01-01T00:00:00.000Z'),
        {
          messageBatch: 1,
        },
      );
      expect(pruned).toBe(1);
      const left = store.db.prepare('SELECT id FROM forward_messages ORDER BY id').all() as { id: number }[];
      expect(left.map((m) => m.id)).toEqual([ids[1], ids[2], recent]);
      const orphans = store.db
        .prepare(
          `SELECT count(*) AS n FROM forward_attempts a
           WHERE NOT EXISTS (SELECT 1 FROM forward_deliveries d WHERE d.id = a.delivery_id)`,
        )
        .get() as { n: number };
      expect(orphans.n).toBe(0);
      store.close();
    } finally {
      tmp.cleanup();
    }
  });
});
