import { request as httpRequest } from 'node:http';
import Database from '../../src/sqlite/sqlite-driver';
import request from 'supertest';
import { sign } from '../../src/domain/signature';
import { startTestApp, type TestApp } from '../helpers/app';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import {
  deliveriesByOutcome,
  deliveriesStored,
  eventBody,
  eventByDedupKey,
  eventById,
} from '../helpers/events';

/**
 * The webhook routes in depth, beyond the one request per row of the contract §4 table
 * (response-table.test.ts): byte-exact storage, rotation, concurrent duplicates, the dedup keys,
 * streaming limits, storage failures, group commit; then health, metrics, admin access and logs.
 * All on the server production runs (createHttpServer), over loopback, with a real SQLite file.
 */

let t: TestApp;
beforeEach(async () => {
  t = await startTestApp({ MAX_BODY_BYTES: '4096' });
});
afterEach(async () => {
  await t.close();
});

function post(
  body: unknown,
  opts: { path?: string; signature?: string | null; secret?: string; contentType?: string | null } = {},
) {
  const { raw, signature } = signed(body, opts.secret ?? SECRET);
  const headers: Record<string, string> = {};
  if (opts.contentType !== null) headers['content-type'] = opts.contentType ?? 'application/json';
  if (opts.signature !== null) headers['x-service-signature'] = opts.signature ?? signature;
  return postRaw(`${t.url}${opts.path ?? '/webhooks'}`, raw, headers);
}

const count = (table: string) =>
  (t.store.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

describe('new, valid, signed → 200 accepted, event pending', () => {
  it('stores the raw body byte-exact and one deliveries row', async () => {
    const body = `${JSON.stringify(delivery('proposta.aprovada', { webhook_id: 'wh_new', nu_proposta: 77 }))}\n`;
    const res = await post(body);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'accepted', event_id: expect.any(Number) });
    const row = eventById(t.store.db, res.body.event_id);
    expect(row).toMatchObject({
      dedup_key: 'wh_new',
      webhook_id: 'wh_new',
      kind: 'event',
      evento: 'proposta.aprovada',
      nu_proposta: 77,
      tentativa: 1,
      status: 'pending',
      duplicates: 0,
    });
    expect(eventBody(t.store.db, res.body.event_id)).toBe(body);
    expect(deliveriesStored(t.store.db)).toEqual([
      expect.objectContaining({
        path: '/webhooks',
        outcome: 'accepted',
        http_status: 200,
        dedup_key: 'wh_new',
        event_id: res.body.event_id,
        secret_index: 0,
      }),
    ]);
  });

  it('is committed before the answer: another connection sees it when the 200 arrives', async () => {
    const res = await post(delivery('proposta.criada', { webhook_id: 'wh_durable' }));
    expect(res.status).toBe(200);
    const other = new Database(t.dbPath, { readonly: true });
    try {
      expect(other.prepare('SELECT status FROM events WHERE dedup_key = ?').get('wh_durable')).toEqual({
        status: 'pending',
      });
    } finally {
      other.close();
    }
  });

  it.each([['application/json; charset=utf-8'], ['text/plain'], [null]])(
    'does not check Content-Type (%s)',
    async (contentType) => {
      const res = await post(delivery(), { contentType });
      expect(res.status).toBe(200);
      expect(res.body.status).toBe('accepted');
    },
  );

  it('accepts the second secret of a rotation and records which one matched', async () => {
    await t.close();
    t = await startTestApp({ WEBHOOK_SECRETS: `new-secret,${SECRET}` });
    const res = await post(delivery());
    expect(res.status).toBe(200);
    expect(deliveriesStored(t.store.db)[0]?.secret_index).toBe(1);
  });
});

describe('same dedup key seen before → 200 duplicate', () => {
  it('stores nothing new and counts the duplicate', async () => {
    const body = delivery('proposta.aprovada', { webhook_id: 'wh_dup' });
    const first = await post(body);
    const second = await post({ ...body, metadata: { webhook_id: 'wh_dup', tentativa: 2 } });
    expect(second.status).toBe(200);
    expect(second.body).toEqual({ status: 'duplicate', event_id: first.body.event_id });
    expect(count('events')).toBe(1);
    expect(eventById(t.store.db, first.body.event_id)).toMatchObject({ duplicates: 1, tentativa: 1 });
    expect(deliveriesByOutcome(t.store.db)).toEqual({ accepted: 1, duplicate: 1 });
  });

  it('also when 25 copies arrive at the same moment', async () => {
    const body = delivery('pagamento.realizado', { webhook_id: 'wh_race' });
    const results = await Promise.all(Array.from({ length: 25 }, () => post(body)));
    expect(results.map((r) => r.status)).toEqual(Array(25).fill(200));
    expect(results.filter((r) => r.body.status === 'accepted')).toHaveLength(1);
    expect(results.filter((r) => r.body.status === 'duplicate')).toHaveLength(24);
    expect(count('events')).toBe(1);
    expect(eventByDedupKey(t.store.db, 'wh_race')?.duplicates).toBe(24);
    expect(count('deliveries')).toBe(25);
  });

  it('without webhook_id, the same bytes are the same delivery (sha256 key)', async () => {
    const body = JSON.stringify({ evento: 'proposta.criada', dados: { nu_proposta: 5 } });
    const a = await post(body);
    const b = await post(body);
    expect([a.body.status, b.body.status]).toEqual(['accepted', 'duplicate']);
    expect(eventById(t.store.db, a.body.event_id)?.dedup_key).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('a registry result without webhook_id deduplicates on registry:<requestId>:<status>', async () => {
    const a = await post({ requestId: 'req-1', status: 'completed' }, { path: '/webhooks/registry' });
    const b = await post(
      { dados: { requestId: 'req-1', status: 'completed' } },
      { path: '/webhooks/registry' },
    );
    const c = await post({ requestId: 'req-1', status: 'processing' }, { path: '/webhooks/registry' });
    expect([a.body.status, b.body.status, c.body.status]).toEqual(['accepted', 'duplicate', 'accepted']);
    expect(eventById(t.store.db, a.body.event_id)).toMatchObject({
      kind: 'registry',
      dedup_key: 'registry:req-1:completed',
      request_id: 'req-1',
      registry_status: 'completed',
      status: 'pending',
    });
  });
});

describe('signed but not usable → 200 quarantined, status invalid', () => {
  it.each([
    ['not JSON', Buffer.from('definitely not json')],
    ['truncated JSON', Buffer.from('{"evento":"proposta.aprovada","dados":{"nu_prop')],
    ['not an object', Buffer.from('[{"evento":"proposta.aprovada"}]')],
    ['neither event nor registry result', Buffer.from('{"hello":"world"}')],
    ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d])],
    ['empty body', Buffer.alloc(0)],
  ])('%s', async (_name, raw) => {
    const res = await post(raw);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      status: 'quarantined',
      event_id: expect.any(Number),
      reason: expect.any(String),
    });
    const row = eventById(t.store.db, res.body.event_id);
    expect(row).toMatchObject({ status: 'invalid', last_error: res.body.reason });
    const stored = eventBody(t.store.db, res.body.event_id);
    expect(Buffer.isBuffer(stored) ? stored.equals(raw) : Buffer.from(stored as string).equals(raw)).toBe(
      true,
    );
    expect(deliveriesStored(t.store.db)[0]).toMatchObject({ outcome: 'quarantined', http_status: 200 });
  });
});

describe('signature missing, malformed or wrong → 401 invalid_signature', () => {
  const body = () => delivery('proposta.aprovada');
  it.each([
    ['missing', null],
    ['no prefix', 'abc'],
    ['short digest', `sha256=${'a'.repeat(63)}`],
    ['non-hex digest', `sha256=${'g'.repeat(64)}`],
    ['wrong secret', sign('wrong-secret', 'x')],
  ])('%s', async (_name, signature) => {
    const res = await post(body(), { signature });
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ error: 'invalid_signature' });
    expect(count('events')).toBe(0);
    t.writer.flush(); // audit rows go with the writer's next batch
    const rows = deliveriesStored(t.store.db);
    expect(rows).toEqual([
      expect.objectContaining({
        outcome: 'invalid_signature',
        http_status: 401,
        event_id: null,
        dedup_key: null,
      }),
    ]);
  });

  it('a body changed after signing is refused', async () => {
    const original = JSON.stringify(delivery());
    const res = await postRaw(`${t.url}/webhooks`, `${original}\n`, {
      'x-service-signature': sign(SECRET, original),
    });
    expect(res.status).toBe(401);
  });

  it('three in a row log an error that says the callback will be deactivated', async () => {
    for (let i = 0; i < 3; i++) await post(body(), { secret: 'old-secret' });
    const alarm = t.logs.lines.find((l) => l.level === 'error');
    expect(alarm?.msg).toMatch(
      /3 consecutive webhook deliveries rejected for invalid signature: the service deactivates the callback/,
    );
    const metrics = await request(t.server).get('/metrics');
    expect(metrics.text).toContain('consig_webhook_consecutive_invalid_signatures 3');
    await post(body());
    const after = await request(t.server).get('/metrics');
    expect(after.text).toContain('consig_webhook_consecutive_invalid_signatures 0');
  });
});

describe('body over MAX_BODY_BYTES → 413 payload_too_large', () => {
  it('with Content-Length, refused without reading the body', async () => {
    const big = JSON.stringify({ ...delivery(), padding: 'x'.repeat(5000) });
    const res = await post(big);
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ error: 'payload_too_large' });
    expect(count('events')).toBe(0);
    t.writer.flush(); // audit rows go with the writer's next batch
    expect(deliveriesStored(t.store.db)[0]).toMatchObject({ outcome: 'payload_too_large', http_status: 413 });
  });

  it('chunked, without Content-Length, cut off while reading', async () => {
    const res = await fetch(`${t.url}/webhooks`, {
      method: 'POST',
      headers: { 'x-service-signature': sign(SECRET, 'x') },
      body: new ReadableStream({
        start(controller) {
          for (let i = 0; i < 10; i++) controller.enqueue(new Uint8Array(1024).fill(0x61));
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(count('events')).toBe(0);
  });
});

describe('a 50 MB body is refused while it streams, not buffered first', () => {
  it('chunked: 413 arrives after a few hundred kilobytes, the rest is never read', async () => {
    await t.close();
    t = await startTestApp(); // default MAX_BODY_BYTES (256 KiB)
    const { port } = new URL(t.url);
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    const result = await new Promise<{ status: number; written: number }>((resolve, reject) => {
      let written = 0;
      let done = false;
      const req = httpRequest({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/webhooks',
        headers: { 'x-service-signature': sign(SECRET, 'x') },
      });
      req.on('response', (res) => {
        done = true;
        res.resume();
        resolve({ status: res.statusCode ?? 0, written });
        req.destroy();
      });
      req.on('error', (err) => (done ? undefined : reject(err)));
      const pump = () => {
        while (!done && written < 50 * 1024 * 1024) {
          written += chunk.length;
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        if (!done) req.end();
      };
      pump();
    });
    expect(result.status).toBe(413);
    expect(result.written).toBeLessThan(16 * 1024 * 1024);
    expect(count('events')).toBe(0);
  });

  it('declared: a Content-Length of 50 MB gets 413 before any byte of the body is read', async () => {
    const { port } = new URL(t.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/webhooks',
        headers: { 'content-length': String(50 * 1024 * 1024), 'x-service-signature': sign(SECRET, 'x') },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(status).toBe(413);
  });
});

describe('the write itself failed → 503 storage_unavailable with Retry-After, nothing stored', () => {
  it('database locked by another writer', async () => {
    const other = new Database(t.dbPath);
    other.exec('BEGIN IMMEDIATE');
    try {
      const body = delivery('proposta.aprovada', { webhook_id: 'wh_locked' });
      const res = await post(body);
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBe('5');
      expect(res.body).toMatchObject({ error: 'storage_unavailable' });
      other.exec('ROLLBACK');
      expect(eventByDedupKey(t.store.db, 'wh_locked')).toBeUndefined();
      // The service's retry then succeeds, as a new delivery (nothing was half-stored).
      const retry = await post({ ...body, metadata: { webhook_id: 'wh_locked', tentativa: 2 } });
      expect(retry.body.status).toBe('accepted');
      expect(deliveriesByOutcome(t.store.db)).toMatchObject({ storage_unavailable: 1, accepted: 1 });
    } finally {
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
    }
  });

  it('disk full', async () => {
    await t.close();
    t = await startTestApp();
    // A real SQLITE_FULL: cap the database at its current size, then send a body that needs pages.
    t.store.db.pragma(`max_page_count = ${t.store.db.pragma('page_count', { simple: true })}`);
    const res = await post({ ...delivery(), padding: 'y'.repeat(100_000) });
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('5');
    expect(res.body).toMatchObject({ error: 'storage_unavailable' });
    expect(count('events')).toBe(0);
  });

  it('a failing write fails its whole batch, and every request in it gets 503', async () => {
    const other = new Database(t.dbPath);
    other.exec(
      "CREATE TRIGGER fail_insert BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'simulated I/O error'); END",
    );
    other.close();
    const results = await Promise.all(Array.from({ length: 10 }, () => post(delivery())));
    expect(results.map((r) => r.status)).toEqual(Array(10).fill(503));
    expect(count('events')).toBe(0);
    expect(deliveriesByOutcome(t.store.db)).toEqual({ storage_unavailable: 10 });
    const readyz = await request(t.server).get('/readyz');
    expect(readyz.status).toBe(200);
  });
});

describe('group commit', () => {
  it('answers every request of a burst, each written in exactly one batch', async () => {
    const results = await Promise.all(Array.from({ length: 60 }, () => post(delivery())));
    expect(results.every((r) => r.status === 200 && r.body.status === 'accepted')).toBe(true);
    expect(count('events')).toBe(60);
    expect(t.batches.reduce((a, b) => a + b, 0)).toBe(60);
  });
});

describe('health, readiness, metrics', () => {
  it('/healthz answers 200', async () => {
    expect((await request(t.server).get('/healthz')).status).toBe(200);
  });

  it('/readyz is 200 while the DB takes writes and 503 when it does not', async () => {
    expect((await request(t.server).get('/readyz')).body).toEqual({ status: 'ready' });
    const other = new Database(t.dbPath);
    other.exec('BEGIN IMMEDIATE');
    const locked = await request(t.server).get('/readyz');
    other.exec('ROLLBACK');
    other.close();
    expect(locked.status).toBe(503);
    expect(locked.body).toMatchObject({ status: 'unavailable', error: 'storage_unavailable' });
    t.store.close();
    expect((await request(t.server).get('/readyz')).status).toBe(503);
  });

  it('/metrics counts deliveries by outcome and the ack latency', async () => {
    await post(delivery());
    await post(delivery(), { signature: null });
    const res = await request(t.server).get('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.text).toContain('consig_webhook_deliveries_total{outcome="accepted",route="/webhooks"} 1');
    expect(res.text).toContain(
      'consig_webhook_deliveries_total{outcome="invalid_signature",route="/webhooks"} 1',
    );
    expect(res.text).toMatch(/consig_webhook_ack_seconds_count\{outcome="accepted"\} 1/);
    expect(res.text).toContain('consig_events_stored_total{evento="proposta.aprovada",status="pending"} 1');
  });
});

describe('other routes', () => {
  it('GET /webhooks is 405 with Allow: POST', async () => {
    const res = await request(t.server).get('/webhooks');
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe('POST');
  });

  it('unknown routes are 404 JSON', async () => {
    const res = await request(t.server).get('/nope');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ error: 'not_found' });
  });

  it('/admin answers 404 when ADMIN_TOKEN is unset', async () => {
    expect((await request(t.server).get('/admin/events')).status).toBe(404);
  });

  it('/admin needs the bearer token when it is set', async () => {
    await t.close();
    t = await startTestApp({ ADMIN_TOKEN: 'admin-token-0123456789' });
    const accepted = await post(delivery('proposta.criada', { webhook_id: 'wh_admin' }));
    expect((await request(t.server).get('/admin/events')).status).toBe(401);
    expect((await request(t.server).get('/admin/events').set('authorization', 'Bearer nope')).status).toBe(
      401,
    );
    const ok = await request(t.server)
      .get('/admin/events')
      .set('authorization', 'Bearer admin-token-0123456789');
    expect(ok.status).toBe(200);
    expect(ok.body.events).toEqual([expect.objectContaining({ dedup_key: 'wh_admin' })]);
    const one = await request(t.server)
      .get(`/admin/events/${accepted.body.event_id}`)
      .set('authorization', 'Bearer admin-token-0123456789');
    expect(JSON.parse(one.body.event.body).metadata.webhook_id).toBe('wh_admin');
  });
});

describe('logs', () => {
  it('one line per delivery; never the CPF in full, the secret or the signature', async () => {
    const body = delivery('proposta.aprovada', { webhook_id: 'wh_log' });
    const { signature } = signed(body);
    await post(body);
    await post(body, { signature: sign('wrong', 'x') });
    const lines = t.logs.lines.filter((l) => l.msg === 'delivery' || l.msg === 'delivery rejected');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ outcome: 'accepted', webhook_id: 'wh_log', ms: expect.any(Number) });
    expect(t.logs.raw).not.toContain('12345678909');
    expect(t.logs.raw).not.toContain(SECRET);
    expect(t.logs.raw).not.toContain(signature.slice(7));
  });
});
