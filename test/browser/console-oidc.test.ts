import type { Browser, BrowserContext, Page } from 'playwright-core';
import { freePort } from '../../rigs/harness';
import { delivery } from '../helpers/payloads';
import { oidcEnv, type TestProvider, testProvider } from '../helpers/oidc-provider';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import {
  h1,
  launchBrowser,
  navigateBy,
  screenshot,
  seriousViolations,
  signIn,
  until,
} from './helpers/browser';
import { providerSignIn } from './helpers/oidc';

/**
 * Issue 34 in headless Chromium, through a real OpenID Provider's own login form (oidc-provider on
 * loopback): an admin and a viewer each signed in as themselves, a person in neither group
 * refused, sign-out at the provider too, the provider down at start and then back, and the tokens
 * as break-glass. The console is opened as `localhost` and the provider as `127.0.0.1`, so the
 * provider's answer is a cross-site navigation as in production (the cookies' SameSite rules apply).
 */

const ADMIN = 'oidc-browser-admin-token-0123456789';

interface Bed {
  provider: TestProvider;
  r: TestReceiver;
  url: string;
}

async function bed(env: Record<string, string> = {}, running = true): Promise<Bed> {
  const port = await freePort();
  const url = `http://localhost:${port}`;
  const provider = await testProvider({ publicUrls: [url], running });
  const r = await startTestReceiver({
    env: { ...oidcEnv(provider, url), PORT: String(port), ADMIN_TOKEN: ADMIN, ...env },
  });
  return { provider, r, url };
}

let browser: Browser;
let main: Bed;
const contexts: BrowserContext[] = [];
const beds: Bed[] = [];

beforeAll(async () => {
  browser = await launchBrowser();
  main = await bed();
  beds.push(main);
}, 120_000);
afterAll(async () => {
  await browser?.close();
  for (const b of beds) {
    await b.r.stop();
    await b.provider.stop();
  }
});
afterEach(async () => {
  await Promise.all(contexts.splice(0).map((c) => c.close()));
});

async function pageAt(b: Bed): Promise<Page> {
  const context = await browser.newContext({ baseURL: b.url, viewport: { width: 1280, height: 900 } });
  contexts.push(context);
  return context.newPage();
}

interface AuditLine {
  action: string;
  role: string | null;
  person: string | null;
  reason: string | null;
  detail: string | null;
}

function auditOf(b: Bed): AuditLine[] {
  return b.r.store.db
    .prepare('SELECT action, role, person, reason, detail FROM console_audit ORDER BY id')
    .all() as AuditLine[];
}

async function consoleCookie(page: Page): Promise<string | undefined> {
  return (await page.context().cookies()).find((c) => c.name === 'consig_console')?.value;
}

describe('the provider up', () => {
  it('shows the sign-in page with the provider button only (no token form): axe-clean', async () => {
    const page = await pageAt(main);
    await page.goto('/console/login');
    expect(await h1(page)).toBe('Sign in');
    expect(await page.getByRole('link', { name: 'Sign in with your identity provider' }).count()).toBe(1);
    expect(await page.getByLabel('Token').count()).toBe(0);
    expect(await page.getByRole('alert').count()).toBe(0);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'oidc-login-provider-up');
  });

  it('signs maria in as herself: "Signed in: Maria Souza (admin)", and the audit names her', async () => {
    const page = await pageAt(main);
    expect(await providerSignIn(page, 'maria', '/console/login?next=%2Fconsole%2Faudit')).toBe(200);
    expect(new URL(page.url()).pathname).toBe('/console/audit');
    expect((await page.locator('.who span').innerText()).trim()).toBe('Signed in: Maria Souza (admin)');
    const signInRow = page.getByRole('row').filter({ hasText: 'sign_in' }).first();
    expect(await signInRow.innerText()).toContain('maria@lender.example');
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'oidc-audit-admin');
    expect(auditOf(main).at(-1)).toMatchObject({
      action: 'sign_in',
      role: 'admin',
      person: 'maria@lender.example',
    });
  });

  it("refuses joao's (viewer) admin POST carrying his valid CSRF token: 403, audited with him, nothing ended", async () => {
    const page = await pageAt(main);
    expect(await providerSignIn(page, 'joao')).toBe(200);
    expect((await page.locator('.who span').innerText()).trim()).toBe(
      'Signed in: João Lima (viewer, read only)',
    );
    const sessionsBefore = main.r.store.db.prepare('SELECT count(*) AS n FROM console_sessions').get();
    // The sign-out form carries the session's valid CSRF token; re-aim it at "End all sessions".
    const form = page.locator('.who form');
    await form.evaluate((f) => f.setAttribute('action', '/console/sessions/end'));
    expect(await navigateBy(page, () => form.getByRole('button').click())).toBe(403);
    expect(await page.getByRole('alert').innerText()).toContain('needs the admin role');
    expect(main.r.store.db.prepare('SELECT count(*) AS n FROM console_sessions').get()).toEqual(
      sessionsBefore,
    );
    expect(auditOf(main).at(-1)).toMatchObject({
      action: 'refused',
      reason: 'role',
      role: 'viewer',
      person: 'joao@lender.example',
    });
    await page.goto('/console');
    expect(await h1(page)).toBe('Overview');
  });

  it('refuses ana (in neither group) with a page saying why: no session, audited with her', async () => {
    const page = await pageAt(main);
    expect(await providerSignIn(page, 'ana')).toBe(403);
    expect(await h1(page)).toBe('Not allowed');
    const why = await page.getByRole('alert').innerText();
    expect(why).toContain('ana@lender.example');
    expect(why).toContain("neither of the console's groups");
    expect(await consoleCookie(page)).toBeUndefined();
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'oidc-refused');
    expect(auditOf(main).at(-1)).toMatchObject({ action: 'sign_in_refused', person: 'ana@lender.example' });
    await page.goto('/console');
    expect(new URL(page.url()).pathname).toBe('/console/login');
  });

  it("signs out here and at the provider's end-session endpoint, then back on the sign-in page", async () => {
    const page = await pageAt(main);
    expect(await providerSignIn(page, 'maria')).toBe(200);
    await page.getByRole('button', { name: 'Sign out' }).click();
    // The provider asks to confirm (no ID token is kept to hint who: the console stores none).
    await page.waitForURL((u) => u.port === String(main.provider.port));
    expect(await page.locator('h1').innerText()).toContain('Sign out of the test provider');
    await page.getByRole('button', { name: 'Yes, sign me out' }).click();
    await page.waitForURL((u) => u.pathname === '/console/login' && u.hostname === 'localhost');
    expect(await h1(page)).toBe('Sign in');
    expect(await consoleCookie(page)).toBeUndefined();
    expect(auditOf(main).at(-1)).toMatchObject({ action: 'sign_out', person: 'maria@lender.example' });
    // The provider's session ended too: a new sign-in asks for the password again.
    await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
    await page.waitForURL(/\/interaction\//);
    expect(await page.getByLabel('Password').count()).toBe(1);
  });

  it("refuses the provider's answer replayed: with a forged state, and with its used code", async () => {
    const page = await pageAt(main);
    let answered: string | undefined;
    page.on('request', (req) => {
      if (new URL(req.url()).pathname === '/console/oidc/callback') answered = req.url();
    });
    await page.goto('/console/login');
    await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
    await page.waitForURL(/\/interaction\//);
    // The pending sign-in's cookie, as an attacker who copied it would hold it.
    const pending = (await page.context().cookies()).find((c) => c.name === 'consig_oidc');
    expect(pending?.sameSite).toBe('Lax');
    expect(pending?.httpOnly).toBe(true);
    await page.getByLabel('Login').fill('maria');
    await page.getByLabel('Password').fill('airam');
    await navigateBy(page, () => page.getByRole('button', { name: 'Sign in' }).click());
    await page.waitForURL((u) => u.pathname === '/console');
    const genuine = answered as string;
    await page.context().clearCookies();

    await page.context().addCookies([pending as NonNullable<typeof pending>]);
    const forged = new URL(genuine);
    forged.searchParams.set('state', 'forged-by-mallory');
    expect((await page.goto(forged.href))?.status()).toBe(403);
    expect(await h1(page)).toBe('Sign-in refused');
    expect(await page.getByRole('alert').innerText()).toContain('"state"');
    await screenshot(page, 'oidc-refused-state');

    await page.context().addCookies([pending as NonNullable<typeof pending>]);
    expect((await page.goto(genuine))?.status()).toBe(403);
    expect(await consoleCookie(page)).toBeUndefined();
    const [forgedRow, replayRow] = auditOf(main).slice(-2);
    expect(JSON.parse(forgedRow?.detail ?? '{}')).toMatchObject({ reason: 'OAUTH_INVALID_RESPONSE' });
    expect(JSON.parse(replayRow?.detail ?? '{}')).toMatchObject({ reason: 'invalid_grant' });
  });

  it('keeps /admin/* on its bearer token, and the token out of the console', async () => {
    const res = await fetch(`${main.r.url}/admin/events`, { headers: { authorization: `Bearer ${ADMIN}` } });
    expect(res.status).toBe(200);
    const page = await pageAt(main);
    await page.goto('/console/login');
    expect(await page.getByLabel('Token').count()).toBe(0);
    // A token posted anyway signs no one in.
    const answer = await page.request.post('/console/login', { form: { token: ADMIN }, maxRedirects: 0 });
    expect(answer.status()).toBe(401);
  });
});

it('starts with the provider down: webhooks answered, the page says so; signs in once it is back (and again after a second outage)', async () => {
  const down = await bed({}, false);
  beds.push(down);
  expect((await down.r.send(delivery('proposta.aprovada', { nu_proposta: 99001 }))).status).toBe(200);
  const page = await pageAt(down);
  await page.goto('/console/login');
  expect(await page.getByRole('alert').innerText()).toContain('cannot be reached');
  expect(await seriousViolations(page)).toEqual([]);
  await screenshot(page, 'oidc-login-provider-down');
  // Trying anyway: 503, the same message, nothing started.
  const tried = await navigateBy(page, () =>
    page.getByRole('link', { name: 'Sign in with your identity provider' }).click(),
  );
  expect(tried).toBe(503);
  expect(await page.getByRole('alert').innerText()).toContain('cannot be reached');

  await down.provider.start();
  await until(async () => {
    await page.goto('/console/login');
    return (await page.getByRole('alert').count()) === 0;
  }, 'the sign-in page to find the provider back');
  expect(await providerSignIn(page, 'maria')).toBe(200);
  expect((await page.locator('.who span').innerText()).trim()).toBe('Signed in: Maria Souza (admin)');

  // Down again once discovered: the sign-in page finds out and says so; back: it works again.
  await down.provider.stop();
  const alerts = async () => {
    await page.goto('/console/login');
    return page.getByRole('alert').count();
  };
  await until(async () => (await alerts()) === 1, 'the sign-in page to see the provider gone');
  await down.provider.start();
  await until(async () => (await alerts()) === 0, 'the sign-in page to find the provider back again');
  const again = await pageAt(down);
  expect(await providerSignIn(again, 'joao')).toBe(200);
});

it('break-glass on: the token form too, its sign-in audited as break-glass and logged at warn', async () => {
  const glass = await bed({ CONSOLE_BREAK_GLASS: 'true' });
  beds.push(glass);
  const page = await pageAt(glass);
  await page.goto('/console/login');
  expect(await page.getByRole('link', { name: 'Sign in with your identity provider' }).count()).toBe(1);
  expect(await page.getByRole('heading', { name: 'Break-glass sign-in' }).count()).toBe(1);
  expect(await seriousViolations(page)).toEqual([]);
  await screenshot(page, 'oidc-login-break-glass');
  expect(await signIn(page, ADMIN)).toBe(200);
  expect((await page.locator('.who span').innerText()).trim()).toBe('Signed in: admin');
  expect(auditOf(glass).at(-1)).toMatchObject({ action: 'sign_in_break_glass', role: 'admin', person: null });
  const warned = glass.r.logs.lines.filter(
    (l) => l.level === 'warn' && String(l.msg).includes('break-glass'),
  );
  expect(warned).toHaveLength(1);
  expect(JSON.stringify(warned)).not.toContain(ADMIN);
});
