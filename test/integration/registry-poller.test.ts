import { type FakeService, startFakeService } from '../helpers/fake-service';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';
import { eventsListed } from '../helpers/events';

/**
 * The registry poller against a real HTTP fake of the service on loopback, with the real client
 * built from SERVICE_* (Bearer token and x-api-key), the real pipeline and a real SQLite file.
 */

let fake: FakeService;
let r: TestReceiver | undefined;
beforeEach(async () => {
  fake = await startFakeService();
});
afterEach(async () => {
  await r?.stop();
  r = undefined;
  await fake.close();
});

function env(extra: Record<string, string> = {}): Record<string, string> {
  return {
    ADMIN_TOKEN: 'admin-token-0123456789',
    SERVICE_BASE_URL: fake.url,
    SERVICE_ACCESS_TOKEN: 'access-token-1',
    SERVICE_API_KEY: 'api-key-1',
    REGISTRY_WEBHOOK_GRACE_MS: '0',
    REGISTRY_POLL_INTERVAL_MS: '20',
    REGISTRY_POLL_MAX_INTERVAL_MS: '40',
    ...extra,
  };
}

async function track(rec: TestReceiver, requestId: string, nu?: number) {
  const res = await fetch(`${rec.url}/admin/averbacoes/track`, {
    method: 'POST',
    headers: { authorization: 'Bearer admin-token-0123456789', 'content-type': 'application/json' },
    body: JSON.stringify({ requestId, nu_proposta: nu }),
  });
  expect(res.status).toBe(201);
}

const statusReply = (requestId: string, status: string) => ({
  json: { requestId, correlationId: 'corr-9', status },
});

/**
 * Proof that the poller had its chance: a witness registration, tracked now (so due no earlier than
 * anything tracked before it), is polled, and every poll that tick started has finished. Whatever
 * else was due was in that tick's due list, so an absence checked after this cannot pass late.
 * `fake.on` for the witness's path must come before the test's `/request/:id` route.
 */
async function pollerHadItsChance(rec: TestReceiver, witness: string): Promise<void> {
  await track(rec, witness);
  await eventually(() => fake.requestsTo('GET', `/request/${witness}`).length > 0, 'the witness polled');
  await rec.runtime.pollsSettled();
}

it('the registry webhook never comes: the poller asks /request/:id, sees processing then completed', async () => {
  fake.on('GET', '/request/req-witness', statusReply('req-witness', 'processing'));
  fake.on(
    'GET',
    '/request/:id',
    statusReply('req-p1', 'processing'),
    statusReply('req-p1', 'processing'),
    statusReply('req-p1', 'completed'),
  );
  r = await startTestReceiver({ env: env() });
  await track(r, 'req-p1', 501);
  const rec = r;
  await eventually(() => rec.store.averbacoes.get('req-p1')?.status === 'completed', 'completed by polling');
  const row = rec.store.averbacoes.get('req-p1');
  expect(row).toMatchObject({ result_source: 'poll', next_poll_at: null, nu_proposta: 501 });
  expect(JSON.parse(row?.result_body as string)).toMatchObject({ requestId: 'req-p1', status: 'completed' });
  const polls = fake.requestsTo('GET', '/request/req-p1');
  expect(polls.length).toBeGreaterThanOrEqual(3);
  for (const p of polls) {
    expect(p.path).toBe('/request/req-p1');
    expect(p.headers.authorization).toBe('Bearer access-token-1');
    expect(p.headers['x-api-key']).toBe('api-key-1');
  }
  // No poll after the final answer, and never the broken `_links.result` route.
  const count = polls.length;
  await pollerHadItsChance(rec, 'req-witness');
  expect(fake.requestsTo('GET', '/request/req-p1')).toHaveLength(count);
  expect(fake.requestsTo('*', '/result/')).toHaveLength(0);
  // Repeated `processing` answers are one event (poll:<id>:<status>), counted as duplicates.
  const events = eventsListed(rec.store.db, { kind: 'poll' });
  expect(
    events
      .filter((e) => e.request_id === 'req-p1')
      .map((e) => e.registry_status)
      .sort(),
  ).toEqual(['completed', 'processing']);
  const metrics = await (await fetch(`${rec.url}/metrics`)).text();
  expect(metrics).toMatch(/consig_registry_polls_total\{outcome="ok"\} [3-9]/);
  expect(metrics).toContain('consig_averbacoes{status="completed"} 1');
});

it('the webhook arrives first: no poll is made after it', async () => {
  fake.on('GET', '/request/req-witness', statusReply('req-witness', 'processing'));
  fake.on('GET', '/request/:id', statusReply('req-w1', 'processing'));
  r = await startTestReceiver({ env: env({ REGISTRY_WEBHOOK_GRACE_MS: '300' }) });
  await track(r, 'req-w1');
  await r.send({ requestId: 'req-w1', status: 'completed' }, '/webhooks/registry');
  const rec = r;
  await eventually(() => rec.store.averbacoes.get('req-w1')?.status === 'completed', 'completed by webhook');
  expect(rec.store.averbacoes.get('req-w1')).toMatchObject({
    result_source: 'webhook',
    next_poll_at: null,
    poll_attempts: 0,
  });
  // The witness's grace period ends after req-w1's would have: polled, it proves req-w1's was past.
  await pollerHadItsChance(rec, 'req-witness');
  expect(fake.requestsTo('GET', '/request/req-w1')).toHaveLength(0);
});

it('an averbação started through the admin route: 202, tracked, _links.result never followed, then polled', async () => {
  fake.on('POST', '/contract/averbacao', {
    status: 202,
    json: { requestId: 'req-s1', status: 'queued', _links: { result: { href: '/result/req-s1' } } },
  });
  fake.on('GET', '/request/:id', statusReply('req-s1', 'error'));
  fake.on('GET', '/result/:id', 'hang');
  r = await startTestReceiver({ env: env() });
  const res = await fetch(`${r.url}/admin/averbacoes`, {
    method: 'POST',
    headers: { authorization: 'Bearer admin-token-0123456789', 'content-type': 'application/json' },
    body: JSON.stringify({ nu_proposta: 777 }),
  });
  expect(res.status).toBe(202);
  const rec = r;
  await eventually(() => rec.store.averbacoes.get('req-s1')?.status === 'error', 'error by polling');
  expect(rec.store.averbacoes.get('req-s1')).toMatchObject({
    tracked_via: 'started',
    nu_proposta: 777,
    result_source: 'poll',
  });
  expect(fake.requestsTo('*', '/result/')).toHaveLength(0);
});

it('404 and 429 are retried deliberately; after REGISTRY_POLL_MAX_AGE_MS it is stale and polling stops', async () => {
  // The witness's first answer is final: it never becomes stale itself.
  fake.on('GET', '/request/req-witness', statusReply('req-witness', 'completed'));
  fake.on(
    'GET',
    '/request/:id',
    { status: 404, json: { error: 'NOT_FOUND', message: 'desconhecido' } },
    { status: 429, headers: { 'retry-after': '0' }, json: {} },
    { status: 404, json: { error: 'NOT_FOUND', message: 'desconhecido' } },
  );
  r = await startTestReceiver({ env: env({ REGISTRY_POLL_MAX_AGE_MS: '400' }) });
  await track(r, 'req-x1');
  const rec = r;
  await eventually(() => rec.store.averbacoes.get('req-x1')?.stale === 1, 'stale');
  const row = rec.store.averbacoes.get('req-x1');
  expect(row).toMatchObject({ status: 'queued', next_poll_at: null });
  expect(row?.last_poll_outcome).toMatch(/^not_found/);
  expect(rec.logs.lines.some((l) => String(l.msg).includes('marked stale, polling stopped'))).toBe(true);
  const count = fake.requestsTo('GET', '/request/req-x1').length;
  await pollerHadItsChance(rec, 'req-witness');
  expect(fake.requestsTo('GET', '/request/req-x1')).toHaveLength(count);
  const metrics = await (await fetch(`${rec.url}/metrics`)).text();
  expect(metrics).toMatch(/consig_registry_polls_total\{outcome="not_found"\} \d+/);
  expect(metrics).toContain('consig_averbacoes_stale 1');
});

it('a restart keeps the schedule of tracked registrations', async () => {
  const tmp = tempDir();
  try {
    fake.on('GET', '/request/:id', statusReply('req-r1', 'completed'));
    const first = await startTestReceiver({ dir: tmp.dir, env: env({ REGISTRY_WEBHOOK_GRACE_MS: '800' }) });
    await track(first, 'req-r1');
    const scheduled = first.store.averbacoes.get('req-r1')?.next_poll_at;
    await first.close();
    expect(fake.requestsTo('GET', '/request/')).toHaveLength(0);
    r = await startTestReceiver({ dir: tmp.dir, env: env({ REGISTRY_WEBHOOK_GRACE_MS: '800' }) });
    expect(r.store.averbacoes.get('req-r1')?.next_poll_at).toBe(scheduled);
    const rec = r;
    await eventually(
      () => rec.store.averbacoes.get('req-r1')?.status === 'completed',
      'completed after restart',
    );
    // It was polled when its time came, not before.
    const first_poll = fake.requestsTo('GET', '/request/')[0];
    expect(first_poll).toBeDefined();
    expect(Date.parse(rec.store.averbacoes.get('req-r1')?.last_poll_at as string)).toBeGreaterThanOrEqual(
      Date.parse(scheduled as string),
    );
  } finally {
    await r?.stop();
    r = undefined;
    tmp.cleanup();
  }
});

it('correlationId is lost (regression): a registration tracked by requestId alone learns it from the status query', async () => {
  fake.on('GET', '/request/:id', statusReply('req-c1', 'processing'), statusReply('req-c1', 'completed'));
  r = await startTestReceiver({ env: env() });
  await track(r, 'req-c1', 502);
  const rec = r;
  expect(rec.store.averbacoes.get('req-c1')?.correlation_id).toBeNull();
  await eventually(() => rec.store.averbacoes.get('req-c1')?.status === 'completed', 'completed by polling');
  expect(rec.store.averbacoes.get('req-c1')).toMatchObject({ correlation_id: 'corr-9', nu_proposta: 502 });
});

it('an answer the file refuses to keep counts as a failed poll: recorded and backed off, then asked again and kept', async () => {
  fake.on('GET', '/request/:id', statusReply('req-x1', 'processing'), statusReply('req-x1', 'completed'));
  r = await startTestReceiver({ env: env() });
  const rec = r;
  // A refusal the test can take back: every poll answer's event fails to insert (as on a full disk).
  rec.store.db.exec(
    "CREATE TRIGGER refuse_poll BEFORE INSERT ON events WHEN NEW.kind = 'poll' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
  );
  await track(rec, 'req-x1', 503);
  await eventually(
    () => (rec.store.averbacoes.get('req-x1')?.poll_attempts ?? 0) >= 1,
    'the first poll recorded',
  );
  const refused = rec.store.averbacoes.get('req-x1');
  expect(refused).toMatchObject({ poll_attempts: 1, status: 'queued', stale: 0 });
  expect(refused?.last_poll_outcome).toMatch(/^error:.*refused by the test/);
  expect(Date.parse(String(refused?.next_poll_at))).toBeGreaterThan(
    Date.parse(String(refused?.last_poll_at)),
  );
  expect(eventsListed(rec.store.db, { kind: 'poll' })).toEqual([]);
  const warned = rec.logs.lines.find((l) => l.msg === 'registry poll failed: will retry');
  expect(warned).toMatchObject({ request_id: 'req-x1', outcome: 'error', attempts: 1 });

  rec.store.db.exec('DROP TRIGGER refuse_poll');
  await eventually(
    () => rec.store.averbacoes.get('req-x1')?.status === 'completed',
    'completed by a later poll',
  );
  expect(rec.store.averbacoes.get('req-x1')).toMatchObject({ result_source: 'poll', next_poll_at: null });
  // The refused answer (processing) was asked again, not lost in silence: 2 polls at least after it.
  expect(fake.requestsTo('GET', '/request/').length).toBeGreaterThanOrEqual(2);
});
