import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { delivery, postRaw, SECRET, signed } from '../helpers/payloads';
import { createTestDatabase, workerPostgres, withClient, migrateUrl } from '../helpers/postgres';
import { startFakeService } from '../helpers/fake-service';
import { type RunResult, runCli, runCliAsync, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * The log commands in cluster mode (contract §10): the built CLI, run as a child with DATABASE_URL,
 * reads a real PostgreSQL migrated with migrations-pg/ and holding rows as the relay and the
 * cluster's handlers write them; it prints what it prints on SQLite, in the same shape.
 */

const PASSWORD = 'Sup3r-s3cret-pw';

let pg: LocalPostgres;
/** The seeded database, with a password in the URL (the server trusts loopback and ignores it). */
let url: string;
let target: string;

beforeAll(async () => {
  pg = await workerPostgres();
  const plain = new URL(await createTestDatabase(pg, 'pgcli'));
  await migrateUrl(plain.toString());
  await withClient(plain.toString(), seed);
  plain.password = PASSWORD;
  url = plain.toString();
  target = `postgres://127.0.0.1:${pg.port}${plain.pathname}`;
});
afterAll(async () => {
  await pg?.stop();
});

const T = (seconds: string) => `2026-11-21T13:00:${seconds}Z`;
const UUID = 'b5f1c0de-0000-4000-8000-000000004242';
const CNPJ = '11222333000181';

/**
 * Proposal 4242: created, approved (delivered three times, by both replicas), then a late
 * pre-approval that did not move it; its averbação completed by the registry webhook. Proposal
 * 7777's event went dead; 8888 has sat at em_analise since 2020 (stuck).
 */
async function seed(c: Client): Promise<void> {
  const event = async (e: {
    key: string;
    evento: string | null;
    nu: string | null;
    at: string;
    status: string;
    kind?: string;
    requestId?: string;
    registryStatus?: string;
    attempts?: number;
    error?: string;
    duplicates?: number;
    lastDuplicateAt?: string;
    replica: string;
  }): Promise<number> => {
    const body = JSON.stringify({
      evento: e.evento,
      dados: { nu_proposta: e.nu },
      metadata: { webhook_id: e.key },
    });
    const { rows } = await c.query<{ id: string }>(
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa,
         received_at, body, body_bytes, status, attempts, last_error, processed_at, duplicates, last_duplicate_at,
         first_replica)
       VALUES ($1, $1, $2, $3, $4, $5, $6, 1, $7, convert_to($8, 'UTF8'), octet_length($8), $9, $10, $11,
         $7::timestamptz + interval '50 milliseconds', $12, $13, $14)
       RETURNING id`,
      [
        e.key,
        e.kind ?? 'event',
        e.evento,
        e.nu,
        e.requestId ?? null,
        e.registryStatus ?? null,
        e.at,
        body,
        e.status,
        e.attempts ?? 1,
        e.error ?? null,
        e.duplicates ?? 0,
        e.lastDuplicateAt ?? null,
        e.replica,
      ],
    );
    return Number(rows[0]?.id);
  };
  const e1 = await event({
    key: 'wh_1001',
    evento: 'proposta.criada',
    nu: '4242',
    at: T('00.000'),
    status: 'done',
    replica: 'replica-a',
  });
  const e2 = await event({
    key: 'wh_1002',
    evento: 'proposta.aprovada',
    nu: '4242',
    at: T('05.250'),
    status: 'done',
    duplicates: 2,
    lastDuplicateAt: T('09.000'),
    replica: 'replica-b',
  });
  const e3 = await event({
    key: 'wh_1003',
    evento: 'proposta.pre_aprovada',
    nu: '4242',
    at: T('07.500'),
    status: 'done',
    replica: 'replica-b',
  });
  await event({
    key: 'wh_1004',
    evento: 'formalizacao.iniciada',
    nu: '7777',
    at: T('08.000'),
    status: 'dead',
    attempts: 8,
    error: 'handler failed: connection reset by the lender',
    replica: 'replica-a',
  });
  const e5 = await event({
    key: 'registry:req-abc:completed',
    evento: null,
    nu: null,
    kind: 'registry',
    requestId: 'req-abc',
    registryStatus: 'completed',
    at: T('09.500'),
    status: 'done',
    replica: 'replica-a',
  });

  await c.query(
    `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage, status,
       last_evento, first_event_id, last_event_id, created_at, updated_at)
     VALUES ('4242', $4, '12345678909', $5, 15000.50,
       'Empresa Exemplo Ltda', 'Proposta', 'aprovada', 'proposta.aprovada', $1, $2, $3, now() - interval '1 hour'),
            ('8888', NULL, '98765432100', NULL, 2500, 'Outra Empresa SA', 'Proposta', 'em_analise', 'proposta.criada',
       NULL, NULL, '2020-01-01T00:00:00.000Z', '2020-01-01T00:00:00.000Z')`,
    [e1, e2, T('00.050'), UUID, CNPJ],
  );
  await c.query(
    `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at) VALUES
       ('4242', $1, 'proposta.criada', NULL, 'em_analise', true, 'created', $4),
       ('4242', $2, 'proposta.aprovada', 'em_analise', 'aprovada', true, 'forward', $5),
       ('4242', $3, 'proposta.pre_aprovada', 'aprovada', 'pre_aprovada', false, 'late', $6)`,
    [e1, e2, e3, T('00.050'), T('05.300'), T('07.550')],
  );
  await c.query(
    `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, result_source, tracked_via, poll_attempts,
       next_poll_at, stale, result_body, result_event_id, created_at, updated_at, completed_at) VALUES
       ('req-abc', 'corr-4242', '4242', 'completed', 'webhook', 'event', 1, NULL, false,
        '{"requestId":"req-abc","status":"completed"}', $1, $2, $3, $3),
       ('req-old', NULL, '7777', 'processing', NULL, 'declared', 12, NULL, true, NULL, NULL, $4, $4, NULL)`,
    [e5, T('06.000'), T('09.550'), '2026-11-18T10:00:00.000Z'],
  );
  // Two replicas' spools, relayed: what each answered. Spool ids are unique across both replicas, so
  // the rows fit whichever key the schema gives relayed deliveries (the replica's or its spool's).
  const deliveries: [
    string,
    number,
    string,
    string,
    number,
    string | null,
    number | null,
    number,
    string | null,
  ][] = [
    ['replica-a', 1, T('00.010'), 'accepted', 200, 'wh_1001', e1, 3.5, null],
    ['replica-b', 11, T('05.260'), 'accepted', 200, 'wh_1002', e2, 4.25, null],
    ['replica-a', 2, T('06.000'), 'duplicate', 200, 'wh_1002', e2, 2, null],
    ['replica-b', 12, T('07.510'), 'accepted', 200, 'wh_1003', e3, 3, null],
    ['replica-b', 13, T('09.000'), 'duplicate', 200, 'wh_1002', e2, 1.75, null],
    ['replica-a', 3, T('10.000'), 'invalid_signature', 401, null, null, 0.5, 'signature mismatch'],
  ];
  for (const d of deliveries) {
    await c.query(
      `INSERT INTO deliveries (replica, spool_id, received_at, path, outcome, http_status, dedup_key, event_id,
         duration_ms, detail)
       VALUES ($1, $2, $3, '/webhooks', $4, $5, $6, $7, $8, $9)`,
      d,
    );
  }
}

/** The CLI in cluster mode on the seeded database; nothing it prints may hold the password. */
function cli(...args: string[]): RunResult {
  const r = runCli(args, { DATABASE_URL: url });
  expect(`${r.stdout}${r.stderr}`).not.toContain(PASSWORD);
  return r;
}

function ok(...args: string[]): string {
  const r = cli(...args);
  expect(r).toMatchObject({ status: 0, stderr: '' });
  return r.stdout;
}

const json = (...args: string[]): unknown => JSON.parse(ok(...args, '--json'));

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function expectOneLineError(r: RunResult, code: number, pattern: RegExp): void {
  expect(r.status).toBe(code);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(r.stderr).not.toContain(PASSWORD);
}

describe('events', () => {
  it('lists them newest first, as a table and as JSON in the SQLite log shape', () => {
    const table = ok('events');
    expect(table).toMatch(/^id\s+received_at\s+kind\s+evento\s+nu_proposta/);
    expect(table).toContain(`${T('05.250')}  event`);
    expect(table).toContain('handler failed: connection reset by the lender');

    const rows = json('events') as Record<string, unknown>[];
    expect(rows.map((r) => r.dedup_key)).toEqual([
      'registry:req-abc:completed',
      'wh_1004',
      'wh_1003',
      'wh_1002',
      'wh_1001',
    ]);
    expect(rows[3]).toEqual({
      id: expect.any(Number),
      dedup_key: 'wh_1002',
      webhook_id: 'wh_1002',
      kind: 'event',
      evento: 'proposta.aprovada',
      nu_proposta: 4242,
      request_id: null,
      registry_status: null,
      tentativa: 1,
      received_at: T('05.250'),
      body_bytes: expect.any(Number),
      status: 'done',
      attempts: 1,
      next_attempt_at: null,
      last_error: null,
      processed_at: T('05.300'),
      duplicates: 2,
      last_duplicate_at: T('09.000'),
    });
    expect(rows[0]).toMatchObject({ kind: 'registry', request_id: 'req-abc', registry_status: 'completed' });
  });

  it('filters by status, proposal (as typed: 0004242 is 4242), kind and limit', () => {
    expect(json('events', '--status', 'dead')).toEqual([
      expect.objectContaining({ nu_proposta: 7777, attempts: 8, status: 'dead' }),
    ]);
    const ofProposal = json('events', '--proposal', '0004242') as { evento: string }[];
    expect(ofProposal.map((r) => r.evento)).toEqual([
      'proposta.pre_aprovada',
      'proposta.aprovada',
      'proposta.criada',
    ]);
    expect(json('events', '--kind', 'registry', '--limit', '1')).toHaveLength(1);
    expect(json('events', '--evento', 'proposta.negada')).toEqual([]);
    expect(ok('events', '--status', 'failed')).toBe('(no rows)\n');
  });
});

describe('deliveries', () => {
  it('lists both replicas’ answers newest first (by received_at)', () => {
    const rows = json('deliveries') as Record<string, unknown>[];
    expect(rows.map((r) => r.outcome)).toEqual([
      'invalid_signature',
      'duplicate',
      'accepted',
      'duplicate',
      'accepted',
      'accepted',
    ]);
    expect(rows[0]).toEqual({
      id: expect.any(Number),
      received_at: T('10.000'),
      path: '/webhooks',
      outcome: 'invalid_signature',
      http_status: 401,
      dedup_key: null,
      event_id: null,
      duration_ms: 0.5,
      body_bytes: null,
      secret_index: null,
      remote_addr: null,
      detail: 'signature mismatch',
    });
    expect(rows[1]).toMatchObject({ dedup_key: 'wh_1002', event_id: expect.any(Number), duration_ms: 1.75 });
    expect(json('deliveries', '--outcome', 'duplicate')).toHaveLength(2);
    const table = ok('deliveries', '--limit', '2');
    expect(table).toMatch(/^id\s+received_at\s+path\s+outcome\s+http_status\s+duration_ms/);
    expect(table.trim().split('\n')).toHaveLength(4);
    expect(table).toContain('signature mismatch');
  });
});

describe('stats', () => {
  it('counts from PostgreSQL, with a line per replica and the forwarding figures (none configured here)', () => {
    const stats = json('stats');
    expect(stats).toEqual({
      database: target,
      database_bytes: expect.any(Number),
      events_by_status: { dead: 1, done: 4 },
      events_by_kind: { event: 4, registry: 1 },
      duplicates_total: 2,
      deliveries_by_outcome: { accepted: 3, duplicate: 2, invalid_signature: 1 },
      proposals_by_status: { aprovada: 1, em_analise: 1 },
      proposals_stuck_by_status: expect.objectContaining({ em_analise: 1, aprovada: 0 }),
      ack_ms_avg: 2.9,
      ack_ms_max: 4.25,
      last_delivery_at: T('10.000'),
      forwarding: [],
      replicas: [
        { replica: 'replica-a', deliveries: 3, last_received_at: T('10.000') },
        { replica: 'replica-b', deliveries: 3, last_received_at: T('09.000') },
      ],
    });
    expect((stats as { database_bytes: number }).database_bytes).toBeGreaterThan(0);

    const table = ok('stats');
    expect(table).toMatch(/^section\s+key\s+value/);
    expect(table).toMatch(new RegExp(`database\\s+path\\s+${target}`));
    expect(table).toMatch(/proposals\s+stuck \(STUCK_AFTER\)\s+em_analise=1/);
    expect(table).toMatch(/replicas\s+replica-a\s+3 deliveries, last received 2026-11-21T13:00:10\.000Z/);
    expect(table).toMatch(/replicas\s+replica-b\s+3 deliveries, last received 2026-11-21T13:00:09\.000Z/);
    // No destination configured or touched: no forwarding line, and no "not shown" either
    // (pg-forwards-cli.test.ts shows them with destinations).
    const lines = table.trim().split('\n');
    expect(lines.filter((l) => /forwarding/.test(l))).toEqual([]);
  });
});

describe('proposal <nu>', () => {
  it('shows where it stands (CPF masked) and its timeline, the late event not applied', () => {
    const out = ok('proposal', '4242');
    const [header] = out.split('\n');
    expect(header).toMatch(
      /^proposal 4242: Proposta \/ aprovada {2}\(cpf \*\*\*\.456\.789-\*\*, R\$ 15000\.5, Empresa Exemplo Ltda, updated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)$/,
    );
    expect(out).not.toContain('12345678909');
    expect(out).toMatch(/proposta\.pre_aprovada\s+done\s+aprovada\s+pre_aprovada\s+no\s+late/);
    expect(out).toMatch(/proposta\.criada\s+done\s+em_analise\s+yes\s+created/);

    const shown = json('proposal', '4242') as {
      proposal: Record<string, unknown>;
      timeline: Record<string, unknown>[];
    };
    expect(shown.proposal).toMatchObject({
      nu_proposta: 4242,
      nu_cpf: '***.456.789-**',
      vl_emprestimo: 15000.5,
      first_event_id: expect.any(Number),
      created_at: T('00.050'),
    });
    expect(shown.proposal.updated_at).toMatch(ISO);
    expect(shown.timeline.map((t) => [t.evento, t.applied, t.reason])).toEqual([
      ['proposta.criada', 1, 'created'],
      ['proposta.aprovada', 1, 'forward'],
      ['proposta.pre_aprovada', 0, 'late'],
    ]);
    expect(shown.timeline[1]).toMatchObject({
      received_at: T('05.250'),
      duplicates: 2,
      event_status: 'done',
    });
  });

  it('a proposal with events but no row yet, and one with neither', () => {
    expect(ok('proposal', '7777')).toMatch(/^proposal 7777: events stored, none processed yet\n/);
    expectOneLineError(
      cli('proposal', '999'),
      2,
      new RegExp(`^consig-receiver: no proposal 999 in ${target}$`),
    );
  });
});

describe('proposals', () => {
  it('lists them, most recently changed first, and the stuck ones with their limit', () => {
    const all = json('proposals') as Record<string, unknown>[];
    expect(all.map((r) => [r.nu_proposta, r.nu_cpf, r.status])).toEqual([
      [4242, '***.456.789-**', 'aprovada'],
      [8888, '***.654.321-**', 'em_analise'],
    ]);
    expect(all[0]?.age_seconds).toBeGreaterThanOrEqual(3600);
    const stuck = json('proposals', '--stuck');
    expect(stuck).toEqual([
      {
        nu_proposta: 8888,
        nu_cpf: '***.654.321-**',
        stage: 'Proposta',
        status: 'em_analise',
        last_evento: 'proposta.criada',
        updated_at: '2020-01-01T00:00:00.000Z',
        age_seconds: expect.any(Number),
        stuck_since: '2020-01-02T00:00:00.000Z',
        stuck_after: '1d',
      },
    ]);
    expect(ok('proposals', '--stuck')).toMatch(/8888\s+\*\*\*\.654\.321-\*\*\s+Proposta\s+em_analise/);
    expect(json('proposals', '--status', 'aprovada')).toHaveLength(1);
    expectOneLineError(cli('proposals', '--stuck', '--status', 'paga'), 2, /--stuck: paga is final/);
  });
});

describe('averbacoes', () => {
  it('lists tracked registrations, stale as 0/1 in JSON and "yes" in the table', () => {
    const rows = json('averbacoes') as Record<string, unknown>[];
    expect(rows.map((r) => [r.request_id, r.nu_proposta, r.stale])).toEqual([
      ['req-abc', 4242, 0],
      ['req-old', 7777, 1],
    ]);
    expect(rows[0]).toMatchObject({
      status: 'completed',
      result_source: 'webhook',
      tracked_via: 'event',
      result_event_id: expect.any(Number),
      completed_at: T('09.550'),
    });
    expect(json('averbacoes', '--stale')).toEqual([expect.objectContaining({ request_id: 'req-old' })]);
    expect(json('averbacoes', '--proposal', '4242', '--status', 'completed')).toHaveLength(1);
    expect(ok('averbacoes', '--stale')).toMatch(/req-old\s+7777\s+processing\s+yes\s+12/);
    expectOneLineError(cli('averbacoes', '--status', 'done'), 2, /--status expects queued/);
  });
});

describe('errors: one line, exit ≠ 0, never the password', () => {
  it.each([['events'], ['deliveries'], ['stats'], ['proposal', '4242'], ['proposals'], ['averbacoes']])(
    '%s with PostgreSQL unreachable',
    (...args) => {
      const r = runCli(args, { DATABASE_URL: `postgres://consig:${PASSWORD}@127.0.0.1:1/consig` });
      expectOneLineError(
        r,
        1,
        /^consig-receiver: cannot reach PostgreSQL at 127\.0\.0\.1:1 \(ECONNREFUSED\)$/,
      );
    },
  );

  it('a database without the cluster schema, and one that does not exist', async () => {
    const empty = new URL(await createTestDatabase(pg, 'pgcli_empty'));
    empty.password = PASSWORD;
    expectOneLineError(
      runCli(['events'], { DATABASE_URL: empty.toString() }),
      1,
      /^consig-receiver: PostgreSQL database "pgcli_empty_\d+_\d+" at 127\.0\.0\.1:\d+ has no cluster schema \(relation "events" does not exist\)/,
    );
    const missing = new URL(url);
    missing.pathname = '/no_such_database';
    expectOneLineError(
      runCli(['stats'], { DATABASE_URL: missing.toString() }),
      1,
      /^consig-receiver: PostgreSQL database "no_such_database" at 127\.0\.0\.1:\d+: database "no_such_database" does not exist \(3D000\)$/,
    );
  });
});

it('start-averbacao tracks what it started in PostgreSQL, where every replica polls it (not in a SQLite file)', async () => {
  const fake = await startFakeService();
  const tmp = tempDir('consig-pgcli-start-');
  try {
    fake.on('POST', '/contract/averbacao', {
      status: 202,
      json: { requestId: 'req-pg-started-1', correlationId: 'corr-pg-1', status: 'queued' },
    });
    const sqlite = join(tmp.dir, 'consig.db');
    const started = await runCliAsync(['start-averbacao', '--proposal', '4243'], {
      DATABASE_URL: url,
      DATABASE_PATH: sqlite,
      SERVICE_BASE_URL: fake.url,
      SERVICE_ACCESS_TOKEN: 'tok-1',
      SERVICE_API_KEY: 'key-1',
    });
    expect(started.stderr).toBe('');
    expect(started.status).toBe(0);
    expect(started.stdout).toContain(`requestId req-pg-started-1, status queued — tracked in ${target} `);
    expect(started.stdout).not.toContain(PASSWORD);
    const rows = await withClient(
      url,
      async (c) =>
        (
          await c.query(
            "SELECT request_id, correlation_id, nu_proposta, tracked_via, status FROM averbacoes WHERE request_id = 'req-pg-started-1'",
          )
        ).rows,
    );
    expect(rows).toEqual([
      {
        request_id: 'req-pg-started-1',
        correlation_id: 'corr-pg-1',
        nu_proposta: '4243',
        tracked_via: 'started',
        status: 'queued',
      },
    ]);
    // Its first poll is queued in the same transaction, as `track` does (postgres/pg-port.ts `effects`).
    const jobs = await withClient(url, async (c) =>
      Number(
        (await c.query("SELECT count(*) AS n FROM pgboss.job WHERE data::text LIKE '%req-pg-started-1%'"))
          .rows[0].n,
      ),
    );
    expect(jobs).toBe(1);
    expect(existsSync(sqlite)).toBe(false);
  } finally {
    await fake.close();
    tmp.cleanup();
  }
});

describe('the same shape as on SQLite', () => {
  let tmp: ReturnType<typeof tempDir>;
  let sqlite: { DATABASE_PATH: string };
  beforeAll(async () => {
    tmp = tempDir('consig-pg-cli-');
    sqlite = { DATABASE_PATH: join(tmp.dir, 'consig.db') };
    const server = await startServe({ ...sqlite, WEBHOOK_SECRETS: SECRET });
    try {
      // The same story as 4242 in PostgreSQL: created, approved (twice), then a late pre-approval.
      for (const [evento, id] of [
        ['proposta.criada', 'wh_s1'],
        ['proposta.aprovada', 'wh_s2'],
        ['proposta.aprovada', 'wh_s2'],
        ['proposta.pre_aprovada', 'wh_s3'],
      ] as const) {
        const { raw, signature } = signed(
          delivery(evento, {
            webhook_id: id,
            nu_proposta: 4242,
            dados: { uuid: UUID, nu_cnpj_conveniada: CNPJ },
          }),
        );
        expect(
          (await postRaw(`${server.url}/webhooks`, raw, { 'x-service-signature': signature })).status,
        ).toBe(200);
        await processed(evento === 'proposta.pre_aprovada' ? 3 : evento === 'proposta.aprovada' ? 2 : 1);
      }
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
  });
  afterAll(() => tmp?.cleanup());

  /** Waits until the proposal's first `n` events are processed, so that they arrive in order. */
  async function processed(n: number): Promise<void> {
    const until = Date.now() + 20_000;
    for (;;) {
      const r = runCli(['proposal', '4242', '--json'], sqlite);
      const timeline =
        r.status === 0 ? (JSON.parse(r.stdout) as { timeline: { applied: unknown }[] }).timeline : [];
      if (timeline.length >= n && timeline.every((t) => t.applied !== null)) return;
      if (Date.now() > until) throw new Error(`proposal 4242 not processed: ${r.stdout}${r.stderr}`);
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  const onSqlite = (...args: string[]): unknown => {
    const r = runCli([...args, '--json'], sqlite);
    expect(r).toMatchObject({ status: 0, stderr: '' });
    return JSON.parse(r.stdout);
  };

  /** Each key with the JSON type of its value ('null' when null). */
  const typesOf = (o: Record<string, unknown>): Record<string, string> =>
    Object.fromEntries(Object.entries(o).map(([k, v]) => [k, v === null ? 'null' : typeof v]));

  it('proposal <nu> --json: the same keys, in the same order, with the same types', () => {
    type Shown = { proposal: Record<string, unknown>; timeline: Record<string, unknown>[] };
    const lite = onSqlite('proposal', '4242') as Shown;
    const cluster = json('proposal', '4242') as Shown;
    expect(Object.keys(cluster)).toEqual(Object.keys(lite));
    expect(Object.keys(cluster.proposal)).toEqual(Object.keys(lite.proposal));
    expect(typesOf(cluster.proposal)).toEqual(typesOf(lite.proposal));
    expect(cluster.timeline).toHaveLength(lite.timeline.length);
    cluster.timeline.forEach((row, i) => {
      expect(Object.keys(row)).toEqual(Object.keys(lite.timeline[i] ?? {}));
      expect(typesOf(row)).toEqual(typesOf(lite.timeline[i] ?? {}));
    });
    expect(lite.timeline.map((t) => t.applied)).toEqual([1, 1, 0]);
  });

  it('proposal <nu>: the same header line and table', () => {
    const shape = (text: string) => {
      const [header = '', columns = ''] = text.split('\n');
      return { header: header.replace(/\(.*\)$/, '(…)'), columns: columns.split(/\s+/) };
    };
    const lite = runCli(['proposal', '4242'], sqlite).stdout;
    expect(shape(ok('proposal', '4242'))).toEqual(shape(lite));
    expect(lite).toMatch(/proposta\.pre_aprovada\s+done\s+aprovada\s+pre_aprovada\s+no\s+late/);
  });

  it('events, deliveries and stats --json: the same keys (stats: plus replicas)', () => {
    const keys = (rows: unknown) => Object.keys((rows as Record<string, unknown>[])[0] ?? {});
    expect(keys(json('events'))).toEqual(keys(onSqlite('events')));
    expect(keys(json('deliveries'))).toEqual(keys(onSqlite('deliveries')));
    const liteStats = Object.keys(onSqlite('stats') as object);
    const clusterStats = Object.keys(json('stats') as object).filter((k) => k !== 'replicas');
    expect(clusterStats).toEqual(liteStats);
    expect(keys(json('proposals'))).toEqual(keys(onSqlite('proposals')));
  });
});
