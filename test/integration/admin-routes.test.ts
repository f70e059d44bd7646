import { createServiceClient } from '../../src/client';
import { createLogger } from '../../src/logger';
import { sign } from '../../src/domain/signature';
import { startTestApp, type TestApp } from '../helpers/app';
import { type FakeService, startFakeService } from '../helpers/fake-service';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';

/**
 * `/admin/*` route by route, on the server production runs with a real SQLite file, and for
 * `POST /admin/averbacoes` the real service client against a real HTTP fake of the service.
 */

const TOKEN = 'admin-token-0123456789';

let t: TestApp;
let fake: FakeService;
beforeEach(async () => {
  fake = await startFakeService();
  const serviceClient = createServiceClient({
    baseUrl: fake.url,
    accessToken: 'access-token-1',
    logger: createLogger('silent'),
    retries: 0,
  });
  t = await startTestApp({ ADMIN_TOKEN: TOKEN, REGISTRY_WEBHOOK_GRACE_MS: '60000' }, { serviceClient });
});
afterEach(async () => {
  await t.close();
  await fake.close();
});

interface AdminAnswer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
}

async function admin(path: string, init: { method?: string; json?: unknown } = {}): Promise<AdminAnswer> {
  const res = await fetch(`${t.url}/admin${path}`, {
    method: init.method ?? 'GET',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    ...(init.json === undefined ? {} : { body: JSON.stringify(init.json) }),
  });
  return { status: res.status, body: await res.json() };
}

async function deliver(body: unknown, path = '/webhooks') {
  const { raw, signature } = signed(body);
  const res = await postRaw(`${t.url}${path}`, raw, { 'x-service-signature': signature });
  return res.body.event_id as number;
}

describe('events', () => {
  it('lists with filters, newest first; limit and before page backwards', async () => {
    const a = await deliver(delivery('proposta.criada', { nu_proposta: 7 }));
    const b = await deliver(delivery('proposta.aprovada', { nu_proposta: 7 }));
    await deliver(delivery('proposta.criada', { nu_proposta: 8 }));
    const byProposal = await admin('/events?nu_proposta=7');
    expect(byProposal.body.events.map((e: { id: number }) => e.id)).toEqual([b, a]);
    const page = await admin(`/events?limit=1&before=${b}`);
    expect(page.body.events.map((e: { id: number }) => e.id)).toEqual([a]);
    const byEvento = await admin('/events?evento=proposta.aprovada&status=pending&kind=event');
    expect(byEvento.body.events.map((e: { id: number }) => e.id)).toEqual([b]);
  });

  it.each([
    ['limit=abc', 'limit must be a non-negative integer'],
    ['before=-1', 'before must be a non-negative integer'],
    ['limit=2&limit=3', 'limit may be given only once'],
    ['status=done&status=dead', 'status may be given only once'],
  ])('a bad query (%s) is 400 bad_request, not a 500', async (query, message) => {
    const res = await admin(`/events?${query}`);
    expect(res).toEqual({ status: 400, body: { error: 'bad_request', message } });
  });

  it('one event with its raw body: text as stored, invalid UTF-8 as base64', async () => {
    const text = await deliver(delivery('proposta.criada', { webhook_id: 'wh_text' }));
    expect(JSON.parse((await admin(`/events/${text}`)).body.event.body).metadata.webhook_id).toBe('wh_text');
    const bytes = Buffer.from([0x7b, 0xff, 0x7d]);
    const res = await postRaw(`${t.url}/webhooks`, bytes, { 'x-service-signature': sign(SECRET, bytes) });
    const blob = await admin(`/events/${res.body.event_id}`);
    expect(blob.body.event).toMatchObject({ status: 'invalid', body: { base64: bytes.toString('base64') } });
    expect((await admin('/events/999')).status).toBe(404);
    expect((await admin('/events/abc')).status).toBe(404);
  });

  it('replay: 202 for a replayable event, 409 for one with no handler to run, 404 for none', async () => {
    const pending = await deliver(delivery('proposta.criada'));
    const ignored = await deliver(delivery('evento.desconhecido'));
    expect(await admin(`/events/${pending}/replay`, { method: 'POST' })).toEqual({
      status: 202,
      body: { status: 'queued', event_ids: [pending] },
    });
    expect(await admin(`/events/${ignored}/replay`, { method: 'POST' })).toMatchObject({
      status: 409,
      body: { error: 'not_replayable' },
    });
    expect((await admin('/events/999/replay', { method: 'POST' })).status).toBe(404);
  });
});

describe('proposals', () => {
  it('where one stands, with the CPF masked; 404 for one never seen', async () => {
    t.store.db
      .prepare(
        `INSERT INTO proposals (nu_proposta, nu_cpf, stage, status, created_at, updated_at)
         VALUES (42, '12345678909', 'Proposta', 'aprovada', '2026-11-21T10:00:00Z', '2026-11-21T10:00:00Z')`,
      )
      .run();
    const res = await admin('/proposals/42');
    expect(res.status).toBe(200);
    expect(res.body.proposal).toMatchObject({
      nu_proposta: 42,
      status: 'aprovada',
      nu_cpf: '***.456.789-**',
    });
    expect(JSON.stringify(res.body)).not.toContain('12345678909');
    expect((await admin('/proposals/43')).status).toBe(404);
  });
});

describe('averbações', () => {
  it('track: 201 when new, 200 when known, 400 without a requestId; then get and list it', async () => {
    expect(
      await admin('/averbacoes/track', { method: 'POST', json: { requestId: ' req-1 ', nu_proposta: '77' } }),
    ).toMatchObject({
      status: 201,
      body: { status: 'tracked', averbacao: { request_id: 'req-1', nu_proposta: 77 } },
    });
    expect(await admin('/averbacoes/track', { method: 'POST', json: { requestId: 'req-1' } })).toMatchObject({
      status: 200,
      body: { status: 'already_tracked' },
    });
    for (const json of [{}, { requestId: '  ' }, { requestId: 12 }, { requestId: 'x'.repeat(201) }]) {
      expect((await admin('/averbacoes/track', { method: 'POST', json })).status).toBe(400);
    }
    expect((await admin('/averbacoes/req-1')).body.averbacao).toMatchObject({ status: 'queued', stale: 0 });
    expect((await admin('/averbacoes/req-2')).status).toBe(404);
    const listed = await admin('/averbacoes?status=queued&stale=0&nu_proposta=77');
    expect(listed.body.averbacoes.map((a: { request_id: string }) => a.request_id)).toEqual(['req-1']);
  });

  it('start: the service answers 202, the requestId is tracked; _links.result is never followed', async () => {
    fake.on('POST', '/contract/averbacao', {
      status: 202,
      json: { requestId: 'req-s1', status: 'queued', _links: { result: { href: '/result/req-s1' } } },
    });
    const res = await admin('/averbacoes', { method: 'POST', json: { nu_proposta: 777 } });
    expect(res).toMatchObject({
      status: 202,
      body: {
        status: 'tracked',
        averbacao: { request_id: 'req-s1', nu_proposta: 777, tracked_via: 'started' },
      },
    });
    expect(fake.requestsTo('POST', '/contract/averbacao')[0]?.json).toEqual({ nu_proposta: 777 });
    expect(fake.requestsTo('*', '/result/')).toHaveLength(0);
  });

  it('start: a business refusal of the service is 422 with its code; the service failing is 502', async () => {
    fake.on(
      'POST',
      '/contract/averbacao',
      { status: 422, json: { error: 'BUSINESS_RULE_VIOLATION', message: 'Proposta não aprovada' } },
      { status: 500, json: {} },
    );
    expect(await admin('/averbacoes', { method: 'POST', json: { nu_proposta: 1 } })).toEqual({
      status: 422,
      body: {
        error: 'SERVICE_BUSINESS_ERROR',
        message: expect.any(String),
        service_error: 'BUSINESS_RULE_VIOLATION',
      },
    });
    expect(await admin('/averbacoes', { method: 'POST', json: { nu_proposta: 1 } })).toMatchObject({
      status: 502,
      body: { error: expect.stringMatching(/^SERVICE_/) },
    });
    expect(t.store.averbacoes.list()).toEqual([]);
  });

  it('start: 400 for a body that is not a JSON object, 503 when the service is not configured', async () => {
    expect(await admin('/averbacoes', { method: 'POST', json: [1, 2] })).toMatchObject({
      status: 400,
      body: { error: 'bad_request' },
    });
    expect(fake.requests).toHaveLength(0);
    await t.close();
    t = await startTestApp({ ADMIN_TOKEN: TOKEN });
    expect(await admin('/averbacoes', { method: 'POST', json: {} })).toMatchObject({
      status: 503,
      body: { error: 'service_not_configured' },
    });
  });
});

describe('deliveries', () => {
  it('lists the requests to the webhook routes by outcome, newest first', async () => {
    await deliver(delivery());
    await postRaw(`${t.url}/webhooks`, JSON.stringify(delivery()), {});
    t.writer.flush(); // the 401's audit row goes with the writer's next batch
    const rejected = await admin('/deliveries?outcome=invalid_signature');
    expect(rejected.body.deliveries).toEqual([
      expect.objectContaining({ outcome: 'invalid_signature', http_status: 401, detail: 'missing' }),
    ]);
    expect((await admin('/deliveries?limit=1')).body.deliveries).toHaveLength(1);
    expect((await admin('/deliveries?limit=x')).status).toBe(400);
  });
});

describe('access', () => {
  it('a missing or wrong token is 401 with WWW-Authenticate; an unknown admin path with the token is 404', async () => {
    const none = await fetch(`${t.url}/admin/events`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    const wrong = await fetch(`${t.url}/admin/events`, { headers: { authorization: `Bearer ${TOKEN}x` } });
    expect(wrong.status).toBe(401);
    expect(await admin('/nope')).toEqual({ status: 404, body: { error: 'not_found' } });
  });
});
