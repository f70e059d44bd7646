import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sqlOf } from '../../src/postgres/pg-sql';
import { consoleAudit } from '../../src/core/console-session-queries';
import { type AuditRow, type NewRefusal, REFUSAL_ROWS_PER_WINDOW } from '../../src/domain/console';
import { postgresDialect } from '../../src/domain/sql/dialect';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import Database from '../../src/sqlite/sqlite-driver';
import { clusterBed } from '../helpers/cluster-bed';
import { rows, waitFor } from '../helpers/cluster-db';
import { ConsoleClient } from '../helpers/console-client';
import { FakeDestination } from '../helpers/destination';
import { delivery } from '../helpers/payloads';
import { runCliAsync } from '../helpers/process';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Console security in both modes (issue 21, items 1, 3, 4): a session ends when the token that
 * opened it is rotated or removed (at its next request, and at the next start for every replica);
 * every session ends by hand with `end-sessions` or the admins' button; the sign-in throttle is in
 * the log, so it holds across a restart and across replicas; refused attempts (CSRF, Origin, role,
 * throttled) are audited, aggregated. Real receivers restarted on the same log (the SQLite file, or
 * PostgreSQL with replicas), real HTTP, the real command (dist/: npm run build).
 */

const ADMIN_A = 'admin-token-A-0123456789';
const ADMIN_B = 'admin-token-B-0123456789';
const VIEWER = 'viewer-token-0123456789';

const bed = clusterBed({ prefix: 'console_sec' });

/** One mode's way to start receivers on one log, read it, and run a command on it. */
interface Mode {
  name: string;
  /** A receiver on this test's log: a restart (SQLite: the previous one must be stopped), or a replica. */
  start(env: Record<string, string>): Promise<TestReceiver>;
  stop(r: TestReceiver): Promise<void>;
  /** Rows of a query on the log (no parameters: the same text in both dialects). */
  query<R>(sql: string): Promise<R[]>;
  /** The environment a command needs to work on this log. */
  cliEnv(): Record<string, string>;
  /** Records a refusal through the store's own statement. */
  refuse(r: NewRefusal): Promise<void>;
}

let replicas = 0;
const sqlite: Mode = {
  name: 'SQLite',
  start: async (env) => {
    const r = await startTestReceiver({ dir: bed.dir.dir, env });
    started.push(r);
    return r;
  },
  stop: async (r) => {
    started.splice(started.indexOf(r), 1);
    await r.stop();
  },
  query: async <R>(sql: string) => {
    const db = new Database(join(bed.dir.dir, 'consig.db'), { readonly: true });
    try {
      return db.prepare(sql).all() as R[];
    } finally {
      db.close();
    }
  },
  cliEnv: () => ({ DATABASE_PATH: join(bed.dir.dir, 'consig.db') }),
  refuse: async (r) => {
    const db = new Database(join(bed.dir.dir, 'consig.db'));
    try {
      await consoleAudit(sqliteStoreSql(db)).refuse(r);
    } finally {
      db.close();
    }
  },
};
const cluster: Mode = {
  name: 'cluster',
  start: (env) => bed.replica({ REPLICA_ID: `replica-${++replicas}`, ...env }),
  stop: (r) => bed.stop(r),
  query: <R>(sql: string) => rows<R>(bed.pool, sql),
  cliEnv: () => ({ DATABASE_URL: bed.url }),
  // Its statements on the pool, as the console's store runs them (src/core/console-session-queries.ts).
  refuse: (r) => {
    const q = sqlOf(bed.pool);
    return consoleAudit({ dialect: postgresDialect, read: (fn) => fn(q), write: (fn) => fn(q) }).refuse(r);
  },
};

/** SQLite receivers of the test, stopped after it (cluster replicas are the bed's). */
const started: TestReceiver[] = [];
afterEach(async () => {
  for (const r of started.splice(0)) await r.stop();
});

async function signedIn(r: TestReceiver, token: string): Promise<ConsoleClient> {
  const c = new ConsoleClient(r.url);
  await c.signIn(token);
  return c;
}

/** The same browser (its cookie) at another receiver. */
function at(r: TestReceiver, c: ConsoleClient): ConsoleClient {
  const again = new ConsoleClient(r.url);
  again.cookie = c.cookie;
  return again;
}

async function signedOut(c: ConsoleClient): Promise<boolean> {
  const res = await c.get('/console');
  return res.status === 303 && (res.location ?? '').startsWith('/console/login');
}

/** An audit row as the test reads it: the domain's row without its id and times. */
type AuditLine = Omit<AuditRow, 'id' | 'at' | 'last_at'>;

const audit = (mode: Mode) =>
  mode.query<AuditLine>(
    'SELECT action, role, session, target, detail, ip, outcome, reason, times FROM console_audit ORDER BY id',
  );

describe.each([sqlite, cluster])('$name mode', (mode) => {
  jest.setTimeout(120_000);

  it('a rotated token ends its sessions at once (at start), a removed one too: an old admin session cannot replay a forward delivery', async () => {
    const destination = await FakeDestination.start(() => ({ status: 400 }));
    try {
      const file = join(bed.dir.dir, 'destinations.json');
      writeFileSync(
        file,
        JSON.stringify({ destinations: [{ name: 'crm', url: destination.url, secret: 'crm-secret-0123' }] }),
      );
      const base = { DESTINATIONS_FILE: file, VIEWER_TOKEN: VIEWER };
      const first = await mode.start({ ...base, ADMIN_TOKEN: ADMIN_A });
      expect((await first.send(delivery('proposta.criada', { nu_proposta: 4242 }))).status).toBe(200);
      // Every message refused at once (400 is permanent): all dead, nothing left to send.
      const [dead] = await waitFor(async () => {
        const all = await mode.query<{ id: number; status: string }>(
          'SELECT id, status FROM forward_deliveries',
        );
        return all.length > 0 && all.every((d) => d.status === 'dead') ? all : undefined;
      }, 'every forward delivery dead');
      const sent = destination.requests.length;
      const oldAdmin = await signedIn(first, ADMIN_A);
      const viewer = await signedIn(first, VIEWER);
      // The session records which token opened it, never the token.
      const stored = JSON.stringify(await mode.query('SELECT * FROM console_sessions'));
      expect(stored).not.toContain(ADMIN_A);
      expect(stored).not.toContain(VIEWER);
      await mode.stop(first);

      // ADMIN_TOKEN rotated: the start deletes the admin session before any request; the viewer's stays.
      const second = await mode.start({ ...base, ADMIN_TOKEN: ADMIN_B });
      expect(await mode.query('SELECT role FROM console_sessions')).toEqual([{ role: 'viewer' }]);
      expect(await signedOut(at(second, oldAdmin))).toBe(true);
      expect((await at(second, viewer).get('/console')).status).toBe(200);
      const newAdmin = await signedIn(second, ADMIN_B);
      const csrf = await newAdmin.csrf('/console/dead');
      await mode.stop(second);

      // ADMIN_TOKEN removed (VIEWER_TOKEN only): the admin session cannot replay, nothing is sent.
      const third = await mode.start(base);
      const replay = await at(third, newAdmin).post(`/console/forwards/${dead?.id}/replay`, { _csrf: csrf });
      expect(replay.status).toBe(303);
      expect(replay.location).toMatch(/^\/console\/login/);
      expect(await mode.query(`SELECT status FROM forward_deliveries WHERE id = ${dead?.id}`)).toEqual([
        { status: 'dead' },
      ]);
      expect((await audit(mode)).filter((a) => a.action === 'forward_replay')).toEqual([]);
      expect(destination.requests.length).toBe(sent);
      expect(await mode.query('SELECT role FROM console_sessions')).toEqual([{ role: 'viewer' }]);
    } finally {
      await destination.close();
    }
  });

  it("ends every session by hand: the end-sessions command, and the admins' button (a viewer is refused)", async () => {
    const env = { ADMIN_TOKEN: ADMIN_A, VIEWER_TOKEN: VIEWER };
    const r = await mode.start(env);
    const admin = await signedIn(r, ADMIN_A);
    const viewer = await signedIn(r, VIEWER);
    const ended = await runCliAsync(['end-sessions'], { ...mode.cliEnv(), ...env });
    expect(ended.stderr).toBe('');
    expect(ended.stdout).toMatch(/: ended 2 console sessions; everyone must sign in again\n$/);
    expect(await signedOut(admin)).toBe(true);
    expect(await signedOut(viewer)).toBe(true);

    await admin.signIn(ADMIN_A);
    await viewer.signIn(VIEWER);
    // A viewer's page has no button, and a forged form is refused.
    expect((await viewer.get('/console/audit')).text).not.toContain('End all sessions');
    const refused = await viewer.post('/console/sessions/end', { _csrf: await viewer.csrf() });
    expect(refused.status).toBe(403);
    expect((await viewer.get('/console')).status).toBe(200);
    const page = await admin.get('/console/audit');
    expect(page.text).toContain('<button type="submit">End all sessions</button>');
    const done = await admin.post('/console/sessions/end', { _csrf: await admin.csrf() });
    expect(done.status).toBe(303);
    expect(done.location).toBe('/console/login');
    expect(done.headers.get('set-cookie')).toContain('Max-Age=0');
    expect(await signedOut(viewer)).toBe(true);
    expect(await mode.query('SELECT * FROM console_sessions')).toEqual([]);
    const lines = (await audit(mode)).filter((a) => a.action === 'end_sessions' || a.reason === 'role');
    expect(lines).toEqual([
      expect.objectContaining({
        action: 'end_sessions',
        role: null,
        target: 'command',
        detail: '{"ended":2}',
      }),
      expect.objectContaining({
        action: 'refused',
        role: 'viewer',
        reason: 'role',
        target: 'POST /console/sessions/end',
      }),
      expect.objectContaining({
        action: 'end_sessions',
        role: 'admin',
        target: 'console',
        detail: '{"ended":2}',
      }),
    ]);
  });

  it(`the sign-in throttle holds ${mode.name === 'SQLite' ? 'across a restart' : 'across two replicas'}`, async () => {
    const env = { ADMIN_TOKEN: ADMIN_A };
    const first = await mode.start(env);
    const c = new ConsoleClient(first.url);
    for (let i = 0; i < 5; i++)
      expect((await c.post('/console/login', { token: `wrong-${i}` })).status).toBe(401);
    // SQLite: the same file after a restart; cluster: another replica, the first still running.
    if (mode === sqlite) await mode.stop(first);
    const second = await mode.start(env);
    const throttled = await new ConsoleClient(second.url).post('/console/login', { token: ADMIN_A });
    expect(throttled.status).toBe(429);
    expect(throttled.headers.get('set-cookie')).toBeNull();
    expect(await mode.query('SELECT address, failures FROM console_sign_in_failures')).toEqual([
      { address: '127.0.0.1', failures: 5 },
    ]);
  });

  it('audits refused attempts (CSRF, Origin, role, throttled), aggregated, never the token', async () => {
    const r = await mode.start({ ADMIN_TOKEN: ADMIN_A, VIEWER_TOKEN: VIEWER });
    const admin = await signedIn(r, ADMIN_A);
    const csrf = await admin.csrf();
    for (let i = 0; i < 3; i++) expect((await admin.post('/console/dead/replay', {})).status).toBe(403);
    expect((await admin.post('/console/dead/replay', { _csrf: 'forged' })).status).toBe(403);
    const foreign = { origin: 'https://evil.example' };
    expect((await admin.post('/console/dead/replay', { _csrf: csrf }, foreign)).status).toBe(403);
    expect((await new ConsoleClient(r.url).post('/console/login', { token: ADMIN_A }, foreign)).status).toBe(
      403,
    );
    const viewer = await signedIn(r, VIEWER);
    expect((await viewer.post('/console/dead/replay', { _csrf: await viewer.csrf() })).status).toBe(403);
    const stranger = new ConsoleClient(r.url);
    for (let i = 0; i < 5; i++) await stranger.post('/console/login', { token: `wrong-${i}` });
    for (let i = 0; i < 2; i++)
      expect((await stranger.post('/console/login', { token: ADMIN_A })).status).toBe(429);

    const lines = await audit(mode);
    const refused = lines.filter((a) => a.outcome === 'refused');
    const route = 'POST /console/dead/replay';
    expect(refused).toEqual([
      expect.objectContaining({ action: 'refused', role: 'admin', reason: 'csrf', target: route, times: 4 }),
      expect.objectContaining({ role: 'admin', reason: 'origin', target: route, times: 1 }),
      expect.objectContaining({ role: null, session: null, reason: 'origin', target: 'POST /console/login' }),
      expect.objectContaining({ role: 'viewer', reason: 'role', target: route, times: 1 }),
      expect.objectContaining({
        role: null,
        reason: 'throttled',
        target: 'POST /console/login',
        times: 2,
        ip: '127.0.0.1',
      }),
    ]);
    expect(refused[0]?.session).toMatch(/^[0-9a-f]{8}$/);
    expect(JSON.stringify(lines)).not.toMatch(/token-|forged/);
    // A path is the requester's text: a CPF in it is masked.
    expect((await admin.post('/console/events/12345678909/replay', {})).status).toBe(403);
    expect((await audit(mode)).at(-1)).toMatchObject({
      reason: 'csrf',
      target: 'POST /console/events/***.456.789-**/replay',
    });
    const page = await admin.get('/console/audit');
    expect(page.text).toContain('refused: csrf<br>4 times, the last');
    expect(page.text).toContain('<td>anonymous</td>');
  });

  it(`adds at most ${REFUSAL_ROWS_PER_WINDOW} rows of refusals an hour, then one per reason`, async () => {
    const r = await mode.start({ ADMIN_TOKEN: ADMIN_A });
    await mode.stop(r);
    const refusal = (i: number, at: string): NewRefusal => ({
      at,
      role: null,
      session: null,
      route: `POST /console/x${i}`,
      reason: 'throttled',
      ip: `10.0.${Math.floor(i / 256)}.${i % 256}`,
    });
    for (let i = 0; i < REFUSAL_ROWS_PER_WINDOW + 50; i++)
      await mode.refuse(refusal(i, '2026-11-25T10:00:00.000Z'));
    await mode.refuse(refusal(0, '2026-11-25T10:59:59.000Z'));
    // The next hour starts afresh.
    await mode.refuse(refusal(1, '2026-11-25T11:00:00.000Z'));
    const counted = await mode.query<{ target: string; ip: string | null; times: number }>(
      "SELECT target, ip, times FROM console_audit WHERE outcome = 'refused' ORDER BY id",
    );
    expect(counted).toHaveLength(REFUSAL_ROWS_PER_WINDOW + 2);
    expect(counted[0]).toEqual({ target: 'POST /console/x0', ip: '10.0.0.0', times: 2 });
    expect(counted[REFUSAL_ROWS_PER_WINDOW]).toEqual({ target: '*', ip: null, times: 50 });
    expect(counted[REFUSAL_ROWS_PER_WINDOW + 1]).toEqual({
      target: 'POST /console/x1',
      ip: '10.0.0.1',
      times: 1,
    });
  });
});

describe('cluster mode: every replica at once', () => {
  jest.setTimeout(120_000);

  it('a replica started with a rotated token ends the old sessions for the replicas still running with it', async () => {
    const a = await cluster.start({ ADMIN_TOKEN: ADMIN_A });
    const b = await cluster.start({ ADMIN_TOKEN: ADMIN_A });
    const c = await signedIn(a, ADMIN_A);
    expect((await at(b, c).get('/console')).status).toBe(200);
    const rotated = await cluster.start({ ADMIN_TOKEN: ADMIN_B });
    // b still has the old token configured, but the session is gone from the shared log.
    expect(await signedOut(at(b, c))).toBe(true);
    expect(await signedOut(c)).toBe(true);
    // During a rolling rotation: a session the old token opens at a replica not yet restarted is
    // refused at the rotated one (and its row deleted, for every replica).
    const late = await signedIn(a, ADMIN_A);
    expect(await signedOut(at(rotated, late))).toBe(true);
    expect(await cluster.query('SELECT * FROM console_sessions')).toEqual([]);
    expect(await signedOut(late)).toBe(true);
  });
});
