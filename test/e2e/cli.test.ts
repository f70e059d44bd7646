import { readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import Database from '../../src/sqlite/sqlite-driver';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { runCli, runCliAsync, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

let tmp: ReturnType<typeof tempDir>;
let dbPath: string;
beforeEach(() => {
  tmp = tempDir('consig-cli-');
  dbPath = join(tmp.dir, 'nested', 'consig.db');
});
afterEach(() => tmp.cleanup());

const env = () => ({ DATABASE_PATH: dbPath });

function expectOneLineError(
  r: { status: number | null; stderr: string; stdout: string },
  code: number,
  pattern: RegExp,
) {
  expect(r.status).toBe(code);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
}

it('--version prints the version of package.json and exits 0', () => {
  const { version } = JSON.parse(readFileSync(join(__dirname, '../../package.json'), 'utf8')) as {
    version: string;
  };
  for (const flag of ['--version', '-V']) {
    expect(runCli([flag], env())).toEqual({ status: 0, stdout: `${version}\n`, stderr: '' });
  }
});

describe('configuration errors stop startup with one line naming the variable', () => {
  it.each([
    [{}, /^consig-receiver: WEBHOOK_SECRETS: required/],
    [
      { WEBHOOK_SECRETS: 's', PORT: 'abc' },
      /^consig-receiver: PORT: expected an integer from 0 to 65535, got "abc"$/,
    ],
    [{ WEBHOOK_SECRETS: 's', MAX_BODY_BYTES: '-1' }, /^consig-receiver: MAX_BODY_BYTES: /],
    [
      { WEBHOOK_SECRETS: 's', STUCK_AFTER: 'averbacao_solicitada=36x' },
      /^consig-receiver: STUCK_AFTER: averbacao_solicitada: expected a duration .* got "36x"$/,
    ],
    [
      { WEBHOOK_SECRETS: 's', ADMIN_TOKEN: 'a' },
      /^consig-receiver: ADMIN_TOKEN: expected at least 16 characters \(.*\), got 1$/,
    ],
    [
      { WEBHOOK_SECRETS: 's', ADMIN_TOKEN: 'admin-token-0123456789', VIEWER_TOKEN: 'viewer-token-01' },
      /^consig-receiver: VIEWER_TOKEN: expected at least 16 characters \(.*\), got 15$/,
    ],
    // Issue 34: a half-given OpenID Connect set names what is missing.
    [
      { WEBHOOK_SECRETS: 's', OIDC_ISSUER: 'https://login.lender.example' },
      /^consig-receiver: OIDC_CLIENT_ID: required for the console's OpenID Connect sign-in \(set with OIDC_ISSUER\): the client id/,
    ],
    [
      {
        WEBHOOK_SECRETS: 's',
        OIDC_ISSUER: 'https://idp.example',
        OIDC_CLIENT_ID: 'c',
        OIDC_CLIENT_SECRET: 'oidc-secret-x',
      },
      /^consig-receiver: PUBLIC_URL: required for the console's OpenID Connect sign-in .*\/console\/oidc\/callback\)$/,
    ],
    [
      {
        WEBHOOK_SECRETS: 's',
        OIDC_CLIENT_ID: 'c',
        OIDC_CLIENT_SECRET: 'oidc-secret-x',
        PUBLIC_URL: 'https://r.example',
      },
      /^consig-receiver: OIDC_ISSUER: required for the console's OpenID Connect sign-in \(set with OIDC_CLIENT_ID\)/,
    ],
    [
      {
        WEBHOOK_SECRETS: 's',
        OIDC_ISSUER: 'https://idp.example',
        OIDC_CLIENT_ID: 'c',
        OIDC_CLIENT_SECRET: 'oidc-secret-x',
        PUBLIC_URL: 'https://r.example',
      },
      /^consig-receiver: OIDC_ADMIN_GROUPS: required for the console's OpenID Connect sign-in: comma-separated values of the groups claim/,
    ],
    [
      { WEBHOOK_SECRETS: 's', OIDC_ISSUER: 'http://idp.example' },
      /^consig-receiver: OIDC_ISSUER: expected an https URL without query \(http only on a loopback host\), got "http:\/\/idp.example"$/,
    ],
    [
      { WEBHOOK_SECRETS: 's', OIDC_SCOPES: 'email profile' },
      /^consig-receiver: OIDC_SCOPES: expected space-separated scopes including openid$/,
    ],
  ])('%j', (vars, pattern) => {
    expectOneLineError(runCli(['serve'], { ...env(), ...vars }), 2, pattern);
  });
});

it('migrate creates the directory and the database, then says it is up to date', () => {
  const first = runCli(['migrate'], env());
  expect(first.status).toBe(0);
  expect(first.stdout).toContain('applied 0001_init');
  const again = runCli(['migrate'], env());
  expect(again.stdout).toContain('up to date');
  const db = new Database(dbPath, { readonly: true });
  expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
  db.close();
});

it('refuses a database with migrations this code does not know', () => {
  expect(runCli(['migrate'], env()).status).toBe(0);
  const db = new Database(dbPath);
  db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 'x')").run();
  db.close();
  expectOneLineError(runCli(['migrate'], env()), 1, /migration\(s\) 9999 that this version does not know/);
  expectOneLineError(
    runCli(['serve'], { ...env(), WEBHOOK_SECRETS: 'cli-test-secret-0123456789', RETENTION_DAYS: '30' }),
    1,
    /9999/,
  );
  expectOneLineError(runCli(['events'], env()), 1, /9999/);
});

it('read commands on a missing database say so in one line', () => {
  expectOneLineError(runCli(['events'], env()), 1, /no database at .*consig\.db/);
  expectOneLineError(runCli(['stats'], env()), 1, /no database at/);
});

it('unknown commands and flags exit 2', () => {
  expectOneLineError(runCli(['evnets'], env()), 2, /unknown command 'evnets'/);
  const r = runCli(['events', '--bogus'], env());
  expect(r.status).toBe(2);
  expectOneLineError(runCli(['events', '--limit', 'many'], env()), 2, /--limit expects an integer/);
});

it('events, deliveries and stats read what serve stored, as tables and as JSON', async () => {
  const server = await startServe({ ...env(), WEBHOOK_SECRETS: SECRET });
  try {
    const body = delivery('proposta.aprovada', { webhook_id: 'wh_cli', nu_proposta: 4242 });
    const { raw, signature } = signed(body);
    await postRaw(`${server.url}/webhooks`, raw, { 'x-service-signature': signature });
    await postRaw(`${server.url}/webhooks`, raw, { 'x-service-signature': signature });
    await postRaw(`${server.url}/webhooks`, raw, { 'x-service-signature': 'sha256=00' });
  } finally {
    server.child.kill('SIGTERM');
    await server.exited;
  }
  const table = runCli(['events'], env());
  expect(table.status).toBe(0);
  expect(table.stdout).toMatch(/^id\s+received_at\s+kind\s+evento/);
  expect(table.stdout).toContain('proposta.aprovada');
  expect(table.stdout).not.toContain('12345678909');

  const json = JSON.parse(runCli(['events', '--json', '--proposal', '4242'], env()).stdout);
  expect(json).toEqual([
    expect.objectContaining({ dedup_key: 'wh_cli', nu_proposta: 4242, status: 'done', duplicates: 1 }),
  ]);
  expect(JSON.parse(runCli(['events', '--json', '--status', 'pending'], env()).stdout)).toEqual([]);

  const deliveries = JSON.parse(runCli(['deliveries', '--json'], env()).stdout);
  expect(deliveries.map((d: { outcome: string }) => d.outcome)).toEqual([
    'invalid_signature',
    'duplicate',
    'accepted',
  ]);
  expect(runCli(['deliveries', '--outcome', 'duplicate'], env()).stdout).toContain('wh_cli');

  const stats = JSON.parse(runCli(['stats', '--json'], env()).stdout);
  expect(stats).toMatchObject({
    events_by_status: { done: 1 },
    duplicates_total: 1,
    deliveries_by_outcome: { accepted: 1, duplicate: 1, invalid_signature: 1 },
  });
  expect(runCli(['stats'], env()).stdout).toContain('deliveries by outcome');

  const proposal = runCli(['proposal', '4242'], env());
  expect(proposal.status).toBe(0);
  expect(proposal.stdout).toContain('proposal 4242: Proposta / aprovada');
  expect(proposal.stdout).toContain('***.456.789-**');
  expect(proposal.stdout).not.toContain('12345678909');
  const timeline = JSON.parse(runCli(['proposal', '4242', '--json'], env()).stdout).timeline;
  expect(timeline).toEqual([
    expect.objectContaining({
      evento: 'proposta.aprovada',
      to_status: 'aprovada',
      applied: 1,
      reason: 'created',
    }),
  ]);
  expectOneLineError(runCli(['proposal', '999'], env()), 2, /no proposal 999/);

  expect(JSON.parse(runCli(['replay', '1', '--json'], env()).stdout)).toEqual({ queued: [1] });
  expect(JSON.parse(runCli(['events', '--json'], env()).stdout)[0]).toMatchObject({
    status: 'pending',
    attempts: 0,
  });
  expect(runCli(['replay', '--status', 'dead'], env()).stdout).toContain('nothing to replay');
  expectOneLineError(runCli(['replay', '77'], env()), 2, /no event 77/);
  expectOneLineError(runCli(['replay'], env()), 2, /needs event ids or --status/);
});

it('send-test-event signs a realistic delivery; exits non-zero unless the answer is 200', async () => {
  const server = await startServe({ ...env(), WEBHOOK_SECRETS: SECRET });
  try {
    const url = `${server.url}/webhooks`;
    const ok = await runCliAsync([
      'send-test-event',
      'proposta.aprovada',
      '--url',
      url,
      '--secret',
      SECRET,
      '--proposal',
      '555',
    ]);
    expect(ok.status).toBe(0);
    expect(ok.stdout).toMatch(/→ 200 \{"status":"accepted","event_id":\d+\}/);
    const registry = await runCliAsync([
      'send-test-event',
      'registry',
      '--url',
      url,
      '--secret',
      SECRET,
      '--request-id',
      'req-t1',
      '--json',
    ]);
    expect(registry.status).toBe(0);
    expect(JSON.parse(registry.stdout).url).toBe(`${url}/registry`);
    const wrong = await runCliAsync([
      'send-test-event',
      'proposta.criada',
      '--url',
      url,
      '--secret',
      'not-the-secret',
    ]);
    expect(wrong.status).toBe(1);
    expect(wrong.stderr.trim()).toBe(
      'consig-receiver: the receiver answered 401 (the secret or SIGNATURE_HEADER does not match the receiver)',
    );
    const unknown = await runCliAsync([
      'send-test-event',
      'proposta.inventada',
      '--url',
      url,
      '--secret',
      SECRET,
    ]);
    expect(unknown.status).toBe(2);
    const down = await runCliAsync([
      'send-test-event',
      'proposta.criada',
      '--url',
      'http://127.0.0.1:9/webhooks',
      '--secret',
      SECRET,
    ]);
    expect(down.status).not.toBe(0);
    expect(down.stderr).toMatch(/could not reach/);
  } finally {
    server.child.kill('SIGTERM');
    await server.exited;
  }
  const events = JSON.parse(runCli(['events', '--json'], env()).stdout) as {
    kind: string;
    nu_proposta: number;
    request_id: string;
  }[];
  expect(events.map((e) => e.kind).sort()).toEqual(['event', 'registry']);
  expect(events.find((e) => e.kind === 'registry')?.request_id).toBe('req-t1');
  expect(events.find((e) => e.kind === 'event')?.nu_proposta).toBe(555);
});

it('backup takes a consistent copy while serve is writing', async () => {
  const server = await startServe({ ...env(), WEBHOOK_SECRETS: SECRET });
  let stop = false;
  let sent = 0;
  const writer = (async () => {
    while (!stop) {
      const { raw, signature } = signed(delivery('proposta.criada'));
      await postRaw(`${server.url}/webhooks`, raw, { 'x-service-signature': signature });
      sent += 1;
    }
  })();
  try {
    while (sent < 50) await new Promise((r) => setTimeout(r, 5));
    const copy = join(tmp.dir, 'backup.db');
    const r = await runCliAsync(['backup', copy], env());
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^backed up .* pages in \d+ ms/);
    // Issue 45: owner only, whatever the umask: the directory serve created, the log and its
    // companions, the backup.
    const modeOf = (path: string) => statSync(path).mode & 0o777;
    expect(modeOf(dirname(dbPath))).toBe(0o700);
    for (const file of [dbPath, `${dbPath}-wal`, `${dbPath}-shm`, copy])
      expect([file, modeOf(file)]).toEqual([file, 0o600]);
    const db = new Database(copy, { readonly: true });
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    const n = (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
    expect(n).toBeGreaterThanOrEqual(50);
    db.close();
    expect((await runCliAsync(['backup', copy], env())).status).toBe(2); // exists, no --force
  } finally {
    stop = true;
    await writer;
    server.child.kill('SIGTERM');
    await server.exited;
  }
});

it('prune needs a retention and says what it removed', () => {
  expect(runCli(['migrate'], env()).status).toBe(0);
  expectOneLineError(runCli(['prune'], env()), 2, /prune needs --days N \(or RETENTION_DAYS\)/);
  expectOneLineError(runCli(['prune', '--days', '0'], env()), 2, /--days expects a whole number ≥ 1/);
  const r = runCli(['prune', '--days', '30'], env());
  expect(r.status).toBe(0);
  expect(r.stdout).toMatch(/^removed the bodies of 0 finished event\(s\) received before /);
  expect(JSON.parse(runCli(['prune', '--json'], { ...env(), RETENTION_DAYS: '7' }).stdout)).toMatchObject({
    pruned: 0,
  });
});

describe('proposals', () => {
  const HOUR = 3_600_000;
  /** Proposals as the life-cycle handler leaves them, last changed the given hours ago. */
  function seed(rows: [nu: number, status: string, hoursAgo: number][]): void {
    expect(runCli(['migrate'], env()).status).toBe(0);
    const db = new Database(dbPath);
    const insert = db.prepare(
      `INSERT INTO proposals (nu_proposta, nu_cpf, stage, status, last_evento, created_at, updated_at)
       VALUES (?, '12345678909', 'Averbação', ?, 'averbacao.solicitada', ?, ?)`,
    );
    for (const [nu, status, hours] of rows) {
      const at = new Date(Date.now() - hours * HOUR).toISOString();
      insert.run(nu, status, at, at);
    }
    db.close();
  }

  it('--stuck lists those past their limit, longest first, as a table and as JSON; CPF masked', () => {
    seed([
      [1, 'averbacao_solicitada', 50], // default 2d: stuck
      [2, 'averbacao_solicitada', 10],
      [3, 'formalizacao_iniciada', 24 * 8], // default 7d: stuck
      [4, 'paga', 24 * 90], // final
      [5, 'aprovada', 24 * 90], // STUCK_AFTER aprovada=off below
    ]);
    const vars = { ...env(), STUCK_AFTER: 'aprovada=off' };
    const table = runCli(['proposals', '--stuck'], vars);
    expect(table.status).toBe(0);
    expect(table.stderr).toBe('');
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(
      /^nu_proposta\s+nu_cpf\s+stage\s+status\s+last_evento\s+updated_at\s+age\s+stuck_since\s+stuck_after$/,
    );
    expect(lines.slice(2).map((l) => l.split(/\s+/)[0])).toEqual(['3', '1']);
    expect(lines[2]).toMatch(/formalizacao_iniciada .* 8 d +\S+ +7d$/);
    expect(table.stdout).toContain('***.456.789-**');
    expect(table.stdout).not.toContain('12345678909');

    const json = JSON.parse(runCli(['proposals', '--stuck', '--json'], vars).stdout);
    expect(json).toEqual([
      expect.objectContaining({ nu_proposta: 3, status: 'formalizacao_iniciada', stuck_after: '7d' }),
      expect.objectContaining({
        nu_proposta: 1,
        nu_cpf: '***.456.789-**',
        stage: 'Averbação',
        status: 'averbacao_solicitada',
        last_evento: 'averbacao.solicitada',
        stuck_after: '2d',
      }),
    ]);
    expect(json[1].age_seconds).toBeGreaterThanOrEqual(50 * 3600);
    expect(Date.parse(json[1].stuck_since)).toBe(Date.parse(json[1].updated_at) + 48 * HOUR);
    expect(JSON.parse(runCli(['proposals', '--stuck', '--json', '--limit', '1'], vars).stdout)).toHaveLength(
      1,
    );
    const narrower = { ...vars, STUCK_AFTER: 'averbacao_solicitada=5h' };
    expect(
      JSON.parse(
        runCli(['proposals', '--stuck', '--status', 'averbacao_solicitada', '--json'], narrower).stdout,
      ).map((r: { nu_proposta: number }) => r.nu_proposta),
    ).toEqual([1, 2]);

    // Without --stuck: every proposal, the most recently changed first.
    const all = JSON.parse(runCli(['proposals', '--json'], vars).stdout);
    expect(all.map((r: { nu_proposta: number }) => r.nu_proposta)).toEqual([2, 1, 3, 5, 4]);
    expect(runCli(['proposals', '--status', 'paga'], vars).stdout).toMatch(/^nu_proposta .*\n-+.*\n4 /);

    const stats = runCli(['stats'], vars);
    expect(stats.stdout).toMatch(
      /proposals +stuck \(STUCK_AFTER\) +averbacao_solicitada=1, formalizacao_iniciada=1/,
    );
    expect(JSON.parse(runCli(['stats', '--json'], vars).stdout).proposals_stuck_by_status).toMatchObject({
      averbacao_solicitada: 1,
      formalizacao_iniciada: 1,
      em_analise: 0,
    });
  });

  it('a bad STUCK_AFTER, status or limit is one clear line and exit 2', () => {
    seed([]);
    expectOneLineError(
      runCli(['proposals', '--stuck'], { ...env(), STUCK_AFTER: 'averbacao_solicitada=36x' }),
      2,
      /^consig-receiver: STUCK_AFTER: averbacao_solicitada: expected a duration from 1m to 3650d such as 90m, 36h or 5d, or off, got "36x"$/,
    );
    expectOneLineError(
      runCli(['proposals'], { ...env(), STUCK_AFTER: 'averbacao=2d' }),
      2,
      /^consig-receiver: STUCK_AFTER: unknown status "averbacao" \(expected one of em_analise, /,
    );
    expectOneLineError(
      runCli(['proposals', '--status', 'pending'], env()),
      2,
      /--status expects one of em_analise, /,
    );
    expectOneLineError(
      runCli(['proposals', '--stuck', '--status', 'paga'], env()),
      2,
      /paga is final, never stuck/,
    );
    expectOneLineError(runCli(['proposals', '--limit', '0'], env()), 2, /--limit expects an integer/);
  });
});
