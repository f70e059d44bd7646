import { EventEmitter } from 'node:events';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Clock } from '../../src/clock';
import { simulateCommand } from '../../src/cli/simulate-command';
import { verifySignature } from '../../src/domain/signature';
import { createLogger } from '../../src/logger';
import { type Simulator, type SimulatorOptions, startSimulator } from '../../src/simulator';
import { HAPPY_PATH } from '../helpers/payloads';

/** The simulator over real HTTP on 127.0.0.1, with a tiny receiver of its deliveries. */

const SECRET = 'sim-secret-123';
const silent = createLogger('silent');

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  raw: Buffer;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- deliveries are read loosely in tests
  json: any;
}

interface TestReceiver {
  url: string;
  received: Received[];
  to(path: string): Received[];
  close(): Promise<void>;
}

/** Records every request; `answer` gives the status of the n-th one (or 'hang' for none). */
async function startReceiver(
  answer: (r: Received, n: number) => number | 'hang' = () => 200,
): Promise<TestReceiver> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let json: unknown;
      try {
        json = JSON.parse(raw.toString('utf8'));
      } catch {
        json = undefined;
      }
      const r: Received = { path: req.url ?? '', headers: req.headers, raw, json };
      received.push(r);
      const status = answer(r, received.length - 1);
      if (status === 'hang') return;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end('{"status":"ok"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    to: (path) => received.filter((r) => r.path === path),
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * A clock that stands still until the test moves it (token expiry, averbação status), so that no
 * assertion depends on how fast the machine is.
 */
function movableClock(): { clock: Clock; advance(ms: number): void } {
  const start = Date.now();
  let offset = 0;
  return {
    clock: { now: () => new Date(start + offset), monotonic: () => performance.now() },
    advance: (ms) => {
      offset += ms;
    },
  };
}

async function waitFor(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

interface Answer {
  status: number;
  headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
}

async function call(
  url: string,
  init: { method?: string; body?: unknown; token?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.body !== undefined) headers['content-type'] ??= 'application/json';
  if (init.token !== undefined) headers.authorization = `Bearer ${init.token}`;
  const res = await fetch(url, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers,
    body:
      init.body === undefined
        ? undefined
        : typeof init.body === 'string'
          ? init.body
          : JSON.stringify(init.body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // keep the text
  }
  return { status: res.status, headers: res.headers, body };
}

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((o) => o.close()));
});

async function sim(options: SimulatorOptions = {}): Promise<Simulator & { token: string }> {
  const s = await startSimulator({
    logger: silent,
    delivery: { backoffMs: [5, 5], timeoutMs: 2000 },
    analysisDelayMs: 5,
    ...options,
  });
  open.push(s);
  return Object.assign(s, { token: s.issueToken() });
}

async function receiver(answer?: (r: Received, n: number) => number | 'hang'): Promise<TestReceiver> {
  const r = await startReceiver(answer);
  open.push(r);
  return r;
}

const PROPOSAL = {
  nu_cpf: '52998224725',
  nu_cnpj_conveniada: '11222333000181',
  vl_emprestimo: 15000.5,
  qt_parcela: 24,
  dados_bancarios: { pix: 'cliente@example.com' },
};

async function register(s: Simulator & { token: string }, url: string, eventos?: string[]): Promise<string> {
  const res = await call(`${s.url}/api/v1/webhooks`, {
    token: s.token,
    body: {
      url,
      eventos: eventos ?? ['proposta.criada', 'proposta.pre_aprovada', 'proposta.negada'],
      secret: SECRET,
    },
  });
  expect(res.status).toBe(201);
  return res.body.id as string;
}

async function propose(
  s: Simulator & { token: string },
  body: Record<string, unknown> = {},
): Promise<Answer> {
  return call(`${s.url}/api/v1/propostas`, { token: s.token, body: { ...PROPOSAL, ...body } });
}

const eventos = (r: TestReceiver, path = '/webhooks') => r.to(path).map((x) => x.json.evento as string);

describe('authentication', () => {
  it('401 without a token, a token from the token endpoint works, an expired one is 401', async () => {
    const { clock, advance } = movableClock();
    const s = await sim({ clock, tokenTtlSeconds: 0.05 }); // a tiny lifetime, but the clock stands still
    const noToken = await call(`${s.url}/api/v1/propostas`, { body: PROPOSAL });
    expect(noToken.status).toBe(401);
    expect(noToken.body).toEqual({ error: 'UNAUTHORIZED', message: expect.any(String) });
    expect((await call(`${s.url}/api/v1/propostas`, { body: PROPOSAL, token: 'made-up' })).status).toBe(401);

    const issued = await call(s.tokenUrl, {
      body: 'grant_type=client_credentials&client_id=partner&client_secret=s3cret',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(issued.status).toBe(200);
    expect(issued.body).toEqual({ access_token: expect.any(String), token_type: 'Bearer', expires_in: 1 });
    const token = issued.body.access_token as string;
    expect((await call(`${s.url}/api/v1/propostas`, { body: PROPOSAL, token })).status).toBe(201);

    advance(50); // to the end of its 50 ms lifetime
    const expired = await call(`${s.url}/api/v1/propostas`, { body: PROPOSAL, token });
    expect(expired.status).toBe(401);
    expect(expired.body.error).toBe('UNAUTHORIZED');
  });

  it('the token endpoint takes JSON or HTTP Basic; only the configured credentials when set', async () => {
    const s = await sim({ clientId: 'partner', clientSecret: 'right' });
    const json = (id: string, secret: string) =>
      call(s.tokenUrl, { body: { grant_type: 'client_credentials', client_id: id, client_secret: secret } });
    expect((await json('partner', 'right')).status).toBe(200);
    const wrong = await json('partner', 'wrong');
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toBe('invalid_client');
    const basic = await call(s.tokenUrl, {
      body: 'grant_type=client_credentials',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from('partner:right').toString('base64')}`,
      },
    });
    expect(basic.status).toBe(200);
    const grant = await call(s.tokenUrl, {
      body: { grant_type: 'password', client_id: 'partner', client_secret: 'right' },
    });
    expect(grant.body.error).toBe('unsupported_grant_type');
  });

  it('POST /offers/search is public and pages through 25 offers', async () => {
    const s = await sim();
    const first = await call(`${s.url}/offers/search`, { body: {} });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ total: 25, pageStart: 0, pageSize: 10, totalPages: 3 });
    expect(first.body._embedded.offers).toHaveLength(10);
    const seen = [...first.body._embedded.offers];
    let next = first.body._links.next?.href as string | undefined;
    while (next !== undefined) {
      const page = await call(`${s.url}${next}`, { body: {} });
      seen.push(...page.body._embedded.offers);
      next = page.body._links.next?.href;
    }
    expect(new Set(seen.map((o) => o.id)).size).toBe(25);
    const big = await call(`${s.url}/offers/search`, { body: { pageSize: 30 } });
    expect(big.body._embedded.offers).toHaveLength(25);
    expect(big.body._links.next).toBeUndefined();
    expect((await call(`${s.url}/offers/search`, { body: { pageSize: 0 } })).status).toBe(400);
  });

  it('the four reports need the token and answer hypermedia pages', async () => {
    const s = await sim();
    for (const path of [
      '/workers/new-relationships',
      '/contracts/relationship-ended',
      '/contracts/accounting-and-remuneration',
      '/emprestimos/consultar-repasse-pagamentos',
    ]) {
      expect((await call(`${s.url}${path}`)).status).toBe(401);
      const page = await call(`${s.url}${path}`, { token: s.token });
      expect(page.status).toBe(200);
      expect(page.body).toMatchObject({
        total: expect.any(Number),
        pageStart: 0,
        _links: { self: expect.anything() },
      });
    }
  });
});

describe('webhook registration and deliveries', () => {
  it('validates the registration', async () => {
    const s = await sim();
    const post = (body: unknown) => call(`${s.url}/api/v1/webhooks`, { token: s.token, body });
    const ok = { url: 'http://127.0.0.1:9/webhooks', eventos: ['proposta.criada'], secret: 'x' };
    for (const [field, bad] of [
      ['url', { ...ok, url: 'ftp://x/y' }],
      ['url', { ...ok, url: 'not a url' }],
      ['eventos', { ...ok, eventos: ['proposta.inventada'] }],
      ['eventos', { ...ok, eventos: [] }],
      ['secret', { ...ok, secret: '' }],
    ] as const) {
      const res = await post(bad);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: 'VALIDATION_ERROR', field });
    }
    const created = await post(ok);
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.any(String),
      url: ok.url,
      eventos: ['proposta.criada'],
      active: true,
    });
  });

  it('signs the exact bytes of each delivery; payload of interface §2.5; criada before pre_aprovada', async () => {
    const r = await receiver();
    const s = await sim();
    await register(s, `${r.url}/webhooks`);
    const created = await propose(s);
    expect(created.status).toBe(201);
    await waitFor(() => r.received.length >= 2, 'two deliveries');
    expect(eventos(r)).toEqual(['proposta.criada', 'proposta.pre_aprovada']);
    const ids = new Set<string>();
    for (const d of r.received) {
      expect(verifySignature(d.raw, d.headers['x-service-signature'], [SECRET])).toEqual({
        ok: true,
        secretIndex: 0,
      });
      expect(verifySignature(d.raw, d.headers['x-service-signature'], ['another'])).toMatchObject({
        ok: false,
      });
      expect(d.headers['content-type']).toBe('application/json');
      expect(d.json).toEqual({
        evento: expect.any(String),
        timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}-03:00$/),
        dados: {
          nu_proposta: created.body.nu_proposta,
          nu_cpf: PROPOSAL.nu_cpf,
          st_proposta: expect.any(String),
          vl_emprestimo: PROPOSAL.vl_emprestimo,
          no_conveniada: expect.any(String),
          uuid: created.body.uuid,
        },
        metadata: { tentativa: 1, webhook_id: expect.any(String) },
      });
      ids.add(d.json.metadata.webhook_id);
    }
    expect(ids.size).toBe(2);
    expect(r.received.map((d) => d.json.dados.st_proposta)).toEqual(['em_analise', 'pre_aprovada']);
  });

  it('uses the configured signature header and only sends subscribed events', async () => {
    const r = await receiver();
    const s = await sim({ signatureHeader: 'X-Banco-Signature' });
    await register(s, `${r.url}/webhooks`, ['proposta.pre_aprovada']);
    await propose(s);
    await waitFor(() => r.received.length >= 1, 'one delivery');
    await waitFor(
      () => s.state().proposals[0]?.events.every((e) => e.state === 'sent') === true,
      'both sent',
    );
    expect(eventos(r)).toEqual(['proposta.pre_aprovada']);
    const d = r.received[0] as Received;
    expect(verifySignature(d.raw, d.headers['x-banco-signature'], [SECRET]).ok).toBe(true);
  });

  it.each([500, 401])(
    'retries a delivery answered %i with tentativa 1, 2, 3, then deactivates and sends nothing more',
    async (status) => {
      const r = await receiver(() => status);
      const s = await sim();
      const id = await register(s, `${r.url}/webhooks`, ['proposta.criada']);
      await propose(s);
      await waitFor(() => s.state().registrations[0]?.active === false, 'deactivated');
      expect(r.received.map((d) => d.json.metadata.tentativa)).toEqual([1, 2, 3]);
      expect(new Set(r.received.map((d) => d.json.metadata.webhook_id)).size).toBe(1);
      // Each attempt is signed anew: the bytes differ in tentativa.
      for (const d of r.received)
        expect(verifySignature(d.raw, d.headers['x-service-signature'], [SECRET]).ok).toBe(true);
      const state = s.state();
      expect(state.registrations[0]).toMatchObject({ id, active: false, consecutiveFailures: 3 });
      expect(state.attempts.map((a) => [a.tentativa, a.status, a.ok])).toEqual([
        [1, status, false],
        [2, status, false],
        [3, status, false],
      ]);
      expect(state.deliveries[0]?.status).toBe('failed');

      // A new proposal: its event happens, but nothing is delivered to the deactivated callback.
      const second = await propose(s);
      const nu = second.body.nu_proposta as number;
      await waitFor(
        () => s.state().proposals.find((p) => p.nu_proposta === nu)?.events[0]?.state === 'sent',
        'second criada sent',
      );
      expect(s.state().proposals.find((p) => p.nu_proposta === nu)?.events[0]?.webhook_ids).toEqual([]);
      expect(r.received).toHaveLength(3);

      // Reactivated through the control API, it receives again.
      expect((await call(`${s.url}/_sim/registrations/${id}/reactivate`, { body: {} })).status).toBe(200);
      const third = await propose(s);
      await waitFor(() => r.received.length > 3, 'delivery after reactivation');
      expect(r.received[3]?.json.dados.nu_proposta).toBe(third.body.nu_proposta);
    },
  );

  it('a success resets the failure count', async () => {
    const statuses = [500, 500, 200, 500, 500, 200];
    const r = await receiver((_r, n) => statuses[n] ?? 200);
    const s = await sim();
    await register(s, `${r.url}/webhooks`, ['proposta.criada']);
    await propose(s);
    await waitFor(() => r.received.length === 3, 'first delivery done');
    await waitFor(() => s.state().deliveries[0]?.status === 'delivered', 'delivered');
    expect(s.state().registrations[0]).toMatchObject({ active: true, consecutiveFailures: 0 });
    await propose(s);
    await waitFor(() => s.state().deliveries[1]?.status === 'delivered', 'second delivered');
    // 2 + 2 failures, but never 3 in a row.
    expect(r.received.map((d) => d.json.metadata.tentativa)).toEqual([1, 2, 3, 1, 2, 3]);
    expect(s.state().registrations[0]).toMatchObject({ active: true, consecutiveFailures: 0 });
  });

  it('an attempt with no answer within timeoutMs is a failure and is retried', async () => {
    const r = await receiver((_r, n) => (n === 0 ? 'hang' : 200));
    const s = await sim({ delivery: { timeoutMs: 100, backoffMs: [5] } });
    await register(s, `${r.url}/webhooks`, ['proposta.criada']);
    await propose(s);
    await waitFor(() => s.state().deliveries[0]?.status === 'delivered', 'delivered on the retry');
    const attempts = s.state().attempts;
    expect(attempts[0]).toMatchObject({
      tentativa: 1,
      status: null,
      ok: false,
      error: 'no answer within 100 ms',
    });
    expect(attempts[1]).toMatchObject({ tentativa: 2, status: 200, ok: true });
  });
});

describe('proposals', () => {
  it('interface §2.1 rules: 400 VALIDATION_ERROR with the field, 422 for an employee not found', async () => {
    const s = await sim();
    for (const [field, body] of [
      ['qt_parcela', { qt_parcela: 5 }],
      ['qt_parcela', { qt_parcela: 97 }],
      ['qt_parcela', { qt_parcela: 12.5 }],
      ['nu_cpf', { nu_cpf: '529.982.247-25' }],
      ['nu_cpf', { nu_cpf: undefined }],
      ['nu_cnpj_conveniada', { nu_cnpj_conveniada: '1122233300018' }],
      ['vl_emprestimo', { vl_emprestimo: 0 }],
      ['dados_bancarios', { dados_bancarios: 'pix' }],
    ] as const) {
      const res = await propose(s, body);
      expect([field, res.status]).toEqual([field, 400]);
      expect(res.body).toMatchObject({ error: 'VALIDATION_ERROR', field, message: expect.any(String) });
    }
    for (const cpf of ['00000000191', '12345678999']) {
      const res = await propose(s, { nu_cpf: cpf });
      expect(res.status).toBe(422);
      expect(res.body).toEqual({
        error: 'BUSINESS_RULE_VIOLATION',
        message: 'Funcionário não encontrado na empresa conveniada',
      });
    }
    // Boundaries and the alphanumeric CNPJ are accepted.
    expect((await propose(s, { qt_parcela: 6 })).status).toBe(201);
    expect((await propose(s, { qt_parcela: 96, nu_cnpj_conveniada: '12ABC34501DE35' })).status).toBe(201);
  });

  it('answers 201 with interface §2.2 and numbers proposals from 100001; a large amount is denied', async () => {
    const r = await receiver();
    const s = await sim();
    await register(s, `${r.url}/webhooks`);
    const first = await propose(s);
    expect(first.status).toBe(201);
    expect(first.body).toEqual({
      nu_proposta: 100001,
      status: 'em_analise',
      dt_criacao: expect.stringMatching(/-03:00$/),
      uuid: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    const big = await propose(s, { vl_emprestimo: 250000 });
    expect(big.body.nu_proposta).toBe(100002);
    await waitFor(() => r.received.length >= 4, 'four deliveries');
    const of = (nu: number) =>
      r.received.filter((d) => d.json.dados.nu_proposta === nu).map((d) => d.json.evento);
    expect(of(100001)).toEqual(['proposta.criada', 'proposta.pre_aprovada']);
    expect(of(100002)).toEqual(['proposta.criada', 'proposta.negada']);
  });

  it('the control API advances a proposal along the happy path, or to a detour', async () => {
    const r = await receiver();
    const s = await sim();
    await register(s, `${r.url}/webhooks`, [
      'proposta.criada',
      'proposta.pre_aprovada',
      'proposta.aprovada',
      'averbacao.solicitada',
      'averbacao.aprovada',
      'averbacao.negada',
      'formalizacao.iniciada',
      'formalizacao.concluida',
      'efetivacao.concluida',
      'pagamento.realizado',
      'pagamento.falha',
    ]);
    const nu = (await propose(s)).body.nu_proposta as number;
    await waitFor(() => r.received.length === 2, 'analysis');
    const step = await call(`${s.url}/_sim/proposals/${nu}/advance`, { body: {} });
    expect(step.body).toEqual({ nu_proposta: nu, eventos: ['proposta.aprovada'] });
    const rest = await call(`${s.url}/_sim/proposals/${nu}/advance`, { body: { to: 'pagamento.realizado' } });
    expect(rest.status).toBe(202);
    await waitFor(() => r.received.length === 9, 'the whole happy path');
    expect(eventos(r)).toEqual([...HAPPY_PATH]);
    expect(r.received.at(-1)?.json.dados.st_proposta).toBe('paga');
    expect((await call(`${s.url}/_sim/proposals/${nu}/advance`, { body: {} })).status).toBe(409);

    const other = (await propose(s)).body.nu_proposta as number;
    await waitFor(() => r.received.length === 11, 'analysis of the second');
    const detour = await call(`${s.url}/_sim/proposals/${other}/advance`, {
      body: { to: 'averbacao.negada' },
    });
    expect(detour.body.eventos).toEqual(['proposta.aprovada', 'averbacao.solicitada', 'averbacao.negada']);
    // Any catalogue event, as is, through the events endpoint (here: after a final one).
    const late = await call(`${s.url}/_sim/proposals/${other}/events`, {
      body: { evento: 'pagamento.falha' },
    });
    expect(late.status).toBe(202);
    await waitFor(() => r.received.length === 15, 'detour and the extra event');
    expect(eventos(r).slice(11)).toEqual([
      'proposta.aprovada',
      'averbacao.solicitada',
      'averbacao.negada',
      'pagamento.falha',
    ]);
    expect((await call(`${s.url}/_sim/proposals/999/advance`, { body: {} })).status).toBe(404);
    expect((await call(`${s.url}/_sim/proposals/${nu}/events`, { body: { evento: 'x.y' } })).status).toBe(
      400,
    );
  });
});

describe('averbação', () => {
  it('202 with _links.result to /result/:id, which never answers; /contract: Deprecation', async () => {
    const s = await sim();
    const res = await call(`${s.url}/contract/averbacao`, { token: s.token, body: { nu_proposta: 1 } });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({
      requestId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      status: 'queued',
      _links: { result: { href: `/result/${res.body.requestId}` } },
    });
    expect(res.headers.get('deprecation')).toBeNull();
    const old = await call(`${s.url}/contract`, { token: s.token, body: {} });
    expect(old.status).toBe(202);
    expect(old.headers.get('deprecation')).toBe('true');
    expect(old.body._links.result.href).toBe(`/result/${old.body.requestId}`);

    // The trap: the client gives up, the simulator never answers.
    await expect(
      fetch(`${s.url}${res.body._links.result.href}`, {
        headers: { authorization: `Bearer ${s.token}` },
        signal: AbortSignal.timeout(200),
      }),
    ).rejects.toThrow();
    await waitFor(() => s.state().heldResultRequests === 0, 'the abandoned request let go');
    // A request still held when the simulator closes is cut, not left hanging.
    const held = fetch(`${s.url}/result/${res.body.requestId}`, { signal: AbortSignal.timeout(20_000) });
    await waitFor(() => s.state().heldResultRequests === 1, 'request held');
    await s.close();
    await expect(held).rejects.toThrow(/fetch failed|other side closed|socket/i);
  });

  it('GET /request/:id: queued → processing → completed by the clock; 404 when unknown', async () => {
    const { clock, advance } = movableClock();
    const s = await sim({
      clock,
      apiKey: 'key-1',
      registry: { processingAfterMs: 1000, completeAfterMs: 60_000 },
    });
    const { requestId } = (await call(`${s.url}/contract/averbacao`, { token: s.token, body: {} })).body;
    const status = () =>
      call(`${s.url}/request/${requestId}`, { token: s.token, headers: { 'x-api-key': 'key-1' } });
    expect((await status()).body).toEqual({ requestId, correlationId: expect.any(String), status: 'queued' });
    advance(1000);
    expect((await status()).body.status).toBe('processing');
    advance(59_000);
    expect((await status()).body.status).toBe('completed');
    const correlation = (await status()).body.correlationId;
    expect(correlation).not.toBe(requestId);

    // Without x-api-key:
    expect((await call(`${s.url}/request/${requestId}`, { token: s.token })).status).toBe(401);
    const unknown = await call(`${s.url}/request/00000000-0000-4000-8000-000000000000`, {
      token: s.token,
      headers: { 'x-api-key': 'key-1' },
    });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'NOT_FOUND', message: expect.any(String) });
  });

  it('on completion: signed registry webhook to <url>/registry; averbacao.* events', async () => {
    const r = await receiver();
    const s = await sim({ registry: { processingAfterMs: 5, completeAfterMs: 30 } });
    await register(s, `${r.url}/webhooks`, [
      'averbacao.solicitada',
      'averbacao.aprovada',
      'averbacao.negada',
    ]);
    const nu = (await propose(s)).body.nu_proposta as number;
    const ok = (await call(`${s.url}/contract/averbacao`, { token: s.token, body: { nu_proposta: nu } }))
      .body;
    await waitFor(() => r.to('/webhooks/registry').length === 1 && r.to('/webhooks').length === 2, 'results');
    const hook = r.to('/webhooks/registry')[0] as Received;
    expect(verifySignature(hook.raw, hook.headers['x-service-signature'], [SECRET]).ok).toBe(true);
    expect(hook.json).toEqual({
      requestId: ok.requestId,
      correlationId: expect.any(String),
      status: 'completed',
      nu_proposta: nu,
    });
    expect(eventos(r)).toEqual(['averbacao.solicitada', 'averbacao.aprovada']);
    for (const d of r.to('/webhooks')) expect(d.json.dados.requestId).toBe(ok.requestId);
    const status = await call(`${s.url}/request/${ok.requestId}`, { token: s.token });
    expect(status.body).toMatchObject({ status: 'completed', correlationId: hook.json.correlationId });

    // forceError ends in error, under `dados` when payloadShape says so.
    await call(`${s.url}/_sim/registry`, { body: { payloadShape: 'dados' } });
    const bad = (
      await call(`${s.url}/contract`, { token: s.token, body: { nu_proposta: nu, forceError: true } })
    ).body;
    await waitFor(() => r.to('/webhooks/registry').length === 2, 'second registry result');
    expect(r.to('/webhooks/registry')[1]?.json).toEqual({
      dados: {
        requestId: bad.requestId,
        correlationId: expect.any(String),
        status: 'error',
        nu_proposta: nu,
      },
    });
    await waitFor(() => eventos(r).includes('averbacao.negada'), 'averbacao.negada');
  });

  it("'drop' never sends the registry webhook: only GET /request/:id tells", async () => {
    const r = await receiver();
    const s = await sim({ registry: { processingAfterMs: 5, completeAfterMs: 20, webhook: 'drop' } });
    await register(s, `${r.url}/webhooks`, ['proposta.criada']);
    const { requestId } = (await call(`${s.url}/contract/averbacao`, { token: s.token, body: {} })).body;
    await waitFor(() => s.state().averbacoes[0]?.completed_at !== null, 'completed');
    expect(s.state().averbacoes[0]).toMatchObject({ requestId, status: 'completed', webhook: 'dropped' });
    expect((await call(`${s.url}/request/${requestId}`, { token: s.token })).body.status).toBe('completed');
    expect(r.to('/webhooks/registry')).toEqual([]);
    expect(s.state().deliveries).toEqual([]);
  });
});

describe('chaos', () => {
  it('duplicateRate sends a delivery twice, same bytes and same webhook_id', async () => {
    const r = await receiver();
    const s = await sim({ chaos: { duplicateRate: 1 } });
    await register(s, `${r.url}/webhooks`, ['proposta.criada']);
    await propose(s);
    await waitFor(() => s.state().attempts.length === 2, 'the copy');
    const [a, b] = r.received as [Received, Received];
    expect(a.json.metadata.webhook_id).toBe(b.json.metadata.webhook_id);
    expect(b.raw.equals(a.raw)).toBe(true);
    expect(s.state().attempts.map((x) => x.duplicate)).toEqual([false, true]);
  });

  it('outOfOrder swaps consecutive events of a proposal; /_sim/chaos turns it on at run time', async () => {
    const r = await receiver();
    const s = await sim();
    await register(s, `${r.url}/webhooks`);
    const set = await call(`${s.url}/_sim/chaos`, {
      body: { outOfOrder: true, outOfOrderMaxHoldMs: 60_000 },
    });
    expect(set.body).toMatchObject({ outOfOrder: true, duplicateRate: 0 });
    await propose(s);
    await waitFor(() => r.received.length === 2, 'both');
    expect(eventos(r)).toEqual(['proposta.pre_aprovada', 'proposta.criada']);
    expect((await call(`${s.url}/_sim/chaos`, { body: { duplicateRate: 2 } })).status).toBe(400);
  });

  it('503 and 429 + Retry-After on API routes; never on the token endpoint or /_sim', async () => {
    const s = await sim({ chaos: { apiErrorRate: 1 } });
    expect((await propose(s)).status).toBe(503);
    expect((await call(`${s.url}/offers/search`, { body: {} })).status).toBe(503);
    expect(
      (
        await call(s.tokenUrl, {
          body: { grant_type: 'client_credentials', client_id: 'a', client_secret: 'b' },
        })
      ).status,
    ).toBe(200);
    expect((await call(`${s.url}/_sim/state`)).status).toBe(200);
    s.setChaos({ apiErrorRate: 0, rateLimitRate: 1 });
    const limited = await propose(s);
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    s.setChaos({ rateLimitRate: 0 });
    expect((await propose(s)).status).toBe(201);
  });
});

describe('lifecycle', () => {
  it('close() ends promptly with a delivery in flight, retries pending and timers armed', async () => {
    const r = await receiver(() => 'hang');
    // The attempt's own timeout and the registry's timer lie beyond the test's (60 s): a close()
    // that waited for either would fail it, whatever the machine's speed.
    const s = await sim({ delivery: { timeoutMs: 600_000 }, registry: { completeAfterMs: 600_000 } });
    await register(s, `${r.url}/webhooks`, ['proposta.criada']);
    await propose(s);
    await call(`${s.url}/contract/averbacao`, { token: s.token, body: {} });
    await waitFor(() => r.received.length === 1, 'delivery in flight');
    await s.close();
    expect(s.state().deliveries[0]?.status).toBe('abandoned');
    expect(s.state().attempts[0]).toMatchObject({ error: 'simulator closed' });
    expect(s.state().registrations[0]?.consecutiveFailures).toBe(0); // not the callback's fault
  });

  it('`simulate` prints its URL and the control API, runs until a signal, then closes', async () => {
    const lines: string[] = [];
    const signals = new EventEmitter();
    let started: Simulator | undefined;
    const run = simulateCommand(
      { port: '0', json: true },
      { out: (t) => lines.push(t) },
      {
        logger: silent,
        onSignal: (listener) => {
          signals.on('signal', listener);
          return () => signals.off('signal', listener);
        },
        onStarted: (sim) => (started = sim),
      },
    );
    await waitFor(() => started !== undefined, 'started');
    const printed = JSON.parse(lines[0] as string);
    expect(printed).toMatchObject({ url: started?.url, tokenUrl: `${started?.url}/oauth/token` });
    expect(printed.control).toContain('GET  /_sim/state');
    expect((await call(`${printed.url}/_sim`)).status).toBe(200);
    signals.emit('signal', 'SIGINT');
    await run;
    await expect(fetch(`${printed.url}/_sim`)).rejects.toThrow();
    await expect(simulateCommand({ port: 'x' }, { out: () => undefined })).rejects.toThrow(/--port/);
  });
});
