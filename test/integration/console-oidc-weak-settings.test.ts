import { createDecipheriv, hkdfSync } from 'node:crypto';
import { freePort } from '../../rigs/harness';
import { CookieJar, step, toCallback } from '../helpers/oidc-http';
import { oidcEnv, type TestProvider, testProvider } from '../helpers/oidc-provider';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Issue 44: the console's OpenID Connect sign-in holds when its settings are weak. Each attack of
 * the issue, against a real OpenID Provider (oidc-provider on loopback): a short client secret, an
 * e-mail the provider never verified claiming an admin's address, an admin's session kept after
 * OIDC_ADMIN_GROUPS changed and the receiver restarted, an https PUBLIC_URL behind a TLS proxy the
 * receiver does not trust, a sibling subdomain planting its own cookies, and an account in no group
 * resetting the sign-in throttle.
 */

/** PUBLIC_URL of the receiver behind a TLS proxy: the provider sends browsers back there. */
const HTTPS_PUBLIC = 'https://console.lender.example';

let provider: TestProvider;
/** The http-on-loopback receiver (a development setup): no `__Host-` possible. */
let plain: TestReceiver;
let plainUrl: string;
/** PUBLIC_URL https, reached over plain http from a proxy, TRUST_PROXY unset. */
let behindTls: TestReceiver;
let tlsUrl: string;
/** OIDC_GROUPS_CLAIM=email: maria's address is the admins' "group". */
let byEmail: TestReceiver;
let emailUrl: string;
const ports = { restart: 0, weak: 0 };

beforeAll(async () => {
  const [p1, p2, p3] = [await freePort(), await freePort(), await freePort()];
  ports.restart = await freePort();
  ports.weak = await freePort();
  plainUrl = `http://127.0.0.1:${p1}`;
  tlsUrl = `http://127.0.0.1:${p2}`;
  emailUrl = `http://127.0.0.1:${p3}`;
  provider = await testProvider({
    publicUrls: [plainUrl, HTTPS_PUBLIC, emailUrl, `http://127.0.0.1:${ports.restart}`],
  });
  plain = await startTestReceiver({ env: { ...oidcEnv(provider, plainUrl), PORT: String(p1) } });
  behindTls = await startTestReceiver({ env: { ...oidcEnv(provider, HTTPS_PUBLIC), PORT: String(p2) } });
  byEmail = await startTestReceiver({
    env: {
      ...oidcEnv(provider, emailUrl),
      PORT: String(p3),
      OIDC_GROUPS_CLAIM: 'email',
      OIDC_ADMIN_GROUPS: 'maria@lender.example',
      OIDC_VIEWER_GROUPS: 'joao@lender.example',
    },
  });
}, 60_000);
afterAll(async () => {
  await plain?.stop();
  await behindTls?.stop();
  await byEmail?.stop();
  await provider?.stop();
});

beforeEach(() => {
  for (const r of [plain, behindTls, byEmail])
    r.store.db.exec('DELETE FROM console_sessions; DELETE FROM console_sign_in_failures');
});

/** The pending sign-in cookie's value in `jar`, by whichever name this version gives it. */
function pendingIn(jar: CookieJar, url: string): string {
  return (jar.get(url, '__Host-consig_oidc') ?? jar.get(url, 'consig_oidc')) as string;
}

/** The session cookie's value in `jar`, by whichever name this version gives it. */
function sessionIn(jar: CookieJar, url: string): string | undefined {
  return jar.get(url, '__Host-consig_console') ?? jar.get(url, 'consig_console');
}

function newestAudit(r: TestReceiver): { action: string; role: string | null; person: string | null } {
  return r.store.db
    .prepare('SELECT action, role, person FROM console_audit ORDER BY id DESC LIMIT 1')
    .get() as { action: string; role: string | null; person: string | null };
}

function sessionRows(r: TestReceiver): Record<string, unknown>[] {
  return r.store.db.prepare('SELECT * FROM console_sessions').all() as Record<string, unknown>[];
}

/** Who the console says is signed in, from its header ('' when the answer is not a console page). */
async function signedInAs(url: string, cookie: string): Promise<{ status: number; who: string }> {
  const page = await step(new CookieJar(), `${url}/console`, { cookie });
  return { status: page.status, who: /Signed in: ([^<]+)/.exec(page.text)?.[1]?.trim() ?? '' };
}

/** A Set-Cookie line with its value elided (a failing assertion prints what it got: never a cookie). */
function withoutValue(setCookie: string): string {
  return setCookie.replace(/^([^=]+)=[^;]*/, (_all, name: string) => `${name}=…`);
}

describe('1. a short client secret', () => {
  /** The key the previous version sealed with: HKDF-SHA256 of the client secret. */
  const hkdfKey = (secret: string) =>
    Buffer.from(hkdfSync('sha256', secret, 'consig-receiver', 'console oidc pending sign-in', 32));

  /** The plaintext of a sealed pending sign-in under `key`, or undefined when it does not open. */
  function tryOpen(sealed: string, key: Buffer): string | undefined {
    const raw = Buffer.from(sealed, 'base64url');
    try {
      const d = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
      d.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }

  it('OIDC_CLIENT_SECRET=hunter2: the pending cookie anyone can get does not fall to a search of the secret', async () => {
    const weak = await startTestReceiver({
      env: { ...oidcEnv(provider, plainUrl), OIDC_CLIENT_SECRET: 'hunter2', PORT: String(ports.weak) },
    });
    try {
      const jar = new CookieJar();
      const started = await step(jar, `http://127.0.0.1:${ports.weak}/console/oidc/start`);
      expect(started.status).toBe(303);
      const sealed = pendingIn(jar, `http://127.0.0.1:${ports.weak}`);
      // An offline search over likely secrets (the tag confirms each guess): none opens it.
      const opened = ['password', 'secret', 'hunter2', 'changeme', 'consig']
        .map((guess) => ({ guess, text: tryOpen(sealed, hkdfKey(guess)) }))
        .filter((g) => g.text !== undefined)
        .map((g) => `${g.guess}: ${g.text?.slice(0, 9)}`);
      expect(opened).toEqual([]);
      // What seals it: 32 random bytes kept in the log, shared by every process on it.
      const row = weak.store.db
        .prepare("SELECT secret FROM console_keys WHERE name = 'oidc-pending'")
        .get() as { secret: string } | undefined;
      expect(Buffer.from(row?.secret ?? '', 'base64url')).toHaveLength(32);
      expect(tryOpen(sealed, Buffer.from(row?.secret ?? '', 'base64url'))?.startsWith('{"state":')).toBe(
        true,
      );
    } finally {
      await weak.stop();
    }
  });
});

describe('2. an e-mail the provider did not verify', () => {
  it("mallory's unverified copy of maria's address does not make her admin where the e-mail is the group", async () => {
    const jar = new CookieJar();
    const answer = await step(jar, await toCallback(emailUrl, 'mallory', jar));
    expect({
      status: answer.status,
      audit: newestAudit(byEmail),
      sessions: sessionRows(byEmail).length,
    }).toEqual({
      status: 403,
      audit: { action: 'sign_in_refused', role: null, person: 'mallory' },
      sessions: 0,
    });
    // maria, whose address the provider verified, is admin there.
    const maria = new CookieJar();
    expect((await step(maria, await toCallback(emailUrl, 'maria', maria))).status).toBe(200);
    expect(newestAudit(byEmail)).toEqual({
      action: 'sign_in',
      role: 'admin',
      person: 'maria@lender.example',
    });
  });

  it('nor does it name her in the audit or the session: she is her subject', async () => {
    const jar = new CookieJar();
    expect((await step(jar, await toCallback(plainUrl, 'mallory', jar))).status).toBe(200);
    expect(newestAudit(plain)).toEqual({ action: 'sign_in', role: 'viewer', person: 'mallory' });
    expect(sessionRows(plain)).toEqual([expect.objectContaining({ subject: 'mallory', email: null })]);
  });
});

/**
 * After a restart on the same port: fetch's pool may still hold a keep-alive connection to the
 * stopped server, which fails once ("other side closed"); one request that may fail drops it.
 */
async function settle(url: string): Promise<void> {
  await fetch(`${url}/healthz`).then(
    (r) => r.arrayBuffer(),
    () => undefined,
  );
}

describe('3. a role the settings no longer give', () => {
  it("ends an admin's session when a restart's OIDC_ADMIN_GROUPS no longer names her group", async () => {
    const { dir, cleanup } = tempDir();
    const url = `http://127.0.0.1:${ports.restart}`;
    const env = { ...oidcEnv(provider, url), PORT: String(ports.restart) };
    const run = (extra: Record<string, string> = {}) => startTestReceiver({ dir, env: { ...env, ...extra } });
    try {
      let r = await run();
      const maria = new CookieJar();
      expect((await step(maria, await toCallback(url, 'maria', maria))).status).toBe(200);
      // A sign-in started before a restart ends after it: the sealing key is in the log.
      const pendingJar = new CookieJar();
      const pendingCallback = await toCallback(url, 'joao', pendingJar);
      await r.stop();

      r = await run();
      await settle(url);
      expect(await signedInAs(url, maria.header(url))).toEqual({ status: 200, who: 'Maria Souza (admin)' });
      expect((await step(pendingJar, pendingCallback)).status).toBe(200);
      await r.stop();

      r = await run({ OIDC_ADMIN_GROUPS: 'consig-superusers' });
      await settle(url);
      const after = await signedInAs(url, maria.header(url));
      const rows = (
        r.store.db.prepare("SELECT count(*) AS n FROM console_sessions WHERE subject = 'maria'").get() as {
          n: number;
        }
      ).n;
      await r.stop();
      expect({ ...after, rows }).toEqual({ status: 303, who: '', rows: 0 });
    } finally {
      cleanup();
    }
  });

  it("lasts OIDC_SESSION_TTL (1 h by default), not CONSOLE_SESSION_TTL's 8 h: then the provider's groups are read again", async () => {
    const jar = new CookieJar();
    const answer = await step(jar, await toCallback(plainUrl, 'maria', jar));
    expect(answer.status).toBe(200);
    const setCookie = answer.res.headers.getSetCookie().find((c) => /consig_console=[^;]/.test(c)) ?? '';
    const row = sessionRows(plain)[0] as { created_at: string; expires_at: string };
    expect({
      maxAge: /Max-Age=(\d+)/.exec(setCookie)?.[1],
      lastsMs: Date.parse(row.expires_at) - Date.parse(row.created_at),
    }).toEqual({ maxAge: '3600', lastsMs: 3_600_000 });
  });
});

describe('4. PUBLIC_URL https behind a TLS proxy (TRUST_PROXY unset)', () => {
  it('makes the pending and session cookies Secure, __Host-, Path=/', async () => {
    const jar = new CookieJar();
    const started = await fetch(`${tlsUrl}/console/oidc/start`, { redirect: 'manual' });
    const pending = withoutValue(started.headers.getSetCookie().join('\n'));
    expect(pending).toMatch(/^__Host-consig_oidc=…; Path=\/; Max-Age=600; HttpOnly; SameSite=Lax; Secure$/);
    const answer = await step(jar, await toCallback(tlsUrl, 'maria', jar, HTTPS_PUBLIC));
    expect(answer.status).toBe(200);
    const session = withoutValue(
      answer.res.headers.getSetCookie().find((c) => c.includes('consig_console=')) ?? '',
    );
    expect(session).toMatch(/^__Host-consig_console=…; Path=\/; .*; Secure$/);
    expect(/^[A-Za-z0-9_-]{43}$/.test(jar.get(tlsUrl, '__Host-consig_console') ?? '')).toBe(true);
    expect(await signedInAs(tlsUrl, jar.header(tlsUrl))).toEqual({ status: 200, who: 'Maria Souza (admin)' });
  });
});

describe('5. a sibling subdomain planting cookies for the parent domain', () => {
  /**
   * joao (the attacker) starts a sign-in and stops at the provider's answer: his code and his
   * pending sign-in. The sibling site plants that under the one name it can set, `consig_oidc`
   * (Domain=parent, a longer path: the browser sends it first), and sends the victim to his callback.
   */
  async function attackersSignIn(url: string, publicUrl = url) {
    const jar = new CookieJar();
    const callback = await toCallback(url, 'joao', jar, publicUrl);
    return { callback, planted: `consig_oidc=${pendingIn(jar, url)}` };
  }

  it('https PUBLIC_URL: the planted consig_oidc is not the __Host- cookie; the victim is not signed in as the attacker', async () => {
    const { callback, planted } = await attackersSignIn(tlsUrl, HTTPS_PUBLIC);
    const victim = new CookieJar();
    await step(victim, `${tlsUrl}/console/oidc/start`); // her own sign-in, pending
    const answer = await step(victim, callback, { cookie: `${planted}; ${victim.header(tlsUrl)}` });
    expect({
      status: answer.status,
      signedIn: sessionIn(victim, tlsUrl) !== undefined,
      joao: sessionRows(behindTls).length,
    }).toEqual({
      status: 403,
      signedIn: false,
      joao: 0,
    });
  });

  it('http PUBLIC_URL (no __Host- possible): two consig_oidc cookies are refused, not the first believed', async () => {
    const { callback, planted } = await attackersSignIn(plainUrl);
    const victim = new CookieJar();
    await step(victim, `${plainUrl}/console/oidc/start`);
    const answer = await step(victim, callback, { cookie: `${planted}; ${victim.header(plainUrl)}` });
    const reason = (
      plain.store.db.prepare('SELECT detail FROM console_audit ORDER BY id DESC LIMIT 1').get() as {
        detail: string;
      }
    ).detail;
    expect({
      status: answer.status,
      signedIn: sessionIn(victim, plainUrl) !== undefined,
      reason: JSON.parse(reason).reason,
    }).toEqual({
      status: 403,
      signedIn: false,
      reason: 'pending_duplicate',
    });
  });

  it.each([
    ['http', () => plainUrl, () => plainUrl],
    ['https', () => tlsUrl, () => HTTPS_PUBLIC],
  ])(
    "%s PUBLIC_URL: a planted consig_console beside the victim's own does not make her the attacker",
    async (_n, url, pub) => {
      const attacker = new CookieJar();
      expect((await step(attacker, await toCallback(url(), 'joao', attacker, pub()))).status).toBe(200);
      const victim = new CookieJar();
      expect((await step(victim, await toCallback(url(), 'maria', victim, pub()))).status).toBe(200);
      const seen = await signedInAs(
        url(),
        `consig_console=${sessionIn(attacker, url())}; ${victim.header(url())}`,
      );
      // https: her own __Host- session; http: neither (which one is hers cannot be told), so the sign-in page.
      expect(seen.who).not.toContain('João');
      expect(seen).toEqual(
        url() === tlsUrl ? { status: 200, who: 'Maria Souza (admin)' } : { status: 303, who: '' },
      );
    },
  );
});

describe('6. the sign-in throttle', () => {
  it('is not reset by an account the provider vouches for that is in no group', async () => {
    const forged = `${plainUrl}/console/oidc/callback?code=x&state=y`;
    for (let i = 0; i < 4; i++) expect((await step(new CookieJar(), forged)).status).toBe(403);
    const ana = new CookieJar();
    expect((await step(ana, await toCallback(plainUrl, 'ana', ana))).status).toBe(403);
    const failures = () => plain.store.db.prepare('SELECT failures FROM console_sign_in_failures').all();
    expect(failures()).toEqual([{ failures: 4 }]);
    expect((await step(new CookieJar(), forged)).status).toBe(403);
    expect((await step(new CookieJar(), forged)).status).toBe(429);
  });

  it('is reset by a completed sign-in, after the group check', async () => {
    const forged = `${plainUrl}/console/oidc/callback?code=x&state=y`;
    for (let i = 0; i < 4; i++) expect((await step(new CookieJar(), forged)).status).toBe(403);
    const maria = new CookieJar();
    expect((await step(maria, await toCallback(plainUrl, 'maria', maria))).status).toBe(200);
    expect(plain.store.db.prepare('SELECT failures FROM console_sign_in_failures').all()).toEqual([]);
  });
});
