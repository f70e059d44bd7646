import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { clientRunners, pgStoreSql } from '../../src/postgres/pg-statements';
import { forwardAdmin } from '../../src/core/forward-admin';
import { storeOutbox } from '../../src/postgres/pg-outbox';
import { sqlOf } from '../../src/postgres/pg-sql';
import { CHUNK_ROWS } from '../../src/domain/forwarding/admin';
import { parseDestinationsFile } from '../../src/domain/forwarding/destinations';
import { destinationWants, type OutgoingMessage } from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import Database from '../../src/sqlite/sqlite-driver';
import { openStore } from '../../src/sqlite/store';
import { listenOutbox } from '../helpers/cluster-db';
import { maskCpf } from '../../src/domain/privacy';
import { CPF, lifecycleMessages } from '../helpers/outbox';
import { createTestDatabase, workerPostgres, withClient, migrateUrl } from '../helpers/postgres';
import { BIN, type RunResult, runCli } from '../helpers/process';
import { eventually } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * `forwards …` and `feed` in cluster mode (contract §8, §10): the built CLI, run as a child with
 * DATABASE_URL, on a real PostgreSQL migrated with migrations-pg/ whose outbox was written by the
 * turns' own statement (storeOutbox). The same rows are written to a SQLite file with the
 * pipeline's statement (forwardOutbox) and the same updates, and each command must print the same
 * thing on both, `--json` to the byte, except where a write's own time differs.
 */

const PASSWORD = 'Fwd-s3cret-pw';

const DESTINATIONS_JSON = JSON.stringify({
  destinations: [
    {
      name: 'crm',
      url: 'https://crm.example/hooks?token=abc',
      secret: 'crm-secret-1',
      types: ['proposal.changed'],
    },
    { name: 'warehouse', url: 'https://dw.example/in', secret: 'dw-secret-1', full_cpf: true },
    { name: 'frozen', url: 'https://frozen.example/', secret: 'frozen-secret-1', paused: true },
    { name: 'late', url: 'https://late.example/', secret: 'late-secret-1', types: ['proposal.changed'] },
  ],
});
// `late` joins after the history below was stored (backfill gives it that history).
const LIVE = parseDestinationsFile(DESTINATIONS_JSON, 'test').filter((d) => d.name !== 'late');

const at = (minute: number, second = 0) => new Date(Date.UTC(2026, 10, 21, 10, minute, second)).toISOString();

/** Three life-cycle events: proposal 1 created then approved, proposal 2 created. */
const STORY: { nu: number; evento: string; to: ProposalStatus }[] = [
  { nu: 1, evento: 'proposta.criada', to: 'em_analise' },
  { nu: 1, evento: 'proposta.aprovada', to: 'aprovada' },
  { nu: 2, evento: 'proposta.criada', to: 'em_analise' },
];

const MESSAGES: OutgoingMessage[] = STORY.flatMap((e, i) =>
  lifecycleMessages({ id: i + 1, nu: e.nu, evento: e.evento, to: e.to, at: at(i + 1) }, { idPrefix: 'p' }),
);

/** The writes both stores get after their outbox, `?` placeholders, `flag` for a 0/1 column. */
type Exec = (sql: string, params: readonly unknown[]) => Promise<void> | void;

/**
 * crm: its first message delivered, its second dead (503 then 410), its third retrying after a
 * timeout; warehouse's first message dead; crm's circuit open; `retired` (no longer configured)
 * paused by an operator.
 */
async function applyHistory(exec: Exec, flag: (b: boolean) => unknown): Promise<void> {
  const crm = [3, 8, 13];
  const update = `UPDATE forward_deliveries SET status = ?, attempts = ?, last_status = ?, last_error = ?,
    next_attempt_at = ?, delivered_at = ?, updated_at = ? WHERE id = ?`;
  await exec(update, ['delivered', 1, 200, null, null, at(1, 1), at(1, 1), crm[0]]);
  await exec(update, ['dead', 2, 410, 'HTTP 410', null, null, at(2, 30), crm[1]]);
  await exec(update, ['pending', 1, null, 'timeout: no answer in 10000 ms', at(40), null, at(3, 20), crm[2]]);
  await exec(update, ['dead', 1, 400, 'HTTP 400', null, null, at(1, 2), 1]);
  const attempt = `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, http_status, error,
    outcome, answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`;
  await exec(attempt, [crm[0], 1, at(1, 0.5), 12.5, 200, null, 'delivered', 'ok']);
  await exec(attempt, [crm[1], 1, at(2, 10), 30.25, 503, null, 'temporary', 'busy']);
  await exec(attempt, [crm[1], 2, at(2, 30), 8, 410, null, 'permanent', 'gone']);
  await exec(attempt, [
    crm[2],
    1,
    at(3, 10),
    10000,
    null,
    'timeout: no answer in 10000 ms',
    'temporary',
    null,
  ]);
  await exec(attempt, [1, 1, at(1, 2), 3.5, 400, null, 'permanent', '{"error":"bad"}']);
  const circuit = JSON.stringify({ state: 'open', since: 1, until: 2, failures: 5 });
  await exec('INSERT INTO forward_destinations (name, paused, circuit, updated_at) VALUES (?, ?, ?, ?)', [
    'crm',
    flag(false),
    circuit,
    at(3, 30),
  ]);
  await exec('INSERT INTO forward_destinations (name, paused, circuit, updated_at) VALUES (?, ?, ?, ?)', [
    'retired',
    flag(true),
    null,
    at(0),
  ]);
}

const routed = (m: OutgoingMessage) => LIVE.filter((d) => destinationWants(d, m)).map((d) => d.name);

async function seedPostgres(c: Client): Promise<void> {
  for (const [i, e] of STORY.entries()) {
    await c.query(
      `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, received_at, body_bytes, status)
       VALUES ($1, $2, 'event', $3, $4, $5, 0, 'done')`,
      [i + 1, `wh_${i + 1}`, e.evento, String(e.nu), at(i + 1)],
    );
  }
  await c.query("SELECT setval('events_id_seq', 3)");
  for (const m of MESSAGES) await storeOutbox(sqlOf(c), [{ message: m, destinations: routed(m) }]);
  await applyHistory(
    async (text, params) => {
      let n = 0;
      await c.query(
        text.replace(/\?/g, () => `$${(n += 1)}`),
        [...params],
      );
    },
    (b) => b,
  );
}

async function seedSqlite(path: string): Promise<void> {
  const store = openStore(path, { migrate: true });
  try {
    const outbox = forwardOutbox(store.db);
    store.db.transaction(() => {
      for (const m of MESSAGES) outbox.insert(m, routed(m));
    })();
  } finally {
    store.close();
  }
  const db = new Database(path);
  try {
    await applyHistory(
      (text, params) => void db.prepare(text).run(...params),
      (b) => (b ? 1 : 0),
    );
  } finally {
    db.close();
  }
}

let pg: LocalPostgres;
let tmp: ReturnType<typeof tempDir>;
let template: string;
let seededSqlite: string;
let destinationsFile: string;

beforeAll(async () => {
  pg = await workerPostgres();
  tmp = tempDir('consig-pg-fwd-');
  template = new URL(await createTestDatabase(pg, 'pgfwd_tpl')).pathname.slice(1);
  const templateUrl = new URL(pg.url);
  templateUrl.pathname = `/${template}`;
  await migrateUrl(templateUrl.toString());
  await withClient(templateUrl.toString(), seedPostgres);
  seededSqlite = join(tmp.dir, 'seeded.db');
  await seedSqlite(seededSqlite);
  destinationsFile = join(tmp.dir, 'destinations.json');
  writeFileSync(destinationsFile, DESTINATIONS_JSON);
});
afterAll(async () => {
  await pg?.stop();
  tmp?.cleanup();
});

let copies = 0;
/** This test's PostgreSQL database (a copy of the seeded template), with a password in its URL. */
let url: string;
/** What the commands print as the database: host, port and database, no user or password. */
let target: string;
let sqlitePath: string;

beforeEach(async () => {
  copies += 1;
  const name = `pgfwd_${process.pid}_${copies}`;
  await withClient(pg.url, (c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
  const u = new URL(pg.url);
  u.pathname = `/${name}`;
  u.password = PASSWORD;
  url = u.toString();
  target = `postgres://127.0.0.1:${pg.port}/${name}`;
  sqlitePath = join(tmp.dir, `${name}.db`);
  copyFileSync(seededSqlite, sqlitePath);
});

const BASE_ENV = () => ({ DESTINATIONS_FILE: destinationsFile, FEED_ENABLED: 'true' });

/** The CLI in cluster mode; nothing it prints may hold the password. */
function cluster(args: string[], env: Record<string, string> = {}): RunResult {
  const r = runCli(args, { ...BASE_ENV(), DATABASE_URL: url, ...env });
  expect(`${r.stdout}${r.stderr}`).not.toContain(PASSWORD);
  return r;
}

/** The CLI on the SQLite file holding the same rows. */
function sqlite(args: string[], env: Record<string, string> = {}): RunResult {
  return runCli(args, { ...BASE_ENV(), DATABASE_PATH: sqlitePath, ...env });
}

function ok(r: RunResult): string {
  expect(r).toMatchObject({ status: 0, stderr: '' });
  return r.stdout;
}

/** Runs the command in both modes; both succeed and print the same. Returns the cluster's stdout. */
function same(...args: string[]): string {
  const onPg = ok(cluster(args));
  expect(onPg).toBe(ok(sqlite(args)));
  return onPg;
}

function expectOneLineError(r: RunResult, code: number, pattern: RegExp): void {
  expect(r.status).toBe(code);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(r.stderr).not.toContain(PASSWORD);
}

async function pgRows<T>(text: string, params: unknown[] = []): Promise<T[]> {
  return withClient(url, async (c) => (await c.query(text, params)).rows as T[]);
}

function sqliteRows<T>(text: string, ...params: unknown[]): T[] {
  const db = new Database(sqlitePath, { readonly: true });
  try {
    return db.prepare(text).all(...params) as T[];
  } finally {
    db.close();
  }
}

const webhookOf = (n: number) => MESSAGES[n]?.webhookId as string;

describe('forwards list', () => {
  it('prints what SQLite mode prints for the same rows: table and --json, with every filter', () => {
    const rows = JSON.parse(same('forwards', 'list', '--json')) as Record<string, unknown>[];
    expect(rows).toHaveLength(15);
    expect(rows[0]).toEqual({
      id: 15,
      message_id: 6,
      destination: 'frozen',
      status: 'pending',
      attempts: 0,
      next_attempt_at: at(3),
      last_status: null,
      last_error: null,
      created_at: at(3),
      updated_at: at(3),
      delivered_at: null,
      webhook_id: webhookOf(5),
      type: 'proposal.changed',
      event_id: 3,
      evento: 'proposta.criada',
      nu_proposta: 2,
      request_id: null,
      order_key: 'p:2',
      message_created_at: at(3),
    });
    expect(same('forwards', 'list')).toMatch(/^id\s+destination\s+status\s+attempts\s+type\s+nu_proposta/);
    const ids = (...args: string[]) =>
      (JSON.parse(same('forwards', 'list', ...args, '--json')) as { id: number }[]).map((r) => r.id);
    expect(ids('--destination', 'crm')).toEqual([13, 8, 3]);
    expect(ids('--status', 'dead')).toEqual([8, 1]);
    expect(ids('--status', 'retrying')).toEqual([13]);
    expect(ids('--status', 'delivered')).toEqual([3]);
    expect(ids('--proposal', '0001', '--type', 'proposal.changed')).toEqual([10, 9, 8, 5, 4, 3]);
    expect(ids('--since', '2026-11-21T10:02:00Z', '--until', '2026-11-21T07:03:00-03:00')).toEqual([
      10, 9, 8, 7, 6,
    ]);
    expect(ids('--limit', '2')).toEqual([15, 14]);
    expect(ids('--destination', 'nowhere')).toEqual([]);
    expect(same('forwards', 'list', '--destination', 'nowhere')).toBe('(no rows)\n');
  });

  it('pages backwards by delivery id (keyset), as the admin API does', async () => {
    const page = await withClient(url, async (c) => {
      const admin = forwardAdmin(pgStoreSql(clientRunners(c)));
      const first = await admin.list({ limit: 4 });
      const next = await admin.list({ limit: 4, beforeId: first[first.length - 1]?.id });
      const last = await admin.list({ limit: 4, beforeId: 2 });
      return [first, next, last].map((rows) => rows.map((r) => r.id));
    });
    expect(page).toEqual([[15, 14, 13, 12], [11, 10, 9, 8], [1]]);
  });

  it('refuses bad options in one line, before connecting', () => {
    expectOneLineError(
      cluster(['forwards', 'list', '--status', 'lost']),
      2,
      /--status expects pending, retrying/,
    );
    expectOneLineError(
      cluster(['forwards', 'list', '--since', 'today']),
      2,
      /--since expects an ISO 8601 date/,
    );
    expectOneLineError(cluster(['forwards', 'list', '--type', 'x']), 2, /--type expects event\.received/);
  });
});

describe('forwards show', () => {
  it('a delivery, its message as that destination gets it and its attempts: the same as SQLite mode', () => {
    const shown = JSON.parse(same('forwards', 'show', '8', '--json'));
    expect(Object.keys(shown)).toEqual(['delivery', 'message', 'attempts']);
    expect(shown.delivery).toMatchObject({
      id: 8,
      destination: 'crm',
      status: 'dead',
      last_error: 'HTTP 410',
    });
    expect(shown.message.data.proposal.nu_cpf).toBe('***.456.789-**');
    expect(shown.attempts).toEqual([
      {
        id: 2,
        attempt: 1,
        started_at: at(2, 10),
        duration_ms: 30.25,
        http_status: 503,
        error: null,
        outcome: 'temporary',
        answer: 'busy',
      },
      expect.objectContaining({ id: 3, attempt: 2, http_status: 410, outcome: 'permanent', answer: 'gone' }),
    ]);
    const text = same('forwards', 'show', '8');
    expect(text).toContain(
      `forward 8: proposal.changed ${webhookOf(3)} → crm: dead, 2 attempt(s), last error: HTTP 410`,
    );
    expect(text).not.toContain(CPF);
    // warehouse asked for the CPF in full: it gets it, the command still masks it (contract §5).
    const full = same('forwards', 'show', '9', '--json');
    expect(JSON.parse(full).message.data.proposal.nu_cpf).toBe(maskCpf(CPF));
    expect(full).not.toContain(CPF);
  });

  it('an unknown delivery names the database, never the password', () => {
    expectOneLineError(
      cluster(['forwards', 'show', '999']),
      2,
      new RegExp(`^consig-receiver: no forward 999 in ${target}$`),
    );
    expectOneLineError(cluster(['forwards', 'show', 'x']), 2, /delivery ids are positive integers/);
  });
});

describe('forwards replay', () => {
  type State = { id: number; status: string; attempts: number; delivered_at: string | null };
  const statesOnPg = () =>
    pgRows<State>(
      'SELECT id::int AS id, status, attempts, delivered_at::text AS delivered_at FROM forward_deliveries ORDER BY id',
    );
  const statesOnSqlite = () =>
    sqliteRows<State>('SELECT id, status, attempts, delivered_at FROM forward_deliveries ORDER BY id');
  const brief = (rows: State[]) => rows.map((r) => [r.id, r.status, r.attempts, r.delivered_at !== null]);

  it('by ids: dead and delivered start over, pending keeps its attempts; the sender is notified', async () => {
    const listener = await listenOutbox(url);
    try {
      const out = same('forwards', 'replay', '3', '8', '13', '--json');
      expect(JSON.parse(out)).toEqual({ replayed: 3, by_status: { pending: 1, delivered: 1, dead: 1 } });
      await listener.settled();
      expect(listener.received()).toBe(1);
    } finally {
      await listener.close();
    }
    const after = await statesOnPg();
    expect(brief(after.filter((r) => [3, 8, 13].includes(r.id)))).toEqual([
      [3, 'pending', 0, false],
      [8, 'pending', 0, false],
      [13, 'pending', 1, false],
    ]);
    expect(brief(after)).toEqual(brief(statesOnSqlite()));
    const due = await pgRows<{ due: boolean }>(
      'SELECT next_attempt_at <= now() AS due FROM forward_deliveries WHERE id = ANY($1::bigint[])',
      [[3, 8, 13]],
    );
    expect(due.every((r) => r.due)).toBe(true);
    expectOneLineError(
      cluster(['forwards', 'replay', '8', '4242']),
      2,
      new RegExp(`no forward 4242 in ${target}$`),
    );
  });

  it('by filter: says how many without --yes, replays only what matches (never a delivered one for --status dead)', async () => {
    expectOneLineError(
      cluster(['forwards', 'replay', '--status', 'dead']),
      1,
      /^consig-receiver: 2 deliveries \(dead 2, delivered 0, pending 0\) would be replayed; run again with --yes/,
    );
    expect(brief(await statesOnPg())).toEqual(brief(statesOnSqlite()));
    const listener = await listenOutbox(url);
    try {
      const out = same('forwards', 'replay', '--destination', 'crm', '--status', 'dead', '--yes');
      expect(out).toMatch(/^replayed 1 delivery \(dead 1, delivered 0, pending 0\)/);
      await listener.settled();
      expect(listener.received()).toBe(1);
    } finally {
      await listener.close();
    }
    const after = await statesOnPg();
    expect(brief(after)).toEqual(brief(statesOnSqlite()));
    expect(after.find((r) => r.id === 3)).toMatchObject({ status: 'delivered', attempts: 1 });
    expect(after.find((r) => r.id === 1)).toMatchObject({ status: 'dead' });
    expect(same('forwards', 'replay', '--destination', 'crm', '--status', 'dead')).toBe(
      'nothing to replay\n',
    );
    expectOneLineError(cluster(['forwards', 'replay']), 2, /needs delivery ids or a filter/);
    expectOneLineError(
      cluster(['forwards', 'replay', '1', '--status', 'dead']),
      2,
      /ids or a filter, not both/,
    );
  });

  it(`commits a large replay in chunks of ${CHUNK_ROWS} rows, each notifying the sender`, async () => {
    // 2.5 chunks more of dead deliveries of message 1, to destinations no longer configured.
    await pgRows(
      `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, created_at, updated_at)
       SELECT 1, 'old-' || n, 'p:1', 'dead', 3, now(), now() FROM generate_series(1, $1::int) AS n`,
      [CHUNK_ROWS * 2.5],
    );
    const listener = await listenOutbox(url);
    try {
      const r = cluster(['forwards', 'replay', '--status', 'dead', '--yes', '--json']);
      const n = CHUNK_ROWS * 2.5 + 2;
      expect(JSON.parse(ok(r))).toEqual({ replayed: n, by_status: { pending: 0, delivered: 0, dead: n } });
      await listener.settled();
      // One notification per committed transaction (PostgreSQL folds repeats within one).
      expect(listener.received()).toBe(3);
    } finally {
      await listener.close();
    }
    expect(await pgRows("SELECT count(*)::int AS n FROM forward_deliveries WHERE status = 'dead'")).toEqual([
      { n: 0 },
    ]);
  });
});

describe('forwards pause / resume / destinations', () => {
  it('destinations: the same summaries as SQLite mode (never a secret; circuit parsed; the query hidden)', () => {
    const list = JSON.parse(same('forwards', 'destinations', '--json'));
    expect(list.map((d: { name: string }) => d.name)).toEqual([
      'crm',
      'warehouse',
      'frozen',
      'late',
      'retired',
    ]);
    expect(list[0]).toEqual({
      name: 'crm',
      configured: true,
      url: 'https://crm.example/hooks?…',
      types: ['proposal.changed'],
      eventos: ['*'],
      has_filter: false,
      full_cpf: false,
      paused: false,
      paused_in_config: false,
      paused_by_operator: false,
      counts: { pending: 1, retrying: 1, delivered: 1, dead: 1 },
      oldest_pending_at: at(3),
      circuit: { state: 'open', since: 1, until: 2, failures: 5 },
    });
    expect(list[4]).toMatchObject({
      name: 'retired',
      configured: false,
      paused: true,
      paused_by_operator: true,
    });
    expect(JSON.stringify(list)).not.toContain('secret-1');
    const table = same('forwards', 'destinations');
    expect(table).toMatch(/frozen\s+yes\s+yes \(config\)/);
    expect(table).toMatch(/crm\s+yes\s+no\s+1\s+1\s+1\s+1\s+2026-11-21T10:03:00\.000Z\s+open/);
  });

  it('pause and resume write forward_destinations; a resume notifies the sender', async () => {
    expect(same('forwards', 'pause', 'warehouse')).toContain('destination warehouse paused');
    expect(await pgRows("SELECT paused FROM forward_destinations WHERE name = 'warehouse'")).toEqual([
      { paused: true },
    ]);
    expect(JSON.parse(same('forwards', 'destinations', '--json'))[1]).toMatchObject({
      name: 'warehouse',
      paused: true,
      paused_by_operator: true,
    });
    const listener = await listenOutbox(url);
    try {
      expect(same('forwards', 'resume', 'warehouse')).toContain('destination warehouse resumed');
      await listener.settled();
      expect(listener.received()).toBe(1);
    } finally {
      await listener.close();
    }
    expect(
      await pgRows(
        "SELECT paused FROM forward_destinations WHERE name IN ('warehouse', 'crm') ORDER BY name",
      ),
    ).toEqual([{ paused: false }, { paused: false }]);
    expectOneLineError(
      cluster(['forwards', 'resume', 'frozen']),
      2,
      /frozen is paused in its configuration file/,
    );
    expectOneLineError(
      cluster(['forwards', 'pause', 'nowhere']),
      2,
      /no destination "nowhere" is configured/,
    );
  });
});

describe('forwards backfill', () => {
  it('gives a new destination what it wants and lacks, as SQLite mode does; twice creates nothing', async () => {
    const listener = await listenOutbox(url);
    try {
      const first = same('forwards', 'backfill', '--destination', 'late', '--proposal', '1', '--json');
      expect(JSON.parse(first)).toEqual({ destination: 'late', matched: 2, created: 2 });
      await listener.settled();
      expect(listener.received()).toBe(1);
    } finally {
      await listener.close();
    }
    expect(same('forwards', 'backfill', '--destination', 'late')).toMatch(
      /^late: 3 stored message\(s\) wanted, 1 new delivery queued/,
    );
    expect(JSON.parse(same('forwards', 'backfill', '--destination', 'late', '--json'))).toEqual({
      destination: 'late',
      matched: 3,
      created: 0,
    });
    const late = await pgRows<{ message_id: number; status: string }>(
      "SELECT message_id::int AS message_id, status FROM forward_deliveries WHERE destination = 'late' ORDER BY id",
    );
    expect(late).toEqual([
      { message_id: 2, status: 'pending' },
      { message_id: 4, status: 'pending' },
      { message_id: 6, status: 'pending' },
    ]);
  });
});

describe('feed', () => {
  const lines = (out: string) =>
    out
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { id: string; type: string; data: { proposal?: { nu_cpf: string } } });

  it('pages by cursor, in commit order, CPF masked; the same lines and cursors as SQLite mode', () => {
    const first = cluster(['feed', '--limit', '2']);
    const liteFirst = sqlite(['feed', '--limit', '2']);
    expect(first).toEqual({ ...liteFirst });
    expect(first.status).toBe(0);
    expect(lines(first.stdout).map((m) => m.id)).toEqual([webhookOf(1), webhookOf(3)]);
    expect(lines(first.stdout)[0]?.data.proposal?.nu_cpf).toBe('***.456.789-**');
    expect(first.stdout).not.toContain(CPF);
    const cursor = /^cursor (\S+)$/.exec(first.stderr.trim())?.[1] as string;
    const rest = cluster(['feed', '--after', cursor]);
    expect(lines(rest.stdout).map((m) => m.id)).toEqual([webhookOf(5)]);
    const end = /^cursor (\S+)$/.exec(rest.stderr.trim())?.[1] as string;
    expect(cluster(['feed', '--after', end])).toMatchObject({ status: 0, stdout: '' });
    const received = cluster(['feed', '--types', 'event.received']);
    expect(lines(received.stdout).map((m) => m.type)).toEqual([
      'event.received',
      'event.received',
      'event.received',
    ]);
    expect(received).toEqual({ ...sqlite(['feed', '--types', 'event.received']) });
  });

  it('FEED_FULL_CPF=true shows the CPF in full; FEED_ENABLED off, a bad cursor or type are one line', () => {
    const full = cluster(['feed'], { FEED_FULL_CPF: 'true' });
    expect(lines(full.stdout)[0]?.data.proposal?.nu_cpf).toBe(CPF);
    expectOneLineError(cluster(['feed'], { FEED_ENABLED: 'false' }), 2, /the change feed is off/);
    expectOneLineError(cluster(['feed', '--after', 'nope']), 2, /--after expects a cursor/);
    expectOneLineError(cluster(['feed', '--types', 'x']), 2, /--types expects/);
  });

  it('--follow prints a message committed by a turn, and exits 0 on SIGTERM with the cursor', async () => {
    const child: ChildProcess = spawn(process.execPath, [BIN, 'feed', '--follow'], {
      env: { PATH: process.env.PATH ?? '', ...BASE_ENV(), DATABASE_URL: url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await eventually(() => lines(stdout).length === 3, 'the history is printed', 15_000);
      const later = lifecycleMessages(
        { id: 4, nu: 3, evento: 'proposta.criada', to: 'em_analise', at: at(9) },
        { idPrefix: 'later' },
      );
      await withClient(url, async (c) => {
        await c.query(
          `INSERT INTO events (id, dedup_key, kind, evento, nu_proposta, received_at, status)
           VALUES (4, 'wh_4', 'event', 'proposta.criada', '3', $1, 'done')`,
          [at(9)],
        );
        await storeOutbox(
          sqlOf(c),
          later.map((m) => ({ message: m, destinations: [] })),
        );
      });
      const changed = later.find((m) => m.type === 'proposal.changed')?.webhookId;
      await eventually(() => lines(stdout).length === 4, 'the new message is printed', 15_000);
      expect(lines(stdout)[3]?.id).toBe(changed);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      const cursors = stderr.trim().split('\n');
      expect(cursors.every((l) => /^cursor \S+$/.test(l))).toBe(true);
      const last = (cursors[cursors.length - 1] as string).slice('cursor '.length);
      expect(cluster(['feed', '--after', last]).stdout).toBe('');
      expect(stdout + stderr).not.toContain(PASSWORD);
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('stats', () => {
  it('shows the forwarding figures of PostgreSQL, as SQLite mode does', () => {
    type Stats = { forwarding?: unknown; replicas?: unknown };
    const onPg = JSON.parse(ok(cluster(['stats', '--json']))) as Stats;
    const onSqlite = JSON.parse(ok(sqlite(['stats', '--json']))) as Stats;
    expect(onPg.forwarding).toEqual(onSqlite.forwarding);
    expect(onPg.forwarding).toEqual([
      { destination: 'crm', pending: 1, dead: 1, oldest_pending_at: at(3), paused: false },
      { destination: 'warehouse', pending: 5, dead: 1, oldest_pending_at: at(1), paused: false },
      { destination: 'frozen', pending: 6, dead: 0, oldest_pending_at: at(1), paused: true },
      { destination: 'late', pending: 0, dead: 0, oldest_pending_at: null, paused: false },
      { destination: 'retired', pending: 0, dead: 0, oldest_pending_at: null, paused: true },
    ]);
    const table = ok(cluster(['stats']));
    expect(table).toMatch(/forwarding crm\s+pending\s+1/);
    expect(table).toMatch(/forwarding frozen\s+paused\s+true/);
    expect(table).not.toMatch(/not shown/);
  });

  it('says so in one line when the database has no forwarding tables yet', async () => {
    await pgRows('DROP TABLE forward_attempts, forward_deliveries, forward_messages, forward_destinations');
    const table = ok(cluster(['stats']));
    expect(
      table
        .trim()
        .split('\n')
        .filter((l) => /forwarding/.test(l)),
    ).toEqual([
      expect.stringMatching(/^forwarding: not shown \(this PostgreSQL database has no forwarding tables yet/),
    ]);
    expect(JSON.parse(ok(cluster(['stats', '--json'])))).not.toHaveProperty('forwarding');
  });
});

describe('errors: one line, exit 1, never the password', () => {
  it.each([
    [['forwards', 'list']],
    [['forwards', 'show', '1']],
    [['forwards', 'replay', '1']],
    [['forwards', 'replay', '--status', 'dead', '--yes']],
    [['forwards', 'pause', 'crm']],
    [['forwards', 'resume', 'crm']],
    [['forwards', 'backfill', '--destination', 'late']],
    [['forwards', 'destinations']],
    [['feed']],
    [['feed', '--follow']],
  ])('%j with PostgreSQL unreachable', (args) => {
    const r = runCli(args, {
      ...BASE_ENV(),
      DATABASE_URL: `postgres://consig:${PASSWORD}@127.0.0.1:1/consig`,
    });
    expectOneLineError(r, 1, /^consig-receiver: cannot reach PostgreSQL at 127\.0\.0\.1:1 \(ECONNREFUSED\)$/);
  });
});
