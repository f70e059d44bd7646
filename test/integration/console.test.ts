import { startTestApp } from '../helpers/app';
import { ConsoleClient, csrfOf } from '../helpers/console-client';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * `/console` on the real receiver (store, writer, pipeline, HTTP server) with a temp SQLite file,
 * signed deliveries sent over HTTP, and a browser-like client: access, sessions, CSRF, roles,
 * replays and the audit trail.
 */

const ADMIN = 'admin-token-0123456789';
const VIEWER = 'viewer-token-0123456789';

let r: TestReceiver;
/** proposta.cancelada fails while this is true: that is how dead letters are made. */
let failing = true;

beforeAll(async () => {
  r = await startTestReceiver({
    env: { ADMIN_TOKEN: ADMIN, VIEWER_TOKEN: VIEWER, HANDLER_MAX_ATTEMPTS: '1' },
    configureHandlers: (router) =>
      router.on('proposta.cancelada', () => {
        if (failing) throw new Error('cancellation handler down (on purpose)');
      }),
  });
});
afterAll(async () => {
  await r.stop();
});

const statusOf = (id: number) =>
  (r.store.db.prepare('SELECT status FROM events WHERE id = ?').get(id) as { status: string }).status;
const auditRows = (action: string) =>
  r.store.db.prepare('SELECT * FROM console_audit WHERE action = ? ORDER BY id').all(action) as Record<
    string,
    unknown
  >[];

/** Sends deliveries of `evento` for new proposals and waits until each is dead. */
async function deadEvents(n: number, nu0: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await r.send(delivery('proposta.cancelada', { nu_proposta: nu0 + i }));
    ids.push(res.body.event_id as number);
  }
  await eventually(() => ids.every((id) => statusOf(id) === 'dead'), 'dead letters');
  return ids;
}

async function signedIn(token: string): Promise<ConsoleClient> {
  const c = new ConsoleClient(r.url);
  await c.signIn(token);
  return c;
}

describe('access', () => {
  it('answers 404 on every console path when neither token is set', async () => {
    const app = await startTestApp({});
    try {
      for (const [method, path] of [
        ['GET', '/console'],
        ['GET', '/console/login'],
        ['POST', '/console/login'],
        ['GET', '/console/assets/console.css'],
        ['GET', '/console/events/1'],
      ] as const) {
        expect((await fetch(`${app.url}${path}`, { method })).status).toBe(404);
      }
    } finally {
      await app.close();
    }
  });

  it('signs in with the admin token: a 303 to the overview and a strict session cookie', async () => {
    const c = new ConsoleClient(r.url);
    const login = await c.get('/console/login');
    expect(login.status).toBe(200);
    expect(login.text).toContain('<form method="post" action="/console/login">');
    expect(login.text).toContain(
      '<label for="token">Token</label><input id="token" name="token" type="password"',
    );
    expect(login.text).toContain('<button type="submit">Sign in</button>');
    const res = await c.signIn(ADMIN);
    expect(res.location).toBe('/console');
    const cookie = res.headers.get('set-cookie') ?? '';
    expect(cookie).toMatch(/^consig_console=[A-Za-z0-9_-]{43}; /);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/console');
    expect(cookie).toContain('Max-Age=28800');
    expect(cookie).toMatch(/Expires=\w{3}, \d{2} \w{3} \d{4}/);
    expect(cookie).not.toContain('Secure');
    const overview = await c.get('/console');
    expect(overview.status).toBe(200);
    expect(overview.text).toContain('<h1>Overview</h1>');
    expect(overview.text).toContain('Signed in: admin');
    expect(overview.text).toMatch(
      /<form method="post" action="\/console\/logout"><input type="hidden" name="_csrf" value="[^"]+"><button type="submit">Sign out<\/button>/,
    );
    // The session is stored hashed: the cookie's id is nowhere in the database.
    const id = (c.cookie ?? '').split('=')[1] as string;
    const rows = r.store.db.prepare('SELECT * FROM console_sessions').all() as {
      id_hash: string;
      role: string;
    }[];
    expect(rows.some((row) => row.id_hash === id)).toBe(false);
    expect(rows.some((row) => row.role === 'admin')).toBe(true);
    const signIns = auditRows('sign_in');
    expect(signIns.at(-1)).toMatchObject({ role: 'admin', action: 'sign_in' });
    expect(String(signIns.at(-1)?.session)).toMatch(/^[0-9a-f]{8}$/);
  });

  it('with VIEWER_TOKEN alone, the console is read-only and /admin stays 404', async () => {
    const viewerOnly = await startTestApp({ VIEWER_TOKEN: VIEWER });
    try {
      const c = new ConsoleClient(viewerOnly.url);
      await c.signIn(VIEWER);
      expect((await c.get('/console')).text).toContain('viewer (read only)');
      expect((await c.post('/console/login', { token: ADMIN })).status).toBe(401);
      expect(
        (await fetch(`${viewerOnly.url}/admin/events`, { headers: { authorization: `Bearer ${VIEWER}` } }))
          .status,
      ).toBe(404);
    } finally {
      await viewerOnly.close();
    }
  });

  it('signs in with the viewer token, read-only', async () => {
    const c = await signedIn(VIEWER);
    const page = await c.get('/console');
    expect(page.status).toBe(200);
    expect(page.text).toContain('viewer (read only)');
  });

  it('refuses a wrong token with 401 and no detail, records it, and throttles an address after 5 failures', async () => {
    // Its own receiver: the throttle would refuse the loopback address for the other tests.
    const other = await startTestReceiver({ env: { ADMIN_TOKEN: ADMIN } });
    try {
      const c = new ConsoleClient(other.url);
      const wrong = await c.post('/console/login', { token: 'not-the-token' });
      expect(wrong.status).toBe(401);
      expect(wrong.text).toContain('That token does not sign in.');
      expect(wrong.raw).not.toContain(ADMIN);
      expect(wrong.headers.get('set-cookie')).toBeNull();
      const failed = other.store.db
        .prepare("SELECT * FROM console_audit WHERE action = 'sign_in_failed'")
        .all();
      expect(failed).toEqual([
        expect.objectContaining({ role: null, session: null, target: null, ip: '127.0.0.1' }),
      ]);
      for (let i = 0; i < 4; i++)
        expect((await c.post('/console/login', { token: `wrong-${i}` })).status).toBe(401);
      const throttled = await c.post('/console/login', { token: ADMIN });
      expect(throttled.status).toBe(429);
      expect(Number(throttled.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(throttled.text).toContain('Too many wrong tokens');
      expect(throttled.headers.get('set-cookie')).toBeNull();
    } finally {
      await other.stop();
    }
  });

  it('redirects to the sign-in page without a session, with an unknown one, and with an expired one', async () => {
    const anonymous = new ConsoleClient(r.url);
    const res = await anonymous.get('/console/events?status=dead');
    expect(res.status).toBe(303);
    expect(res.location).toBe(`/console/login?next=${encodeURIComponent('/console/events?status=dead')}`);
    anonymous.cookie = `consig_console=${'A'.repeat(43)}`;
    expect((await anonymous.get('/console')).location).toMatch(/^\/console\/login/);

    const c = await signedIn(VIEWER);
    expect((await c.get('/console')).status).toBe(200);
    r.store.db.prepare("UPDATE console_sessions SET expires_at = '2000-01-01T00:00:00.000Z'").run();
    const expired = await c.get('/console');
    expect(expired.status).toBe(303);
    expect(expired.location).toMatch(/^\/console\/login/);
    expect(expired.headers.get('set-cookie')).toContain('Max-Age=0');
  });

  it('goes back to the page asked for after signing in', async () => {
    const c = new ConsoleClient(r.url);
    const res = await c.post(`/console/login?next=${encodeURIComponent('/console/audit')}`, {
      token: VIEWER,
    });
    expect(res.location).toBe('/console/audit');
    // The sign-in page a redirect leads to carries the page asked for in its form.
    const login = await new ConsoleClient(r.url).get(
      `/console/login?next=${encodeURIComponent('/console/dead?evento=x')}`,
    );
    expect(login.text).toContain('<input type="hidden" name="next" value="/console/dead?evento=x">');
    const viaForm = await new ConsoleClient(r.url).post('/console/login', {
      token: VIEWER,
      next: '/console/dead?evento=x',
    });
    expect(viaForm.location).toBe('/console/dead?evento=x');
    const evil = await new ConsoleClient(r.url).post(
      `/console/login?next=${encodeURIComponent('https://evil.example/')}`,
      { token: VIEWER },
    );
    expect(evil.location).toBe('/console');
  });

  it('keeps a session across a restart of the receiver (sessions are in SQLite)', async () => {
    const dir = tempDir();
    try {
      const first = await startTestReceiver({ dir: dir.dir, env: { ADMIN_TOKEN: ADMIN } });
      const c = new ConsoleClient(first.url);
      await c.signIn(ADMIN);
      await first.stop();
      const second = await startTestReceiver({ dir: dir.dir, env: { ADMIN_TOKEN: ADMIN } });
      try {
        const again = new ConsoleClient(second.url);
        again.cookie = c.cookie;
        expect((await again.get('/console')).status).toBe(200);
      } finally {
        await second.stop();
      }
    } finally {
      dir.cleanup();
    }
  });

  it('signs out: the session row is gone and the cookie cleared', async () => {
    const c = await signedIn(ADMIN);
    const csrf = await c.csrf();
    const out = await c.post('/console/logout', { _csrf: csrf });
    expect(out.status).toBe(303);
    expect(out.location).toBe('/console/login');
    expect(out.headers.get('set-cookie')).toContain('Max-Age=0');
    expect(auditRows('sign_out').length).toBeGreaterThan(0);
    expect((await c.get('/console')).status).toBe(303);
  });

  it('sends a strict Content-Security-Policy and no-store on every page', async () => {
    const c = await signedIn(VIEWER);
    for (const path of ['/console', '/console/login', '/console/assets/console.css']) {
      const res = await c.get(path);
      expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
      expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      expect(res.headers.get('cache-control')).toBe('no-store');
    }
    expect((await c.get('/console/assets/console.css')).headers.get('content-type')).toMatch(/^text\/css/);
  });
});

describe('Secure cookie', () => {
  it('is Secure behind a trusted proxy that says https, and not when the proxy is not trusted', async () => {
    const trusted = await startTestReceiver({ env: { ADMIN_TOKEN: ADMIN, TRUST_PROXY: '1' } });
    try {
      const c = new ConsoleClient(trusted.url);
      const tls = await c.post('/console/login', { token: ADMIN }, { 'x-forwarded-proto': 'https' });
      expect(tls.headers.get('set-cookie')).toMatch(/; Secure$/);
      const plain = await new ConsoleClient(trusted.url).post('/console/login', { token: ADMIN });
      expect(plain.headers.get('set-cookie')).not.toContain('Secure');
    } finally {
      await trusted.stop();
    }
    const untrusted = await new ConsoleClient(r.url).post(
      '/console/login',
      { token: ADMIN },
      { 'x-forwarded-proto': 'https' },
    );
    expect(untrusted.headers.get('set-cookie')).not.toContain('Secure');
  });
});

describe('actions', () => {
  it('refuses a viewer replay with 403, shows a viewer no Replay button, and changes nothing', async () => {
    const [id] = (await deadEvents(1, 700100)) as [number];
    const c = await signedIn(VIEWER);
    const dead = await c.get('/console/dead');
    expect(dead.text).toContain(`/console/events/${id}`);
    expect(dead.text).not.toContain('>Replay</button>');
    const res = await c.post(`/console/events/${id}/replay`, { _csrf: await c.csrf() });
    expect(res.status).toBe(403);
    expect(res.text).toContain('needs the admin token');
    expect(statusOf(id)).toBe('dead');
    expect((await c.get('/console/dead/replay')).status).toBe(403);
  });

  it('refuses a POST with a missing or wrong CSRF token, or from another site, and changes nothing', async () => {
    const [id] = (await deadEvents(1, 700200)) as [number];
    const c = await signedIn(ADMIN);
    const csrf = await c.csrf();
    for (const [form, headers] of [
      [{}, {}],
      [{ _csrf: 'x'.repeat(43) }, {}],
      [{ _csrf: csrf }, { origin: 'https://evil.example' }],
      [{ _csrf: csrf }, { 'sec-fetch-site': 'cross-site' }],
    ] as [Record<string, string>, Record<string, string>][]) {
      const res = await c.post(`/console/events/${id}/replay`, form, headers);
      expect(res.status).toBe(403);
      expect(res.text).toContain('CSRF token missing or invalid');
      expect(statusOf(id)).toBe('dead');
    }
    // Another session's token is not this one's.
    const other = await signedIn(ADMIN);
    expect((await c.post(`/console/events/${id}/replay`, { _csrf: await other.csrf() })).status).toBe(403);
    expect(statusOf(id)).toBe('dead');
  });

  it('replays one dead letter: it becomes pending, then done, and the audit says who', async () => {
    const [id] = (await deadEvents(1, 700300)) as [number];
    const c = await signedIn(ADMIN);
    const page = await c.get(`/console/events/${id}`);
    expect(page.text).toContain(`<h1>Event ${id}</h1>`);
    expect(page.text).toContain('<span class="status status-dead">dead</span>');
    failing = false;
    try {
      const res = await c.post(`/console/events/${id}/replay`, { _csrf: csrfOf(page.text) });
      expect(res.status).toBe(303);
      expect(res.location).toBe(`/console/events/${id}?replayed=1`);
      await eventually(() => statusOf(id) === 'done', 'replayed event done');
      const after = await c.get(res.location as string);
      expect(after.text).toContain('<span class="status status-done">done</span>');
      expect(after.text).toContain('Queued for replay');
    } finally {
      failing = true;
    }
    expect(auditRows('replay_event').at(-1)).toMatchObject({ role: 'admin', target: `event:${id}` });
  });

  it('replays in bulk by the current filter after a page that says how many', async () => {
    const ids = await deadEvents(3, 700400);
    const c = await signedIn(ADMIN);
    const nu = '700401';
    const confirm = await c.get(`/console/dead/replay?nu_proposta=${nu}`);
    expect(confirm.status).toBe(200);
    expect(confirm.text).toContain('<h1>Replay 1 event?</h1>');
    const all = await c.get('/console/dead/replay?evento=proposta.cancelada');
    const count = Number(/<h1>Replay (\d+) events\?<\/h1>/.exec(all.text)?.[1]);
    expect(count).toBeGreaterThanOrEqual(3);
    expect(all.text).toContain('<button type="submit">Confirm replay</button>');
    expect(all.text).toContain('<input type="hidden" name="evento" value="proposta.cancelada">');
    // Nothing changed by showing the count.
    expect(ids.map(statusOf)).toEqual(['dead', 'dead', 'dead']);
    failing = false;
    try {
      const res = await c.post('/console/dead/replay', { _csrf: csrfOf(confirm.text), nu_proposta: nu });
      expect(res.status).toBe(303);
      expect(res.location).toBe('/console/dead?replayed=1');
      await eventually(() => statusOf(ids[1] as number) === 'done', 'the one matching is done');
    } finally {
      failing = true;
    }
    expect(statusOf(ids[0] as number)).toBe('dead');
    expect(statusOf(ids[2] as number)).toBe('dead');
    expect(auditRows('replay_bulk').at(-1)).toMatchObject({
      role: 'admin',
      target: 'events:dead',
      detail: JSON.stringify({ filter: { nu_proposta: nu }, count: 1 }),
    });
    const dead = await c.get('/console/dead?replayed=1');
    expect(dead.text).toContain('1 queued for replay.');
  });

  it('a refused request whose path names a CPF is audited with the CPF masked', async () => {
    const c = await signedIn(ADMIN);
    const res = await c.post('/console/proposals/12345678909/x', { _csrf: 'not-the-token' });
    expect(res.status).toBe(403);
    const target = String(auditRows('refused').at(-1)?.target);
    expect(target).toBe('POST /console/proposals/***.456.789-**/x');
  });

  it('never stores a CPF in full in the audit, even when a filter names one', async () => {
    await deadEvents(1, 700500);
    const c = await signedIn(ADMIN);
    const json = JSON.stringify({ dados: { nu_cpf: '12345678909', nu_proposta: 700500 } });
    const confirm = await c.get(`/console/dead/replay?json=${encodeURIComponent(json)}`);
    expect(confirm.text).toContain('<h1>Replay 1 event?</h1>');
    const res = await c.post('/console/dead/replay', { _csrf: csrfOf(confirm.text), json });
    expect(res.location).toBe('/console/dead?replayed=1');
    const detail = String(auditRows('replay_bulk').at(-1)?.detail);
    expect(detail).toContain('***.456.789-**');
    expect(detail).not.toContain('12345678909');
  });
});
