import type { AuditRow as ConsoleAuditRow } from '../../src/domain/console';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { openDatabase } from '../../src/sqlite/database';
import { ConsoleClient } from '../helpers/console-client';
import { delivery, eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Reads of personal data are audited (LGPD, issue 45; contract §4, §8, §9): the `/admin` GETs that
 * serve a body or a proposal, the change feed, and the console's event and proposal pages each
 * write one `console_audit` row per answer, and an answer whose row cannot be written is not
 * served. The whole receiver on a real SQLite file, over real HTTP; the cluster-mode rows are
 * compared with these in test/integration/cluster-admin.test.ts.
 */

const ADMIN = 'admin-token-read-audit';
const VIEWER = 'viewer-token-read-audit';
const CPF = '12345678909';
const MASKED = '***.456.789-**';

/** The columns these tests read of a `console_audit` row. */
type AuditRow = Pick<
  ConsoleAuditRow,
  'id' | 'role' | 'session' | 'person' | 'action' | 'target' | 'detail' | 'ip'
>;

let r: TestReceiver;
let tmp: ReturnType<typeof tempDir>;

async function start(env: Record<string, string> = {}): Promise<void> {
  tmp = tempDir('consig-read-audit-');
  const destinations = join(tmp.dir, 'destinations.json');
  // A paused destination: the messages stay, each with its delivery row to show.
  const crm = { name: 'crm', url: 'http://127.0.0.1:9/', secret: 'crm-secret-0123456789', paused: true };
  writeFileSync(destinations, JSON.stringify({ destinations: [crm] }));
  r = await startTestReceiver({
    env: {
      ADMIN_TOKEN: ADMIN,
      VIEWER_TOKEN: VIEWER,
      FEED_ENABLED: 'true',
      DESTINATIONS_FILE: destinations,
      ...env,
    },
  });
}

afterEach(async () => {
  await r.stop();
  tmp.cleanup();
});

function auditRows(action?: string): AuditRow[] {
  const where = action === undefined ? '' : 'WHERE action = ?';
  return r.store.db
    .prepare(
      `SELECT id, role, session, person, action, target, detail, ip FROM console_audit ${where} ORDER BY id`,
    )
    .all(...(action === undefined ? [] : [action])) as AuditRow[];
}

async function admin(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${r.url}/admin${path}`, {
    headers: { authorization: `Bearer ${ADMIN}`, ...headers },
  });
  const text = await res.text();
  return { status: res.status, retryAfter: res.headers.get('retry-after'), text, body: JSON.parse(text) };
}

/** Delivers `evento` for proposal `nu` and waits until the pipeline has processed it; its id. */
async function processed(evento: string, nu: number): Promise<number> {
  const sent = await r.send(delivery(evento, { nu_proposta: nu }));
  const id = Number(sent.body.event_id);
  await eventually(() => {
    const row = r.store.db.prepare('SELECT status FROM events WHERE id = ?').get(id) as { status: string };
    return row.status === 'done';
  }, `event ${id} processed`);
  return id;
}

const asAdminToken = { role: 'admin', session: null, person: 'admin-token', ip: '127.0.0.1' };

describe('the admin API', () => {
  it('each GET serving a body or a proposal writes one admin_read row; lists without either write none', async () => {
    await start();
    const id = await processed('proposta.criada', 4242);
    await fetch(`${r.url}/admin/averbacoes/track`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ requestId: 'req-4242', nu_proposta: 4242 }),
    });
    const forwardId = (await admin('/forwards?limit=1')).body.forwards[0].id as number;
    const before = auditRows().length;

    const served = [
      `/events/${id}`,
      '/proposals/4242',
      `/averbacoes?nu_proposta=${CPF}&status=queued`,
      '/averbacoes/req-4242',
      `/forwards/${forwardId}`,
    ];
    for (const path of served) expect((await admin(path)).status).toBe(200);
    // Not audited: their rows carry no body and no CPF (events, deliveries, forwards, destinations).
    for (const path of ['/events?nu_proposta=4242', '/deliveries', '/forwards', '/destinations'])
      expect((await admin(path)).status).toBe(200);
    // Nothing served, nothing recorded.
    for (const path of ['/events/999999', '/proposals/777', '/averbacoes/req-none', '/forwards/999999'])
      expect((await admin(path)).status).toBe(404);

    expect(
      auditRows()
        .slice(before)
        .map(({ id: _id, ...row }) => row),
    ).toEqual([
      { ...asAdminToken, action: 'admin_read', target: `event:${id}`, detail: null },
      { ...asAdminToken, action: 'admin_read', target: 'proposal:4242', detail: null },
      {
        ...asAdminToken,
        action: 'admin_read',
        target: 'averbacoes',
        // The filter as asked, its CPF masked; how many rows were served.
        detail: JSON.stringify({ nu_proposta: MASKED, status: 'queued', rows: 0 }),
      },
      { ...asAdminToken, action: 'admin_read', target: 'averbacao:req-4242', detail: null },
      { ...asAdminToken, action: 'admin_read', target: `forward:${forwardId}`, detail: null },
    ]);
    expect(JSON.stringify(auditRows())).not.toContain(CPF);
  });

  it('a CPF in the path is masked in the target; the address is the one TRUST_PROXY believes', async () => {
    await start({ TRUST_PROXY: '1' });
    await processed('proposta.criada', Number(CPF));
    const res = await admin(`/proposals/${CPF}`, { 'x-forwarded-for': '203.0.113.7' });
    expect(res.status).toBe(200);
    expect(auditRows('admin_read')).toMatchObject([{ target: `proposal:${MASKED}`, ip: '203.0.113.7' }]);
  });

  it('a read whose row cannot be written is refused 503, never served unaudited', async () => {
    await start();
    const id = await processed('proposta.criada', 4243);
    // The audit table refuses every row (a real failure of the database, not a stand-in).
    r.store.db.exec(
      "CREATE TRIGGER audit_down BEFORE INSERT ON console_audit BEGIN SELECT RAISE(ABORT, 'audit down'); END",
    );
    const refused = await admin(`/events/${id}`);
    expect(refused).toMatchObject({ status: 503, retryAfter: '1', body: { error: 'audit_unavailable' } });
    expect(refused.text).not.toContain('nu_cpf');
    expect((await admin('/feed')).body.error).toBe('audit_unavailable');
    expect(r.logs.lines).toContainEqual(
      expect.objectContaining({ msg: 'read not audited: refused', target: `event:${id}` }),
    );
    r.store.db.exec('DROP TRIGGER audit_down');

    // Another connection holds the write lock: the read is 503 storage_busy like any admin write.
    const lockHolder = openDatabase(r.dbPath, { busyTimeoutMs: 0 });
    try {
      lockHolder.exec('BEGIN IMMEDIATE');
      const busy = await admin(`/events/${id}`);
      expect(busy).toMatchObject({ status: 503, retryAfter: '1', body: { error: 'storage_busy' } });
      lockHolder.exec('ROLLBACK');
    } finally {
      if (lockHolder.inTransaction) lockHolder.exec('ROLLBACK');
      lockHolder.close();
    }
    expect(auditRows('admin_read')).toEqual([]);
    expect((await admin(`/events/${id}`)).status).toBe(200);
    expect(auditRows('admin_read')).toHaveLength(1);
  });
});

describe('the change feed', () => {
  it('one feed_read row per answer: the cursor, the limit and how many messages; a long-poll writes once', async () => {
    await start();
    await processed('proposta.criada', 4300);
    await processed('proposta.pre_aprovada', 4300);
    const first = await admin('/feed?limit=1');
    const rest = await admin(`/feed?after=${first.body.cursor}`);
    expect([first.body.messages.length, rest.body.messages.length]).toEqual([1, 1]);

    // A long-poll with nothing newer waits; a commit wakes it, and its answer writes one row.
    const waiting = admin(`/feed?after=${rest.body.cursor}&wait=30`);
    await processed('proposta.aprovada', 4300);
    expect((await waiting).body.messages).toHaveLength(1);

    const feed = { ...asAdminToken, action: 'feed_read', target: 'feed' };
    expect(auditRows('feed_read').map(({ id: _id, ...row }) => row)).toEqual([
      { ...feed, detail: JSON.stringify({ limit: 1, messages: 1 }) },
      { ...feed, detail: JSON.stringify({ after: first.body.cursor, limit: 100, messages: 1 }) },
      { ...feed, detail: JSON.stringify({ after: rest.body.cursor, wait: '30', limit: 100, messages: 1 }) },
    ]);
    expect(auditRows('admin_read')).toEqual([]);
  });
});

describe('the console', () => {
  it("the event and proposal pages write a console_read row with the session's role and tag; the lists none", async () => {
    await start();
    const id = await processed('proposta.criada', 4400);
    const viewer = new ConsoleClient(r.url);
    await viewer.signIn(VIEWER);
    const signIn = auditRows('sign_in')[0] as AuditRow;
    for (const path of [
      '/console',
      '/console/events',
      '/console/proposals',
      '/console/events?nu_proposta=4400',
    ])
      expect((await viewer.get(path)).status).toBe(200);
    expect(auditRows('console_read')).toEqual([]);

    expect((await viewer.get(`/console/events/${id}`)).status).toBe(200);
    expect((await viewer.get('/console/proposals/4400')).status).toBe(200);
    expect((await viewer.get('/console/events/999999')).status).toBe(404);
    const session = { role: 'viewer', session: signIn.session, person: null, ip: '127.0.0.1', detail: null };
    expect(auditRows('console_read').map(({ id: _id, ...row }) => row)).toEqual([
      { ...session, action: 'console_read', target: `event:${id}` },
      { ...session, action: 'console_read', target: 'proposal:4400' },
    ]);

    // The audit page lists them, and the admin API's reads beside them.
    expect((await admin(`/events/${id}`)).status).toBe(200);
    const page = (await viewer.get('/console/audit')).text;
    expect(page).toContain('<td>console_read</td><td>viewer</td>');
    expect(page).toContain(`<td>admin_read</td><td>admin-token (admin)</td><td>—</td><td>event:${id}</td>`);
  });

  it('a page whose row cannot be written is a 503 page, the body not shown', async () => {
    await start();
    const id = await processed('proposta.criada', 4401);
    const c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
    r.store.db.exec(
      "CREATE TRIGGER audit_down BEFORE INSERT ON console_audit BEGIN SELECT RAISE(ABORT, 'audit down'); END",
    );
    const refused = await c.get(`/console/events/${id}`);
    expect(refused.status).toBe(503);
    expect(refused.text).toContain('could not be recorded in the audit');
    expect(refused.text).not.toContain('Empresa Exemplo');
    expect((await c.get('/console/proposals/4401')).status).toBe(503);
    r.store.db.exec('DROP TRIGGER audit_down');
    expect((await c.get(`/console/events/${id}`)).status).toBe(200);
    expect(auditRows('console_read')).toHaveLength(1);
  });
});
