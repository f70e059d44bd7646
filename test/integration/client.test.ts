import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import {
  AuthError,
  BusinessError,
  createServiceClient,
  InvalidRequestError,
  MAX_RETRY_AFTER_MS,
  NetworkError,
  NotFoundError,
  parseRetryAfter,
  ProtocolError,
  RateLimitedError,
  REPORT_PATHS,
  type ReportName,
  type ServiceClient,
  serviceClientFromConfig,
  type ServiceClientOptions,
  ServiceUnavailableError,
} from '../../src/client';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { type FakeService, type RecordedRequest, startFakeService } from '../helpers/fake-service';

jest.setTimeout(10_000);

const CPF = '529.982.247-25';
const CPF_DIGITS = '52998224725';
const CNPJ = '11.222.333/0001-81';
const CLIENT_SECRET = 'client-secret-s3cr3t';
const API_KEY = 'api-key-k3y';
const STATIC_TOKEN = 'static-token-t0k3n';
const REQUEST_ID = '7d9f2a4e-5b1c-4e8a-9f3d-2c6b8a1e0f47';
const CORRELATION_ID = '0b6c1e2d-3f4a-4b5c-8d9e-a1b2c3d4e5f6';

const validProposal = () => ({
  nu_cpf: CPF,
  nu_cnpj_conveniada: CNPJ,
  vl_emprestimo: 15000.5,
  qt_parcela: 48,
  dados_bancarios: { pix: 'fulano@example.com' },
});

let fake: FakeService;
let logText: string;
let sleeps: number[];
let refreshes: number;
let nowMs: number;

beforeEach(async () => {
  fake = await startFakeService();
  logText = '';
  sleeps = [];
  refreshes = 0;
  nowMs = Date.parse('2026-11-21T12:00:00Z');
});
afterEach(async () => {
  await fake.close();
});

function logs(): Array<Record<string, unknown>> {
  return logText
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

function makeClient(overrides: Partial<ServiceClientOptions> = {}): ServiceClient {
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      logText += chunk.toString();
      cb();
    },
  });
  return createServiceClient({
    baseUrl: fake.url,
    tokenUrl: `${fake.url}/oauth/token`,
    clientId: 'partner-1',
    clientSecret: CLIENT_SECRET,
    apiKey: API_KEY,
    logger: createLogger('debug', stream),
    timeoutMs: 2000,
    now: () => nowMs,
    sleep: (ms) => {
      sleeps.push(ms);
      return Promise.resolve();
    },
    onTokenRefresh: () => {
      refreshes += 1;
    },
    ...overrides,
  });
}

/** The token endpoint issues tok-1, tok-2, … each living 600 s. */
function issueTokens(delayMs = 0): void {
  fake.on('POST', '/oauth/token', (_req, n) => ({
    delayMs,
    json: { access_token: `tok-${n + 1}`, token_type: 'Bearer', expires_in: 600 },
  }));
}

const statusBody = (status = 'processing') => ({
  json: { requestId: REQUEST_ID, correlationId: CORRELATION_ID, status },
});

const tokenRequests = () => fake.requestsTo('POST', '/oauth/token');
const statusRequests = () => fake.requestsTo('GET', '/request/');
const bearer = (r: RecordedRequest | undefined) => r?.headers.authorization;

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (err: unknown) => err,
  );
}

describe('authentication', () => {
  it('asks for a token with the client credentials grant and caches it across calls', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', statusBody());
    const client = makeClient();
    for (let i = 0; i < 3; i++) await client.requestStatus(REQUEST_ID);

    expect(tokenRequests()).toHaveLength(1);
    const tokenReq = tokenRequests()[0]!;
    expect(tokenReq.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(Object.fromEntries(new URLSearchParams(tokenReq.body))).toEqual({
      grant_type: 'client_credentials',
      client_id: 'partner-1',
      client_secret: CLIENT_SECRET,
    });
    expect(tokenReq.headers.authorization).toBeUndefined();
    expect(tokenReq.headers['x-api-key']).toBeUndefined();
    expect(statusRequests().map(bearer)).toEqual(['Bearer tok-1', 'Bearer tok-1', 'Bearer tok-1']);
    expect(refreshes).toBe(1);
  });

  it('renews the token 60 s before expires_in', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', statusBody());
    const client = makeClient();
    await client.requestStatus(REQUEST_ID);
    nowMs += 539_000; // 600 s lifetime − 60 s margin = 540 s
    await client.requestStatus(REQUEST_ID);
    expect(tokenRequests()).toHaveLength(1);
    nowMs += 1_000;
    await client.requestStatus(REQUEST_ID);
    expect(tokenRequests()).toHaveLength(2);
    expect(statusRequests().map(bearer)).toEqual(['Bearer tok-1', 'Bearer tok-1', 'Bearer tok-2']);
  });

  it('uses a margin of 10 % of the lifetime for short-lived tokens', async () => {
    fake.on('POST', '/oauth/token', (_req, n) => ({
      json: { access_token: `tok-${n + 1}`, expires_in: 100 },
    }));
    fake.on('GET', '/request/:id', statusBody());
    const client = makeClient();
    await client.requestStatus(REQUEST_ID);
    nowMs += 89_000;
    await client.requestStatus(REQUEST_ID);
    nowMs += 1_000;
    await client.requestStatus(REQUEST_ID);
    expect(tokenRequests()).toHaveLength(2);
  });

  it('on a 401 refreshes the token exactly once and retries with the new one', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', (req) =>
      req.headers.authorization === 'Bearer tok-1'
        ? { status: 401, json: { error: 'UNAUTHORIZED' } }
        : statusBody(),
    );
    const client = makeClient();
    const result = await client.requestStatus(REQUEST_ID);

    expect(result.status).toBe('processing');
    expect(tokenRequests()).toHaveLength(2);
    expect(statusRequests().map(bearer)).toEqual(['Bearer tok-1', 'Bearer tok-2']);
    expect(refreshes).toBe(2);
    // The refreshed token is then cached.
    await client.requestStatus(REQUEST_ID);
    expect(tokenRequests()).toHaveLength(2);
  });

  it('a second 401 after the refresh is an AuthError, with no further refresh', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 401 });
    const err = await rejection(makeClient().requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).code).toBe('SERVICE_AUTH_FAILED');
    expect((err as AuthError).status).toBe(401);
    expect(tokenRequests()).toHaveLength(2);
    expect(statusRequests()).toHaveLength(2);
    expect(sleeps).toEqual([]);
  });

  it('a static token rejected with 401 is an AuthError at once', async () => {
    fake.on('GET', '/request/:id', { status: 401 });
    const client = makeClient({ tokenUrl: undefined, accessToken: STATIC_TOKEN });
    const err = await rejection(client.requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(AuthError);
    expect(statusRequests()).toHaveLength(1);
    expect(bearer(statusRequests()[0])).toBe(`Bearer ${STATIC_TOKEN}`);
    expect(String(err)).not.toContain(STATIC_TOKEN);
  });

  it('403 is an AuthError, not retried', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 403, json: { error: 'FORBIDDEN', message: 'sem permissão' } });
    const err = await rejection(makeClient().requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).status).toBe(403);
    expect(statusRequests()).toHaveLength(1);
    expect(tokenRequests()).toHaveLength(1);
  });

  it('20 concurrent calls share one token request', async () => {
    issueTokens(50); // slow enough that all 20 calls wait for it
    fake.on('GET', '/request/:id', statusBody());
    const client = makeClient();
    const results = await Promise.all(Array.from({ length: 20 }, () => client.requestStatus(REQUEST_ID)));
    expect(results).toHaveLength(20);
    expect(tokenRequests()).toHaveLength(1);
    expect(new Set(statusRequests().map(bearer))).toEqual(new Set(['Bearer tok-1']));
    expect(refreshes).toBe(1);
  });

  it('concurrent 401s also share one refresh', async () => {
    issueTokens(20);
    fake.on('GET', '/request/:id', (req) =>
      req.headers.authorization === 'Bearer tok-1' ? { status: 401 } : statusBody(),
    );
    const client = makeClient();
    await Promise.all(Array.from({ length: 10 }, () => client.requestStatus(REQUEST_ID)));
    expect(tokenRequests()).toHaveLength(2);
  });

  it('a token endpoint refusing the credentials gives an AuthError with the OAuth error code', async () => {
    fake.on('POST', '/oauth/token', {
      status: 401,
      json: { error: 'invalid_client', error_description: 'bad secret' },
    });
    const err = await rejection(makeClient().requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(AuthError);
    expect((err as AuthError).oauthError).toBe('invalid_client');
    expect(statusRequests()).toHaveLength(0);
    expect(JSON.stringify(err) + String(err)).not.toContain(CLIENT_SECRET);
  });

  it.each([{ token_type: 'Bearer' }, { access_token: '  ', expires_in: 600 }])(
    'a token response without a usable access_token (%j) is a ProtocolError',
    async (body) => {
      fake.on('POST', '/oauth/token', { json: body });
      await expect(makeClient().requestStatus(REQUEST_ID)).rejects.toBeInstanceOf(ProtocolError);
      expect(statusRequests()).toHaveLength(0);
    },
  );

  it('a token request that gets a 5xx is retried like any call that is safe to repeat', async () => {
    fake.on('POST', '/oauth/token', { status: 503 }, { json: { access_token: 'tok-late', expires_in: 600 } });
    fake.on('GET', '/request/:id', statusBody());
    await makeClient().requestStatus(REQUEST_ID);
    expect(tokenRequests()).toHaveLength(2);
    expect(sleeps).toHaveLength(1);
    expect(statusRequests().map(bearer)).toEqual(['Bearer tok-late']);
    expect(refreshes).toBe(1);
  });

  it('without any credentials an authenticated call fails locally', async () => {
    const client = makeClient({ tokenUrl: undefined, accessToken: undefined });
    await expect(client.requestStatus(REQUEST_ID)).rejects.toBeInstanceOf(AuthError);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('headers', () => {
  it('GET /request/:id carries Authorization: Bearer and x-api-key, with the id encoded', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', (req) => ({ json: { requestId: req.params.id, status: 'queued' } }));
    const client = makeClient();
    await client.requestStatus(REQUEST_ID);
    const odd = await client.requestStatus('a/b c');

    const [first, second] = statusRequests();
    expect(first?.path).toBe(`/request/${REQUEST_ID}`);
    expect(first?.headers.authorization).toBe('Bearer tok-1');
    expect(first?.headers['x-api-key']).toBe(API_KEY);
    expect(second?.path).toBe('/request/a%2Fb%20c');
    expect(odd.requestId).toBe('a/b c');
  });

  it('POST /offers/search is public: no Authorization, no x-api-key, no token request', async () => {
    issueTokens();
    fake.on('POST', '/offers/search', { json: { _embedded: { offers: [{ id: 1 }] } } });
    const result = await makeClient().searchOffers({ valor: 1000 });
    expect(result.items).toEqual([{ id: 1 }]);
    const [req] = fake.requestsTo('POST', '/offers/search');
    expect(req?.headers.authorization).toBeUndefined();
    expect(req?.headers['x-api-key']).toBeUndefined();
    expect(req?.json).toEqual({ valor: 1000 });
    expect(tokenRequests()).toHaveLength(0);
  });
});

describe('retries', () => {
  it('429 with Retry-After in seconds waits that long, then succeeds', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 429, headers: { 'retry-after': '2' } }, statusBody());
    const result = await makeClient().requestStatus(REQUEST_ID);
    expect(result.status).toBe('processing');
    expect(sleeps).toEqual([2000]);
    expect(statusRequests()).toHaveLength(2);
  });

  it('429 with Retry-After as an HTTP date waits until then', async () => {
    issueTokens();
    const at = new Date(nowMs + 7000).toUTCString();
    fake.on('GET', '/request/:id', { status: 429, headers: { 'retry-after': at } }, statusBody());
    await makeClient().requestStatus(REQUEST_ID);
    expect(sleeps).toEqual([7000]);
  });

  it('503 with Retry-After is honoured too', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 503, headers: { 'retry-after': '4' } }, statusBody());
    await makeClient().requestStatus(REQUEST_ID);
    expect(sleeps).toEqual([4000]);
  });

  it('a long Retry-After is capped', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 429, headers: { 'retry-after': '3600' } }, statusBody());
    await makeClient().requestStatus(REQUEST_ID);
    expect(sleeps).toEqual([MAX_RETRY_AFTER_MS]);
  });

  it('429 after every retry is a RateLimitedError carrying the last Retry-After', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 429, headers: { 'retry-after': '5' } });
    const err = await rejection(makeClient({ retries: 2 }).requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(RateLimitedError);
    expect((err as RateLimitedError).code).toBe('SERVICE_RATE_LIMITED');
    expect((err as RateLimitedError).retryAfterMs).toBe(5000);
    expect((err as RateLimitedError).attempts).toBe(3);
    expect(sleeps).toEqual([5000, 5000]);
  });

  it('5xx is retried with growing, jittered backoff, then succeeds', async () => {
    issueTokens();
    fake.on(
      'GET',
      '/request/:id',
      { status: 503 },
      { status: 502, body: 'Bad Gateway' },
      statusBody('completed'),
    );
    const result = await makeClient().requestStatus(REQUEST_ID);
    expect(result.status).toBe('completed');
    expect(statusRequests()).toHaveLength(3);
    expect(sleeps).toHaveLength(2);
    expect(sleeps[0]).toBeGreaterThanOrEqual(125);
    expect(sleeps[0]).toBeLessThanOrEqual(250);
    expect(sleeps[1]).toBeGreaterThanOrEqual(250);
    expect(sleeps[1]).toBeLessThanOrEqual(500);
  });

  it('5xx on every attempt is a ServiceUnavailableError after 1 + retries requests', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 503, json: { error: 'UNAVAILABLE', message: 'manutenção' } });
    const err = await rejection(makeClient().requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(ServiceUnavailableError);
    expect((err as ServiceUnavailableError).code).toBe('SERVICE_UNAVAILABLE');
    expect((err as ServiceUnavailableError).status).toBe(503);
    expect((err as ServiceUnavailableError).attempts).toBe(4);
    expect(statusRequests()).toHaveLength(4);
    expect(sleeps).toHaveLength(3);
  });

  it('a POST that got a 5xx is retried too (the service answered, so it did not act)', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', { status: 500 }, { status: 201, json: { nu_proposta: 1 } });
    const created = await makeClient().createProposal(validProposal());
    expect(created.nu_proposta).toBe(1);
    expect(fake.requestsTo('POST', '/api/v1/propostas')).toHaveLength(2);
  });

  it('a timeout on every attempt is a NetworkError after the retries', async () => {
    issueTokens();
    // The 100 ms bound every request of the client, its token's too: a token request slower than
    // that (a loaded machine) was retried, one sleep more. So the client gets its token first, from
    // a call that answers (repeated until it does), and only then meets the request that hangs.
    const warmUp = '0b5e8c1d-3f6a-4d2b-8e9c-1a7f4b2d6e30';
    fake.on('GET', `/request/${warmUp}`, {
      json: { requestId: warmUp, correlationId: CORRELATION_ID, status: 'queued' },
    });
    fake.on('GET', '/request/:id', 'hang');
    const client = makeClient({ timeoutMs: 100, retries: 2 });
    while (
      !(await client.requestStatus(warmUp).then(
        () => true,
        () => false,
      ))
    );
    sleeps.length = 0;
    const err = await rejection(client.requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(NetworkError);
    expect((err as NetworkError).code).toBe('SERVICE_NETWORK_ERROR');
    expect((err as NetworkError).timedOut).toBe(true);
    expect((err as NetworkError).outcomeUnknown).toBe(false);
    // The client's own count (a request it gave up on may not have reached the fake yet).
    expect((err as NetworkError).attempts).toBe(3);
    expect(sleeps).toHaveLength(2);
    expect(fake.requestsTo('GET', `/request/${REQUEST_ID}`).length).toBeLessThanOrEqual(3);
  });

  it('a dropped connection on a GET is retried', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', 'reset', statusBody());
    await makeClient().requestStatus(REQUEST_ID);
    expect(statusRequests()).toHaveLength(2);
  });

  it('a timed-out proposal creation is not repeated: the proposal may exist', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', 'hang');
    const err = await rejection(makeClient({ timeoutMs: 100 }).createProposal(validProposal()));
    expect(err).toBeInstanceOf(NetworkError);
    expect((err as NetworkError).outcomeUnknown).toBe(true);
    expect(fake.requestsTo('POST', '/api/v1/propostas')).toHaveLength(1);
  });

  it('a refused connection is retried even for a POST (it never left), then a NetworkError', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const { port } = closed.address() as AddressInfo;
    await new Promise((r) => closed.close(r));

    const client = makeClient({
      baseUrl: `http://127.0.0.1:${port}`,
      accessToken: STATIC_TOKEN,
      tokenUrl: undefined,
    });
    const err = await rejection(client.startAverbacao({ nu_proposta: 1 }));
    expect(err).toBeInstanceOf(NetworkError);
    expect((err as NetworkError).reason).toBe('ECONNREFUSED');
    expect((err as NetworkError).outcomeUnknown).toBe(false);
    expect((err as NetworkError).attempts).toBe(4);
    expect(sleeps).toHaveLength(3);
  });
});

describe('business errors', () => {
  const violation = {
    error: 'BUSINESS_RULE_VIOLATION',
    message: 'Funcionário não encontrado na conveniada informada',
  };

  it.each([400, 404, 409, 422, 500])(
    'BUSINESS_RULE_VIOLATION with HTTP %p is a BusinessError, sent exactly once',
    async (status) => {
      issueTokens();
      fake.on('POST', '/api/v1/propostas', { status, json: violation });
      const err = await rejection(makeClient().createProposal(validProposal()));
      expect(err).toBeInstanceOf(BusinessError);
      const b = err as BusinessError;
      expect(b.code).toBe('SERVICE_BUSINESS_ERROR');
      expect(b.error).toBe('BUSINESS_RULE_VIOLATION');
      expect(b.message).toBe('Funcionário não encontrado na conveniada informada');
      expect(b.status).toBe(status);
      expect(fake.requestsTo('POST', '/api/v1/propostas')).toHaveLength(1);
      expect(sleeps).toEqual([]);
    },
  );

  it('another {error, message} on a 4xx is a BusinessError too', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', {
      status: 422,
      json: { error: 'MARGEM_INSUFICIENTE', message: 'sem margem' },
    });
    const err = await rejection(makeClient().createProposal(validProposal()));
    expect(err).toBeInstanceOf(BusinessError);
    expect((err as BusinessError).error).toBe('MARGEM_INSUFICIENTE');
  });

  it('a CPF quoted in the service message is masked', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', {
      status: 422,
      json: { error: 'BUSINESS_RULE_VIOLATION', message: `CPF ${CPF} (${CPF_DIGITS}) não encontrado` },
    });
    const err = (await rejection(makeClient().createProposal(validProposal()))) as BusinessError;
    expect(err.message).toBe('CPF ***.982.247-** (***.982.247-**) não encontrado');
  });

  it('a 4xx without the {error, message} body is a ProtocolError, not retried', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', { status: 400, body: '<html>bad request</html>' });
    const err = await rejection(makeClient().createProposal(validProposal()));
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).status).toBe(400);
    expect(fake.requestsTo('POST', '/api/v1/propostas')).toHaveLength(1);
  });

  it('a CPF quoted in a 404 message is masked too', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', {
      status: 404,
      json: { error: 'NOT_FOUND', message: `nada para o CPF ${CPF_DIGITS}` },
    });
    const err = (await rejection(makeClient().requestStatus(REQUEST_ID))) as NotFoundError;
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.serviceMessage).toBe('nada para o CPF ***.982.247-**');
    expect(err.message).not.toContain(CPF_DIGITS);
  });

  it('404 on the status query is a NotFoundError', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', {
      status: 404,
      json: { error: 'NOT_FOUND', message: 'requisição não encontrada' },
    });
    const err = await rejection(makeClient().requestStatus(REQUEST_ID));
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).code).toBe('SERVICE_NOT_FOUND');
    expect((err as NotFoundError).error).toBe('NOT_FOUND');
    expect(statusRequests()).toHaveLength(1);
  });

  it('a redirect is not followed', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 302, headers: { location: '/elsewhere' } });
    await expect(makeClient().requestStatus(REQUEST_ID)).rejects.toBeInstanceOf(ProtocolError);
    expect(fake.requestsTo('*', '/elsewhere')).toHaveLength(0);
  });
});

describe('proposals', () => {
  it('sends the normalised body and returns the creation response', async () => {
    issueTokens();
    const response = {
      nu_proposta: 123456,
      status: 'em_analise',
      dt_criacao: '2026-11-21T09:00:00-03:00',
      uuid: '9b2e4c1a-7f3d-4a5b-8c6d-1e2f3a4b5c6d',
    };
    fake.on('POST', '/api/v1/propostas', { status: 201, json: response });
    const created = await makeClient().createProposal({
      ...validProposal(),
      nu_cnpj_conveniada: '12.abc.345/01de-35',
      extra_field: 'kept',
    });
    expect(created).toEqual({ ...response, raw: response });
    const [req] = fake.requestsTo('POST', '/api/v1/propostas');
    expect(req?.headers['content-type']).toBe('application/json');
    expect(req?.json).toEqual({
      nu_cpf: CPF_DIGITS,
      nu_cnpj_conveniada: '12ABC34501DE35',
      vl_emprestimo: 15000.5,
      qt_parcela: 48,
      dados_bancarios: { pix: 'fulano@example.com' },
      extra_field: 'kept',
    });
  });

  it('a creation response without nu_proposta is a ProtocolError', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', { status: 201, json: { status: 'em_analise' } });
    await expect(makeClient().createProposal(validProposal())).rejects.toBeInstanceOf(ProtocolError);
  });

  it.each([
    ['nu_cpf', { nu_cpf: '529.982.247-24' }],
    ['nu_cpf', { nu_cpf: '111.111.111-11' }],
    ['nu_cpf', { nu_cpf: '5299822472' }],
    ['nu_cpf', { nu_cpf: 52998224725 }],
    ['nu_cnpj_conveniada', { nu_cnpj_conveniada: '11.222.333/0001-82' }],
    ['nu_cnpj_conveniada', { nu_cnpj_conveniada: '12.ABC.345/01DE-36' }],
    ['nu_cnpj_conveniada', { nu_cnpj_conveniada: '12.ABC.345/01DE-XX' }],
    ['qt_parcela', { qt_parcela: 5 }],
    ['qt_parcela', { qt_parcela: 97 }],
    ['qt_parcela', { qt_parcela: 12.5 }],
    ['qt_parcela', { qt_parcela: '12' }],
    ['vl_emprestimo', { vl_emprestimo: 0 }],
    ['vl_emprestimo', { vl_emprestimo: -100 }],
    ['vl_emprestimo', { vl_emprestimo: Number.NaN }],
    ['vl_emprestimo', { vl_emprestimo: Number.POSITIVE_INFINITY }],
    ['vl_emprestimo', { vl_emprestimo: '1000' }],
    ['dados_bancarios', { dados_bancarios: undefined }],
    ['dados_bancarios', { dados_bancarios: {} }],
    ['dados_bancarios', { dados_bancarios: { banco: '001', agencia: '1234' } }],
    ['dados_bancarios', { dados_bancarios: { pix: '' } }],
  ])('rejects a bad %s locally, without any request', async (field, change) => {
    issueTokens();
    const err = await rejection(makeClient().createProposal({ ...validProposal(), ...change } as never));
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect((err as InvalidRequestError).code).toBe('INVALID_REQUEST');
    expect((err as InvalidRequestError).field).toBe(field);
    expect((err as InvalidRequestError).message).toContain(field);
    expect((err as InvalidRequestError).message).not.toContain('529.982.247');
    expect(fake.requests).toHaveLength(0);
  });

  it('lists every bad field', async () => {
    const err = (await rejection(
      makeClient().createProposal({ ...validProposal(), nu_cpf: '1', qt_parcela: 97 }),
    )) as InvalidRequestError;
    expect(err.issues.map((i) => i.field)).toEqual(['nu_cpf', 'qt_parcela']);
  });

  it('accepts banco + agencia + conta instead of pix', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/propostas', { status: 201, json: { nu_proposta: '77' } });
    const created = await makeClient().createProposal({
      ...validProposal(),
      dados_bancarios: { banco: '001', agencia: '1234', conta: '56789-0' },
    });
    expect(created.nu_proposta).toBe('77');
  });
});

describe('averbação', () => {
  const accepted = {
    requestId: REQUEST_ID,
    status: 'queued',
    _links: { result: { href: `/result/${REQUEST_ID}` } },
  };

  it('starts it, ignores _links.result, and the status is asked at /request/:id — never /result/', async () => {
    issueTokens();
    fake.on('POST', '/contract/averbacao', { status: 202, json: accepted });
    fake.on('GET', '/result/:id', 'hang'); // §4.2: the linked route does not answer
    fake.on('GET', '/request/:id', statusBody('completed'));
    const client = makeClient({ timeoutMs: 200 });

    const started = await client.startAverbacao({ nu_proposta: 123456 });
    expect(started).toEqual({
      requestId: REQUEST_ID,
      status: 'queued',
      correlationId: null,
      httpStatus: 202,
      raw: accepted,
    });
    const status = await client.requestStatus(started.requestId);
    expect(status).toEqual({
      requestId: REQUEST_ID,
      correlationId: CORRELATION_ID,
      status: 'completed',
      raw: { requestId: REQUEST_ID, correlationId: CORRELATION_ID, status: 'completed' },
    });

    expect(fake.requestsTo('*', '/result')).toHaveLength(0);
    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /oauth/token',
      'POST /contract/averbacao',
      `GET /request/${REQUEST_ID}`,
    ]);
    expect(fake.requestsTo('POST', '/contract/averbacao')[0]?.json).toEqual({ nu_proposta: 123456 });
  });

  it('accepts 200 and 201 as well as 202', async () => {
    issueTokens();
    fake.on('POST', '/contract/averbacao', { status: 200, json: accepted }, { status: 201, json: accepted });
    const client = makeClient();
    expect((await client.startAverbacao({})).httpStatus).toBe(200);
    expect((await client.startAverbacao({})).httpStatus).toBe(201);
  });

  it('an accepted response without requestId is a ProtocolError', async () => {
    issueTokens();
    fake.on('POST', '/contract/averbacao', { status: 202, json: { status: 'queued' } });
    await expect(makeClient().startAverbacao({})).rejects.toBeInstanceOf(ProtocolError);
  });

  it('warns once per path when the deprecated POST /contract answers with Deprecation: true', async () => {
    issueTokens();
    fake.on('POST', '/contract', { status: 202, headers: { deprecation: 'true' }, json: accepted });
    fake.on('POST', '/contract/averbacao', { status: 202, json: accepted });
    const client = makeClient();
    await client.startAverbacao({ a: 1 }, { deprecatedPath: true });
    await client.startAverbacao({ a: 2 }, { deprecatedPath: true });
    await client.startAverbacao({ a: 3 });

    expect(fake.requestsTo('POST', '/contract')).toHaveLength(3);
    const warnings = logs().filter((l) => String(l.msg).includes('deprecated'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({
      level: 'warn',
      msg: 'POST /contract is deprecated (Deprecation: true): use POST /contract/averbacao',
      route: 'POST /contract',
    });
  });

  it('behind a base-URL prefix, the deprecation warning still names the interface path', async () => {
    issueTokens();
    fake.on('POST', '/consig/contract', { status: 202, headers: { deprecation: 'true' }, json: accepted });
    await makeClient({ baseUrl: `${fake.url}/consig` }).startAverbacao({}, { deprecatedPath: true });
    const warnings = logs().filter((l) => String(l.msg).includes('deprecated'));
    expect(warnings).toEqual([
      expect.objectContaining({
        msg: 'POST /contract is deprecated (Deprecation: true): use POST /contract/averbacao',
      }),
    ]);
  });

  it('a status answer about another requestId, or without status, is a ProtocolError', async () => {
    issueTokens();
    fake.on(
      'GET',
      '/request/:id',
      { json: { requestId: 'other', status: 'completed' } },
      { json: { requestId: REQUEST_ID } },
    );
    const client = makeClient();
    await expect(client.requestStatus(REQUEST_ID)).rejects.toBeInstanceOf(ProtocolError);
    await expect(client.requestStatus(REQUEST_ID)).rejects.toBeInstanceOf(ProtocolError);
  });

  it.each(['', '.', '..'])('rejects the requestId %p locally', async (id) => {
    await expect(makeClient().requestStatus(id)).rejects.toBeInstanceOf(InvalidRequestError);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('webhook registration and reports', () => {
  it('registers a webhook and returns the unshown response as it came', async () => {
    issueTokens();
    fake.on('POST', '/api/v1/webhooks', { status: 201, json: { id: 'wh-1' } });
    const reg = {
      url: 'https://partner.example/webhooks',
      eventos: ['proposta.aprovada'],
      secret: 'whsec-123',
    };
    const result = await makeClient().registerWebhook(reg);
    expect(result).toEqual({ httpStatus: 201, raw: { id: 'wh-1' } });
    expect(fake.requestsTo('POST', '/api/v1/webhooks')[0]?.json).toEqual(reg);
    expect(logText).not.toContain('whsec-123');
  });

  it('rejects a bad webhook registration locally', async () => {
    const err = (await rejection(
      makeClient().registerWebhook({ url: 'ftp://x', eventos: [], secret: '' }),
    )) as InvalidRequestError;
    expect(err.issues.map((i) => i.field)).toEqual(['url', 'eventos', 'secret']);
    expect(fake.requests).toHaveLength(0);
  });

  it.each(Object.entries(REPORT_PATHS))(
    'report %s → GET %s with the query passed through',
    async (name, path) => {
      issueTokens();
      fake.on('GET', path, { json: { items: [name] } });
      const body = await makeClient().report(name as ReportName, {
        dataInicio: '2026-11-01',
        pagina: 2,
        status: ['ativo', 'suspenso'],
        vazio: undefined,
      });
      expect(body).toEqual({ items: [name] });
      const [req] = fake.requestsTo('GET', path);
      expect(req?.query.get('dataInicio')).toBe('2026-11-01');
      expect(req?.query.get('pagina')).toBe('2');
      expect(req?.query.getAll('status')).toEqual(['ativo', 'suspenso']);
      expect(req?.query.has('vazio')).toBe(false);
      expect(req?.headers.authorization).toBe('Bearer tok-1');
    },
  );

  it('a report answer that is not JSON is a ProtocolError', async () => {
    issueTokens();
    fake.on('GET', REPORT_PATHS['relationship-ended'], { body: '<html>relatório</html>' });
    const err = await rejection(makeClient().report('relationship-ended'));
    expect(err).toBeInstanceOf(ProtocolError);
    expect((err as ProtocolError).path).toBe('/contracts/relationship-ended');
  });

  it('an unknown report name is rejected locally', async () => {
    await expect(makeClient().report('nope' as ReportName)).rejects.toBeInstanceOf(InvalidRequestError);
  });

  it('keeps a path prefix of the base URL', async () => {
    issueTokens();
    fake.on('GET', '/consig/request/:id', statusBody());
    await makeClient({ baseUrl: `${fake.url}/consig/` }).requestStatus(REQUEST_ID);
    expect(fake.requestsTo('GET', '/consig/request/')).toHaveLength(1);
  });
});

describe('offers search pagination', () => {
  const page = (n: number, next: string | null) => ({
    json: {
      total: 5,
      pageStart: (n - 1) * 2,
      pageSize: 2,
      totalPages: 3,
      _embedded: { offers: n === 3 ? [{ id: 5 }] : [{ id: 2 * n - 1 }, { id: 2 * n }] },
      _links: { self: { href: '/offers/search' }, ...(next === null ? {} : { next: { href: next } }) },
    },
  });

  it('follows _links.next over 3 pages, sending the same body each time', async () => {
    fake.on('POST', '/offers/search', (req) => {
      const p = req.query.get('p');
      return p === '3'
        ? page(3, null)
        : p === '2'
          ? page(2, '/offers/search?p=3')
          : page(1, '/offers/search?p=2');
    });
    const result = await makeClient().searchOffers({ prazo: 24 });
    expect(result).toEqual({
      items: [1, 2, 3, 4, 5].map((id) => ({ id })),
      pages: 3,
      total: 5,
      complete: true,
    });
    const reqs = fake.requestsTo('POST', '/offers/search');
    expect(reqs.map((r) => r.query.get('p'))).toEqual([null, '2', '3']);
    expect(reqs.every((r) => JSON.stringify(r.json) === '{"prazo":24}')).toBe(true);
  });

  it('without links, walks pageStart/pageSize up to totalPages', async () => {
    fake.on('POST', '/offers/search', (req) => {
      const start = Number(req.query.get('pageStart') ?? '0');
      const body = page(start / 2 + 1, null);
      delete (body.json as { _links?: unknown })._links;
      return body;
    });
    const result = await makeClient().searchOffers({});
    expect(result.pages).toBe(3);
    expect(result.items).toHaveLength(5);
    expect(fake.requestsTo('POST', '/offers/search').map((r) => r.query.get('pageStart'))).toEqual([
      null,
      '2',
      '4',
    ]);
  });

  it('stops at maxPages and says the result is incomplete', async () => {
    fake.on('POST', '/offers/search', (_req, n) => page(1, `/offers/search?p=${n + 2}`));
    const result = await makeClient().searchOffers({}, { maxPages: 2 });
    expect(result.pages).toBe(2);
    expect(result.complete).toBe(false);
    expect(fake.requestsTo('POST', '/offers/search')).toHaveLength(2);
  });

  it('without links or totalPages, stops where pageStart + pageSize reaches total', async () => {
    fake.on('POST', '/offers/search', (req) => {
      const start = Number(req.query.get('pageStart') ?? '0');
      const items = [1, 2, 3, 4, 5].slice(start, start + 2).map((id) => ({ id }));
      return { json: { total: 5, pageStart: start, pageSize: 2, _embedded: { offers: items } } };
    });
    const result = await makeClient().searchOffers({});
    expect(result).toEqual({
      items: [1, 2, 3, 4, 5].map((id) => ({ id })),
      pages: 3,
      total: 5,
      complete: true,
    });
  });

  it('a next link back to a page already read ends the walk', async () => {
    fake.on('POST', '/offers/search', (req) =>
      req.query.get('p') === '2' ? page(2, '/offers/search') : page(1, '/offers/search?p=2'),
    );
    const result = await makeClient().searchOffers({});
    expect(result.pages).toBe(2);
    expect(result.complete).toBe(true);
    expect(fake.requestsTo('POST', '/offers/search')).toHaveLength(2);
  });

  it('refuses a next link to another origin', async () => {
    fake.on('POST', '/offers/search', page(1, 'http://example.invalid/offers/search?p=2'));
    await expect(makeClient().searchOffers({})).rejects.toBeInstanceOf(ProtocolError);
  });
});

describe('secrets and personal data', () => {
  it('never appear in logs or errors', async () => {
    issueTokens();
    fake.on('GET', '/request/:id', { status: 401 });
    fake.on(
      'POST',
      '/api/v1/propostas',
      { status: 503 },
      {
        status: 422,
        json: { error: 'BUSINESS_RULE_VIOLATION', message: `CPF ${CPF_DIGITS} sem vínculo` },
      },
    );
    const client = makeClient();
    const errors = [
      await rejection(client.requestStatus(REQUEST_ID)),
      await rejection(client.createProposal(validProposal())),
      await rejection(client.createProposal({ ...validProposal(), qt_parcela: 200 })),
    ];
    const seen = logText + errors.map((e) => `${String(e)} ${JSON.stringify(e)}`).join('\n');
    expect(logText).not.toBe('');
    for (const secret of ['tok-1', 'tok-2', CLIENT_SECRET, API_KEY, CPF_DIGITS, CPF]) {
      expect(seen).not.toContain(secret);
    }
  });
});

describe('serviceClientFromConfig', () => {
  const logger = createLogger('silent');

  it('is null without SERVICE_BASE_URL', () => {
    expect(serviceClientFromConfig(loadConfig({}), logger)).toBeNull();
  });

  it('builds a client from the SERVICE_* variables', async () => {
    fake.on('GET', '/request/:id', statusBody());
    const config = loadConfig({
      SERVICE_BASE_URL: fake.url,
      SERVICE_ACCESS_TOKEN: STATIC_TOKEN,
      SERVICE_API_KEY: API_KEY,
    });
    const client = serviceClientFromConfig(config, logger);
    expect(client).not.toBeNull();
    await client?.requestStatus(REQUEST_ID);
    expect(statusRequests()[0]?.headers).toMatchObject({
      authorization: `Bearer ${STATIC_TOKEN}`,
      'x-api-key': API_KEY,
    });
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-11-21T12:00:00Z');
  it.each([
    ['0', 0],
    ['120', 120_000],
    [' 3 ', 3000],
    ['Sat, 21 Nov 2026 12:00:10 GMT', 10_000],
    ['Sat, 21 Nov 2026 11:59:00 GMT', 0], // in the past
    ['-5', null],
    ['1.5', null],
    ['soon', null],
    [null, null],
  ])('%p → %p', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });
});
