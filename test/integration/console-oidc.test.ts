import { freePort } from '../../rigs/harness';
import { CookieJar, step, toCallback } from '../helpers/oidc-http';
import { oidcEnv, type TestProvider, testProvider } from '../helpers/oidc-provider';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Issue 34 at the HTTP level, against a real OpenID Provider (oidc-provider on loopback): a sign-in
 * driven step by step, and the attacks the real provider lets a client try — a forged `state`, a
 * callback without its pending sign-in (login CSRF, or a replayed `state`), a tampered pending
 * cookie, a replayed `code`. Each is refused (403), audited with its reason, and opens no session.
 * The attacks a real provider cannot produce (bad ID tokens) are console-oidc-hostile.test.ts's.
 */

let provider: TestProvider;
let r: TestReceiver;
let url: string;

beforeAll(async () => {
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  provider = await testProvider({ publicUrls: [url] });
  r = await startTestReceiver({ env: { ...oidcEnv(provider, url), PORT: String(port) } });
}, 60_000);
afterAll(async () => {
  await r?.stop();
  await provider?.stop();
});

interface AuditLine {
  action: string;
  role: string | null;
  person: string | null;
  detail: string | null;
}

function audit(): AuditLine[] {
  return r.store.db
    .prepare('SELECT action, role, person, detail FROM console_audit ORDER BY id')
    .all() as AuditLine[];
}

function sessions(): number {
  return (r.store.db.prepare('SELECT count(*) AS n FROM console_sessions').get() as { n: number }).n;
}

/** The newest audit row, after the request that wrote it was answered. */
function lastAudit(): AuditLine {
  return audit().at(-1) as AuditLine;
}

it('signs maria in: a session for her as admin, audited with her e-mail, no token stored', async () => {
  const jar = new CookieJar();
  const callback = await toCallback(url, 'maria', jar);
  const done = await step(jar, callback);
  expect(done.status).toBe(200);
  expect(done.text).toContain('http-equiv="refresh"');
  expect(jar.get(url, 'consig_console')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  expect(jar.get(url, 'consig_oidc')).toBeUndefined();
  const row = r.store.db.prepare('SELECT * FROM console_sessions').get() as Record<string, unknown>;
  expect(row).toMatchObject({
    role: 'admin',
    subject: 'maria',
    name: 'Maria Souza',
    email: 'maria@lender.example',
  });
  // Nothing shaped like a JWT anywhere in the row or the logs.
  expect(JSON.stringify(row)).not.toMatch(/eyJ[A-Za-z0-9_-]+\./);
  expect(r.logs.raw).not.toMatch(/eyJ[A-Za-z0-9_-]+\./);
  expect(lastAudit()).toMatchObject({ action: 'sign_in', role: 'admin', person: 'maria@lender.example' });
  const page = await step(jar, `${url}/console`);
  expect(page.status).toBe(200);
  expect(page.text).toContain('Signed in: Maria Souza (admin)');
});

describe('attacks, each refused, audited, no session', () => {
  const before = { sessions: 0 };
  beforeEach(async () => {
    await r.store.db.exec('DELETE FROM console_sessions; DELETE FROM console_sign_in_failures');
    before.sessions = sessions();
  });

  async function expectRefused(
    answer: { status: number; text: string },
    jar: CookieJar,
    reason: string | RegExp,
  ) {
    expect(answer.status).toBe(403);
    expect(answer.text).toContain('Sign-in refused');
    expect(jar.get(url, 'consig_console')).toBeUndefined();
    expect(sessions()).toBe(0);
    const row = lastAudit();
    expect(row.action).toBe('sign_in_failed');
    expect(JSON.parse(row.detail ?? '{}').reason).toMatch(reason);
  }

  it('a forged state: the provider answer with another state than the one sealed in the cookie', async () => {
    const jar = new CookieJar();
    const callback = new URL(await toCallback(url, 'maria', jar));
    callback.searchParams.set('state', 'forged-by-mallory');
    await expectRefused(await step(jar, callback.href), jar, /OAUTH_INVALID_RESPONSE|state/i);
  });

  it("a callback in a browser that started no sign-in (login CSRF: mallory's own code)", async () => {
    const callback = await toCallback(url, 'ana', new CookieJar());
    const victim = new CookieJar();
    await expectRefused(await step(victim, callback), victim, 'pending_missing');
  });

  it('a replayed state: the same callback again, its pending sign-in already used', async () => {
    const jar = new CookieJar();
    const callback = await toCallback(url, 'maria', jar);
    const sealed = jar.get(url, 'consig_oidc') as string;
    expect((await step(jar, callback)).status).toBe(200);
    await r.store.db.exec('DELETE FROM console_sessions');
    const replay = new CookieJar();
    await expectRefused(await step(replay, callback), replay, 'pending_missing');
    // The same with the stolen pending cookie too: the provider refuses the code a second time.
    replay.set(url, 'consig_oidc', sealed);
    await expectRefused(await step(replay, callback), replay, 'invalid_grant');
  });

  it('a replayed code with its own pending sign-in, after the code was used once', async () => {
    const jar = new CookieJar();
    const callback = await toCallback(url, 'joao', jar);
    const sealed = jar.get(url, 'consig_oidc') as string;
    const first = await step(jar, callback);
    expect(first.status).toBe(200);
    await r.store.db.exec('DELETE FROM console_sessions');
    const thief = new CookieJar();
    thief.set(url, 'consig_oidc', sealed);
    await expectRefused(await step(thief, callback), thief, 'invalid_grant');
  });

  it('a tampered pending cookie (one byte changed): its seal does not open', async () => {
    const jar = new CookieJar();
    const callback = await toCallback(url, 'maria', jar);
    const sealed = jar.get(url, 'consig_oidc') as string;
    const flipped = `${sealed.slice(0, 20)}${sealed[20] === 'A' ? 'B' : 'A'}${sealed.slice(21)}`;
    jar.set(url, 'consig_oidc', flipped);
    await expectRefused(await step(jar, callback), jar, 'pending_tampered');
  });

  it('an error answer from the provider (access_denied)', async () => {
    const jar = new CookieJar();
    const started = await step(jar, `${url}/console/oidc/start`);
    const state = new URL(started.location as string).searchParams.get('state') as string;
    const iss = encodeURIComponent(provider.issuer);
    const answer = await step(
      jar,
      `${url}/console/oidc/callback?error=access_denied&state=${state}&iss=${iss}`,
    );
    await expectRefused(answer, jar, 'access_denied');
  });
});

it('refuses ana (in neither group) with a page that says why, audited with her e-mail, no session', async () => {
  await r.store.db.exec('DELETE FROM console_sessions');
  const jar = new CookieJar();
  const answer = await step(jar, await toCallback(url, 'ana', jar));
  expect(answer.status).toBe(403);
  expect(answer.text).toContain('ana@lender.example');
  expect(answer.text).toContain('neither of the console&#39;s groups');
  expect(jar.get(url, 'consig_console')).toBeUndefined();
  expect(sessions()).toBe(0);
  const row = lastAudit();
  expect(row).toMatchObject({ action: 'sign_in_refused', person: 'ana@lender.example', role: null });
  expect(JSON.parse(row.detail ?? '{}')).toEqual({ reason: 'no_group', groups: ['staff'] });
});

it('gives admin where both groups match, and names a person without e-mail by subject', async () => {
  const both = new CookieJar();
  expect((await step(both, await toCallback(url, 'both', both))).status).toBe(200);
  expect(lastAudit()).toMatchObject({ action: 'sign_in', role: 'admin', person: 'bia@lender.example' });
  const nomail = new CookieJar();
  expect((await step(nomail, await toCallback(url, 'nomail', nomail))).status).toBe(200);
  expect(lastAudit()).toMatchObject({ action: 'sign_in', role: 'viewer', person: 'nomail' });
});

it('keeps the tokens out of the console while no break-glass is set', async () => {
  const jar = new CookieJar();
  const page = await step(jar, `${url}/console/login`);
  expect(page.text).toContain('Sign in with your identity provider');
  expect(page.text).not.toContain('name="token"');
});

it('throttles forged callbacks from one address like wrong tokens: 429 after five, counted on one row', async () => {
  r.store.db.exec('DELETE FROM console_sign_in_failures; DELETE FROM console_audit');
  const forged = `${url}/console/oidc/callback?code=x&state=y`;
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) statuses.push((await step(new CookieJar(), forged)).status);
  expect(statuses).toEqual([403, 403, 403, 403, 403, 429, 429, 429]);
  const rows = audit();
  expect(rows.filter((a) => a.action === 'sign_in_failed')).toHaveLength(5);
  const throttled = r.store.db
    .prepare("SELECT times FROM console_audit WHERE action = 'refused' AND reason = 'throttled'")
    .all();
  expect(throttled).toEqual([{ times: 3 }]);
});

it("keeps the CSRF and Origin checks on a person's POSTs: refused, audited with them, nothing ended", async () => {
  r.store.db.exec('DELETE FROM console_sign_in_failures');
  const jar = new CookieJar();
  expect((await step(jar, await toCallback(url, 'maria', jar))).status).toBe(200);
  const page = await step(jar, `${url}/console/audit`);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1] as string;
  const end = (body: string, origin?: string) =>
    fetch(`${url}/console/sessions/end`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        cookie: jar.header(url),
        'content-type': 'application/x-www-form-urlencoded',
        ...(origin === undefined ? {} : { origin }),
      },
      body,
    });
  expect((await end('')).status).toBe(403);
  expect(lastAudit()).toMatchObject({ action: 'refused', person: 'maria@lender.example' });
  expect((await end(`_csrf=${encodeURIComponent(csrf)}`, 'https://evil.example')).status).toBe(403);
  const refusals = r.store.db
    .prepare("SELECT reason, person FROM console_audit WHERE action = 'refused' ORDER BY id DESC LIMIT 2")
    .all();
  expect(refusals).toEqual([
    { reason: 'origin', person: 'maria@lender.example' },
    { reason: 'csrf', person: 'maria@lender.example' },
  ]);
  expect(sessions()).toBeGreaterThan(0);
  // The same request with its token and from this origin: every session ends, audited with her.
  expect((await end(`_csrf=${encodeURIComponent(csrf)}`, url)).status).toBe(303);
  expect(sessions()).toBe(0);
  expect(lastAudit()).toMatchObject({ action: 'end_sessions', person: 'maria@lender.example' });
});
