import { existsSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/logger';
import { type Simulator, startSimulator } from '../../src/simulator';
import Database from '../../src/sqlite/sqlite-driver';
import { type FakeService, startFakeService } from '../helpers/fake-service';
import { runCli, runCliAsync } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/** The service API commands, as real processes against a real HTTP fake of the service. */

let fake: FakeService;
let tmp: ReturnType<typeof tempDir>;
let env: Record<string, string>;
beforeEach(async () => {
  fake = await startFakeService();
  tmp = tempDir('consig-svc-');
  env = {
    DATABASE_PATH: join(tmp.dir, 'consig.db'),
    SERVICE_BASE_URL: fake.url,
    SERVICE_ACCESS_TOKEN: 'tok-1',
    SERVICE_API_KEY: 'key-1',
    WEBHOOK_SECRETS: 'partner-secret',
  };
});
afterEach(async () => {
  await fake.close();
  tmp.cleanup();
});

const proposalArgs = [
  '--cpf',
  '529.982.247-25',
  '--cnpj',
  '12.ABC.345/01DE-35',
  '--amount',
  '15000.5',
  '--installments',
  '48',
  '--pix',
  'chave@pix',
];

it('create-proposal sends a validated body and prints the proposal', async () => {
  fake.on('POST', '/api/v1/propostas', {
    status: 201,
    json: { nu_proposta: 100001, status: 'em_analise', dt_criacao: '2026-11-21T10:00:00-03:00', uuid: 'u-1' },
  });
  const r = await runCliAsync(['create-proposal', ...proposalArgs], env);
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  expect(r.stdout).toContain('proposal 100001 created: em_analise');
  const [sent] = fake.requestsTo('POST', '/api/v1/propostas');
  expect(sent?.json).toMatchObject({
    nu_cpf: '52998224725',
    nu_cnpj_conveniada: '12ABC34501DE35',
    qt_parcela: 48,
    dados_bancarios: { pix: 'chave@pix' },
  });
  expect(sent?.headers.authorization).toBe('Bearer tok-1');
});

it('a business error prints its code and message on one line, exits non-zero, is not retried', async () => {
  fake.on('POST', '/api/v1/propostas', {
    status: 422,
    json: { error: 'BUSINESS_RULE_VIOLATION', message: 'Funcionário não encontrado na empresa conveniada' },
  });
  const r = await runCliAsync(['create-proposal', ...proposalArgs], env);
  expect(r.status).toBe(1);
  expect(r.stdout).toBe('');
  expect(r.stderr.trim().split('\n')).toHaveLength(1);
  expect(r.stderr).toContain('BUSINESS_RULE_VIOLATION: ');
  expect(r.stderr).toContain('Funcionário não encontrado na empresa conveniada');
  expect(fake.requestsTo('POST', '/api/v1/propostas')).toHaveLength(1);
});

it.each([
  [['--installments', '5'], 'qt_parcela'],
  [['--installments', '97'], 'qt_parcela'],
  [['--cpf', '529.982.247-24'], 'nu_cpf'],
  [['--cnpj', '12.ABC.345/01DE-36'], 'nu_cnpj_conveniada'],
])('invalid input %j is refused before sending (%s)', async (override, field) => {
  const args = [...proposalArgs];
  const i = args.indexOf(override[0] as string);
  args[i + 1] = override[1] as string;
  const r = await runCliAsync(['create-proposal', ...args], env);
  expect(r.status).toBe(2);
  expect(r.stderr).toContain(field);
  expect(fake.requests).toHaveLength(0);
});

it('start-averbacao tracks the requestId; request-status asks /request/:id; averbacoes lists it', async () => {
  fake.on('POST', '/contract/averbacao', {
    status: 202,
    json: { requestId: 'req-cli-1', status: 'queued', _links: { result: { href: '/result/req-cli-1' } } },
  });
  fake.on('GET', '/request/:id', {
    json: { requestId: 'req-cli-1', correlationId: 'c-1', status: 'processing' },
  });
  const started = await runCliAsync(['start-averbacao', '--proposal', '100001'], env);
  expect(started.status).toBe(0);
  expect(started.stdout).toContain('requestId req-cli-1');
  expect(fake.requestsTo('POST', '/contract/averbacao')[0]?.json).toEqual({ nu_proposta: 100001 });
  const status = await runCliAsync(['request-status', 'req-cli-1'], env);
  expect(status.stdout.trim()).toBe('req-cli-1: processing (correlationId c-1)');
  expect(fake.requestsTo('GET', '/request/req-cli-1')[0]?.headers['x-api-key']).toBe('key-1');
  expect(fake.requestsTo('*', '/result/')).toHaveLength(0);
  const list = JSON.parse(runCli(['averbacoes', '--json'], env).stdout);
  expect(list).toEqual([
    expect.objectContaining({
      request_id: 'req-cli-1',
      nu_proposta: 100001,
      tracked_via: 'started',
      status: 'queued',
    }),
  ]);
  expect(runCli(['averbacoes', '--stale'], env).stdout).toContain('(no rows)');
});

it('track declares a registration; the deprecated path is warned about on stderr', async () => {
  expect(runCli(['migrate'], env).status).toBe(0);
  const tracked = runCli(['track', 'req-decl-1', '--proposal', '7'], env);
  expect(tracked.status).toBe(0);
  expect(tracked.stdout).toContain('tracking req-decl-1');
  expect(runCli(['track', 'req-decl-1'], env).stdout).toContain('already tracked');
  fake.on('POST', '/contract', {
    status: 202,
    headers: { deprecation: 'true' },
    json: { requestId: 'req-old', status: 'queued' },
  });
  const old = await runCliAsync(['start-averbacao', '--deprecated-path', '--no-track'], env);
  expect(old.status).toBe(0);
  expect(old.stderr).toContain('deprecated');
});

it('register-webhook sends url, all 13 eventos and the secret', async () => {
  fake.on('POST', '/api/v1/webhooks', { status: 201, json: { id: 'wh-1' } });
  const r = await runCliAsync(['register-webhook', '--url', 'https://partner.example/webhooks'], env);
  expect(r.status).toBe(0);
  const sent = fake.requestsTo('POST', '/api/v1/webhooks')[0]?.json as {
    url: string;
    eventos: string[];
    secret: string;
  };
  expect(sent.url).toBe('https://partner.example/webhooks');
  expect(sent.eventos).toHaveLength(13);
  expect(sent.secret).toBe('partner-secret');
  expect(r.stdout).not.toContain('partner-secret');
});

it('without SERVICE_BASE_URL the API commands say so in one line', () => {
  const { SERVICE_BASE_URL: _unset, ...noService } = env;
  const r = runCli(['request-status', 'x'], noService);
  expect(r.status).toBe(2);
  expect(r.stderr.trim()).toBe(
    'consig-receiver: SERVICE_BASE_URL: required for request-status: the {base_url} of the service',
  );
});

it('report passes each --param through, a value may contain "=", and prints the answer as JSON', async () => {
  fake.on('GET', '/contracts/relationship-ended', { json: { items: [{ id: 1 }] } });
  const r = await runCliAsync(
    ['report', 'relationship-ended', '--param', 'dataInicio=2026-11-01', '--param', 'filtro=a=b'],
    env,
  );
  expect(r.status).toBe(0);
  expect(JSON.parse(r.stdout)).toEqual({ items: [{ id: 1 }] });
  const [sent] = fake.requestsTo('GET', '/contracts/relationship-ended');
  expect(sent?.query.get('dataInicio')).toBe('2026-11-01');
  expect(sent?.query.get('filtro')).toBe('a=b');
  expect(sent?.headers.authorization).toBe('Bearer tok-1');
});

it.each([
  [['report', 'relationship-ended', '--param', '=x'], '--param expects key=value'],
  [['report', 'nope'], 'unknown report "nope"'],
  [['offers', '--body', '{not json'], '--body expects a JSON object'],
  [['offers', '--body', '[1]'], '--body expects a JSON object'],
  [['offers', '--max-pages', 'many'], '--max-pages expects a number'],
])('%j is refused before sending: %s', async (args, message) => {
  const r = await runCliAsync(args, env);
  expect(r.status).toBe(2);
  expect(r.stderr).toContain(message);
  expect(fake.requests).toHaveLength(0);
});

it('offers sends the --body, stops at --max-pages and says the result is incomplete', async () => {
  fake.on('POST', '/offers/search', (_req, n) => ({
    json: { _embedded: { offers: [{ id: n + 1 }] }, _links: { next: { href: `/offers/search?p=${n + 2}` } } },
  }));
  const r = await runCliAsync(['offers', '--body', '{"prazo":24}', '--max-pages', '2'], env);
  expect(r.status).toBe(0);
  expect(JSON.parse(r.stdout)).toEqual({
    items: [{ id: 1 }, { id: 2 }],
    pages: 2,
    total: null,
    complete: false,
  });
  const sent = fake.requestsTo('POST', '/offers/search');
  expect(sent.map((req) => req.json)).toEqual([{ prazo: 24 }, { prazo: 24 }]);
  expect(sent[0]?.headers.authorization).toBeUndefined();
});

describe('report against the real simulator: CPFs masked unless --full-cpf, which is audited (issue 45)', () => {
  let sim: Simulator;
  let simEnv: Record<string, string>;
  beforeEach(async () => {
    sim = await startSimulator({ logger: createLogger('silent') });
    simEnv = {
      DATABASE_PATH: env.DATABASE_PATH as string,
      SERVICE_BASE_URL: sim.url,
      SERVICE_TOKEN_URL: sim.tokenUrl,
      SERVICE_CLIENT_ID: 'partner',
      SERVICE_CLIENT_SECRET: 'partner-secret',
    };
  });
  afterEach(() => sim.close());

  /** The 11 digits of a CPF, bare or formatted. */
  const CPF_IN_CLEAR = /(?<!\d)(\d{11}|\d{3}\.\d{3}\.\d{3}-\d{2})(?!\d)/;

  const auditRows = () => {
    const db = new Database(env.DATABASE_PATH as string, { readonly: true });
    try {
      return db.prepare('SELECT role, session, person, action, target, detail, ip FROM console_audit').all();
    } finally {
      db.close();
    }
  };

  it('prints every CPF masked by default, the rest of the answer as it was', async () => {
    for (const name of ['new-relationships', 'relationship-ended']) {
      const r = await runCliAsync(['report', name], simEnv);
      expect([name, r.status, r.stderr]).toEqual([name, 0, '']);
      expect(r.stdout).not.toMatch(CPF_IN_CLEAR);
      const items = Object.values((JSON.parse(r.stdout) as { _embedded: object })._embedded)[0] as Record<
        string,
        unknown
      >[];
      expect(items.length).toBeGreaterThan(0);
      for (const item of items) expect(item.nu_cpf).toMatch(/^\*\*\*\.\d{3}\.\d{3}-\*\*$/);
    }
    const r = await runCliAsync(['report', 'new-relationships'], simEnv);
    expect(JSON.parse(r.stdout)._embedded.relationships[0]).toEqual({
      nu_cpf: '***.982.247-**',
      nu_cnpj_conveniada: '11222333000181',
      dt_admissao: '2026-10-01',
      vl_salario: 4200,
    });
  });

  it('--full-cpf prints them in full, warns on stderr, and leaves one audit row naming the OS user', async () => {
    expect(runCli(['migrate'], simEnv).status).toBe(0);
    const r = await runCliAsync(
      ['report', 'new-relationships', '--full-cpf', '--param', 'dataInicio=2026-10-01'],
      simEnv,
    );
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('"nu_cpf": "52998224725"');
    expect(JSON.parse(r.stdout)._embedded.relationships).toHaveLength(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^consig-receiver: warning: this output holds CPFs in full .*recorded in console_audit/,
      ),
    ]);
    expect(auditRows()).toEqual([
      {
        role: 'admin',
        session: null,
        person: userInfo().username,
        action: 'report_full_cpf',
        target: 'new-relationships',
        detail: '{"params":{"dataInicio":"2026-10-01"}}',
        ip: null,
      },
    ]);
    // The default leaves no row.
    expect((await runCliAsync(['report', 'new-relationships'], simEnv)).status).toBe(0);
    expect(auditRows()).toHaveLength(1);
  });

  it('--full-cpf without a log says on stderr that it was not recorded, and creates none', async () => {
    const r = await runCliAsync(['report', 'relationship-ended', '--full-cpf'], simEnv);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('52998224725');
    expect(r.stderr).toMatch(/holds CPFs in full .*not recorded: no log at /);
    expect(existsSync(env.DATABASE_PATH as string)).toBe(false);
  });
});
