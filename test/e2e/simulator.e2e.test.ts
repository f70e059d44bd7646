import { join } from 'node:path';
import { stablePort } from '../../rigs/harness';
import Database from '../../src/sqlite/sqlite-driver';
import { createServiceClient } from '../../src/client';
import { EVENTOS } from '../../src/domain/catalogue';
import { createLogger } from '../../src/logger';
import { type Simulator, startSimulator } from '../../src/simulator';
import { runCliAsync, type ServerProcess, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * End to end: the real receiver process and the service simulator over loopback.
 */

let tmp: ReturnType<typeof tempDir>;
let dbPath: string;
let sim: Simulator | undefined;
let servers: ServerProcess[] = [];
const SECRET = 'e2e-shared-secret';
const quiet = createLogger('silent');

beforeEach(() => {
  tmp = tempDir('consig-sim-e2e-');
  dbPath = join(tmp.dir, 'consig.db');
  servers = [];
});
afterEach(async () => {
  for (const s of servers) s.child.kill('SIGKILL');
  await sim?.close();
  sim = undefined;
  tmp.cleanup();
});

async function serve(extra: Record<string, string> = {}): Promise<ServerProcess> {
  const s = await startServe({ DATABASE_PATH: dbPath, WEBHOOK_SECRETS: SECRET, ...extra });
  servers.push(s);
  return s;
}

function client(s: Simulator) {
  return createServiceClient({
    baseUrl: s.url,
    tokenUrl: s.tokenUrl,
    clientId: 'p',
    clientSecret: 'q',
    logger: quiet,
  });
}

async function until(
  what: string,
  predicate: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function db() {
  return new Database(dbPath, { readonly: true });
}

function query<T>(sql: string, ...params: unknown[]): T[] {
  const d = db();
  try {
    return d.prepare(sql).all(...params) as T[];
  } finally {
    d.close();
  }
}

const proposalBody = (amount = 15000) => ({
  nu_cpf: '52998224725',
  nu_cnpj_conveniada: '11.222.333/0001-81',
  vl_emprestimo: amount,
  qt_parcela: 24,
  dados_bancarios: { pix: 'x@y.z' },
});

it('several proposals through their whole life cycle, with duplicates and out-of-order deliveries', async () => {
  sim = await startSimulator({
    logger: quiet,
    analysisDelayMs: 20,
    chaos: { duplicateRate: 0.4, outOfOrder: true, outOfOrderMaxHoldMs: 200 },
  });
  const receiver = await serve();
  const c = client(sim);
  await c.registerWebhook({ url: `${receiver.url}/webhooks`, eventos: [...EVENTOS], secret: SECRET });
  const nus: number[] = [];
  for (let i = 0; i < 4; i++) nus.push(Number((await c.createProposal(proposalBody())).nu_proposta));
  const s = sim;
  for (const nu of nus) {
    await until(
      `${nu} analysed`,
      () => s.state().proposals.find((p) => p.nu_proposta === nu)?.st_proposta === 'pre_aprovada',
    );
    const r = s.advance(nu, 'pagamento.realizado');
    expect(r.ok).toBe(true);
  }
  // The last event of each proposal may be held back by the out-of-order chaos for a moment.
  await until('every proposal paid', () =>
    nus.every(
      (nu) =>
        query<{ n: number }>('SELECT count(*) AS n FROM proposal_transitions WHERE nu_proposta = ?', nu)[0]
          ?.n === 9,
    ),
  );
  for (const nu of nus) {
    const t = query<{ evento: string; applied: number }>(
      'SELECT evento, applied FROM proposal_transitions WHERE nu_proposta = ?',
      nu,
    );
    expect(new Set(t.map((x) => x.evento)).size).toBe(t.length); // one transition per distinct event
    expect(t).toHaveLength(9);
    expect(
      query<{ status: string }>('SELECT status FROM proposals WHERE nu_proposta = ?', nu)[0]?.status,
    ).toBe('paga');
  }
  const dups = query<{ n: number }>('SELECT sum(duplicates) AS n FROM events')[0]?.n ?? 0;
  expect(dups).toBeGreaterThan(0);
});

/** The service's retries in the restart case: one a second, longer than the restart can take. */
const RETRIES = { backoffMs: [1000], maxAttempts: 45 };

it('the receiver stopped while the simulator sends, back while the service still retries: nothing lost, nothing twice', async () => {
  // Below the ephemeral range: while the receiver is down, no outgoing connection (the simulator's
  // attempts among them) can be given its port, which would stop the restart from listening on it.
  const port = await stablePort();
  sim = await startSimulator({
    logger: quiet,
    analysisDelayMs: 20,
    // The restart's time is the machine's, so the retries outlast any restart the test waits for
    // (serve's own bound, 30 s): 45 attempts a second apart per delivery. Both deliveries sent while
    // the receiver is down fail into one registration's count of consecutive failures, so the
    // deactivation is put beyond what they can reach (2 × 45); the rule itself is the next test's.
    delivery: { ...RETRIES, deactivateAfterFailures: 2 * RETRIES.maxAttempts + 1 },
  });
  let receiver = await serve({ PORT: String(port) });
  const c = client(sim);
  await c.registerWebhook({ url: `${receiver.url}/webhooks`, eventos: [...EVENTOS], secret: SECRET });
  const nu = Number((await c.createProposal(proposalBody())).nu_proposta);
  const s = sim;
  await until('analysed', () => query<{ n: number }>('SELECT count(*) AS n FROM events').at(0)?.n === 2);
  receiver.child.kill('SIGKILL');
  await receiver.exited;
  // Two events sent while the receiver is down: proposta.aprovada, then averbacao.solicitada.
  expect(s.advance(nu, 'averbacao.solicitada')).toEqual({
    ok: true,
    eventos: ['proposta.aprovada', 'averbacao.solicitada'],
  });
  await until('a failed attempt', () => s.state().attempts.some((a) => a.status === null));
  receiver = await serve({ PORT: String(port) });
  await until(
    'delivered after restart',
    () => s.state().deliveries.every((d) => d.status === 'delivered'),
    45_000,
  );
  await until(
    'processed',
    () =>
      query<{ status: string }>('SELECT status FROM proposals WHERE nu_proposta = ?', nu)[0]?.status ===
      'averbacao_solicitada',
  );
  const events = query<{ evento: string; tentativa: number }>(
    'SELECT evento, tentativa FROM events ORDER BY id',
  );
  expect(events.map((e) => e.evento)).toEqual([
    'proposta.criada',
    'proposta.pre_aprovada',
    'proposta.aprovada',
    'averbacao.solicitada',
  ]);
  // What was sent while it was down was stored from a retry, once.
  expect(events.some((e) => e.tentativa > 1)).toBe(true);
  expect(
    query<{ n: number }>('SELECT count(*) AS n FROM proposal_transitions WHERE nu_proposta = ?', nu)[0]?.n,
  ).toBe(4);
}, 120_000);

it('a wrong secret on the receiver: three 401s, the simulator deactivates the callback; log and metrics say so', async () => {
  // One event in flight (the analysis comes long after), so its three attempts are the only ones:
  // with two events, an attempt already on its way when the third failure deactivates the
  // callback would make it four.
  sim = await startSimulator({ logger: quiet, analysisDelayMs: 60_000, delivery: { backoffMs: [50, 50] } });
  const receiver = await serve({ WEBHOOK_SECRETS: 'not-the-registered-secret' });
  const c = client(sim);
  await c.registerWebhook({ url: `${receiver.url}/webhooks`, eventos: [...EVENTOS], secret: SECRET });
  await c.createProposal(proposalBody());
  const s = sim;
  await until('deactivated', () => s.state().registrations[0]?.active === false);
  const attempts = s.state().attempts;
  expect(attempts.map((a) => a.status)).toEqual([401, 401, 401]);
  const metrics = await (await fetch(`${receiver.url}/metrics`)).text();
  expect(metrics).toMatch(
    /consig_webhook_deliveries_total\{outcome="invalid_signature",route="\/webhooks"\} 3/,
  );
  expect(metrics).toContain('consig_webhook_consecutive_invalid_signatures 3');
  await until('alarm logged', () =>
    receiver.output().includes('the service deactivates the callback after 3 consecutive failed deliveries'),
  );
  expect(query<{ n: number }>('SELECT count(*) AS n FROM events')[0]?.n).toBe(0);
});

it('a dropped registry webhook is resolved by the poller', async () => {
  sim = await startSimulator({
    logger: quiet,
    clientId: 'partner',
    clientSecret: 'partner-secret',
    apiKey: 'k-1',
    analysisDelayMs: 20,
    registry: { processingAfterMs: 100, completeAfterMs: 300, webhook: 'drop' },
  });
  // The same service settings for the receiver and for the command that starts the averbação.
  const service = {
    SERVICE_BASE_URL: sim.url,
    SERVICE_TOKEN_URL: sim.tokenUrl,
    SERVICE_CLIENT_ID: 'partner',
    SERVICE_CLIENT_SECRET: 'partner-secret',
    SERVICE_API_KEY: 'k-1',
    REGISTRY_WEBHOOK_GRACE_MS: '200',
  };
  const receiver = await serve({
    ...service,
    REGISTRY_POLL_INTERVAL_MS: '100',
    REGISTRY_POLL_MAX_INTERVAL_MS: '200',
  });
  const c = createServiceClient({
    baseUrl: sim.url,
    tokenUrl: sim.tokenUrl,
    clientId: 'partner',
    clientSecret: 'partner-secret',
    apiKey: 'k-1',
    logger: quiet,
  });
  await c.registerWebhook({ url: `${receiver.url}/webhooks`, eventos: [...EVENTOS], secret: SECRET });
  const nu = Number((await c.createProposal(proposalBody())).nu_proposta);
  const started = await runCliAsync(['start-averbacao', '--proposal', String(nu)], {
    DATABASE_PATH: dbPath,
    ...service,
  });
  expect(started.status).toBe(0);
  const requestId = /requestId (\S+),/.exec(started.stdout)?.[1] as string;
  await until(
    'completed by polling',
    () =>
      query<{ status: string }>('SELECT status FROM averbacoes WHERE request_id = ?', requestId)[0]
        ?.status === 'completed',
  );
  expect(
    query<{ result_source: string }>(
      'SELECT result_source FROM averbacoes WHERE request_id = ?',
      requestId,
    )[0]?.result_source,
  ).toBe('poll');
  const s = sim;
  expect(s.state().attempts.filter((a) => a.kind === 'registry')).toHaveLength(0); // it really was dropped
});

it('demo runs end to end and exits 0', async () => {
  const r = await runCliAsync(['demo', '--database', join(tmp.dir, 'demo.db')], {}, 120_000);
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  expect(r.stdout).toContain('registry webhook lost, resolved by polling');
  const rows = r.stdout.split('\n').filter((l) => /^1000\d\d /.test(l));
  expect(rows).toHaveLength(5);
  for (const row of rows) expect(row.trimEnd().endsWith('yes')).toBe(true);

  // The closing hints are commands a reader pastes into the checkout's shell: the package's bin is
  // not on PATH there, so each goes through npx, and each runs on the demo's database.
  const lines = r.stdout.split('\n');
  expect(lines.filter((l) => /^\s+consig-receiver /.test(l))).toEqual([]);
  const hints = lines.flatMap((l) => /^\s+npx consig-receiver (.+)$/.exec(l)?.slice(1) ?? []);
  expect(hints.length).toBeGreaterThanOrEqual(3);
  for (const hint of hints) {
    const run = await runCliAsync(hint.trim().split(/\s+/));
    expect({ hint, status: run.status, stderr: run.stderr }).toEqual({ hint, status: 0, stderr: '' });
  }
});
