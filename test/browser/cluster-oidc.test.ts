import type { Browser } from 'playwright-core';
import { freePort } from '../../rigs/harness';
import { clusterBed } from '../helpers/cluster-bed';
import { oidcEnv, type TestProvider, testProvider } from '../helpers/oidc-provider';
import { launchBrowser } from './helpers/browser';
import { providerSignIn } from './helpers/oidc';

/**
 * Issue 34 in cluster mode: a sign-in started at one replica completes at another. Replica A sends
 * the browser to the provider with the pending sign-in sealed in its cookie; the provider sends it
 * back to PUBLIC_URL, which is replica B here (a load balancer may choose either). B opens the seal
 * (with the key A wrote to PostgreSQL's console_keys), has the code checked, and opens the session
 * in PostgreSQL, where A finds it.
 */

const bed = clusterBed({ prefix: 'oidc' });

let browser: Browser;
let provider: TestProvider;
let portB: number;

beforeAll(async () => {
  browser = await launchBrowser();
  portB = await freePort();
  provider = await testProvider({ publicUrls: [`http://localhost:${portB}`] });
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await provider?.stop();
});

it('starts a sign-in at replica A and completes it at replica B; A then knows the session', async () => {
  const portA = await freePort();
  const env = oidcEnv(provider, `http://localhost:${portB}`);
  await bed.replica({ ...env, PORT: String(portA), REPLICA_ID: 'replica-a' });
  await bed.replica({ ...env, PORT: String(portB), REPLICA_ID: 'replica-b' });
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    const served: string[] = [];
    page.on('response', (r) => {
      const u = new URL(r.url());
      if (u.pathname.startsWith('/console/oidc/')) served.push(`${u.port} ${u.pathname} ${r.status()}`);
    });
    expect(await providerSignIn(page, 'maria', `http://localhost:${portA}/console/login`)).toBe(200);
    expect(served).toEqual([`${portA} /console/oidc/start 303`, `${portB} /console/oidc/callback 200`]);
    expect(new URL(page.url()).port).toBe(String(portB));
    expect((await page.locator('.who span').innerText()).trim()).toBe('Signed in: Maria Souza (admin)');

    await page.goto(`http://localhost:${portA}/console/audit`);
    expect(new URL(page.url()).pathname).toBe('/console/audit');
    expect((await page.locator('.who span').innerText()).trim()).toBe('Signed in: Maria Souza (admin)');
    const audit = await bed.pool.query("SELECT role, person FROM console_audit WHERE action = 'sign_in'");
    expect(audit.rows).toEqual([{ role: 'admin', person: 'maria@lender.example' }]);
    // The seal both replicas opened: one random key in PostgreSQL (issue 44), not the client secret.
    const keys = await bed.pool.query('SELECT name, length(secret) AS chars FROM console_keys');
    expect(keys.rows).toEqual([{ name: 'oidc-pending', chars: 43 }]);
    const sessions = await bed.pool.query('SELECT role, subject, name, email FROM console_sessions');
    expect(sessions.rows).toEqual([
      { role: 'admin', subject: 'maria', name: 'Maria Souza', email: 'maria@lender.example' },
    ]);

    // Issue 44: a replica started with OIDC_ADMIN_GROUPS no longer naming her group ends her session
    // for every replica, A (still on the old settings) included.
    const portC = await freePort();
    await bed.replica({
      ...env,
      OIDC_ADMIN_GROUPS: 'consig-superusers',
      PORT: String(portC),
      REPLICA_ID: 'replica-c',
    });
    expect((await bed.pool.query('SELECT count(*)::int AS n FROM console_sessions')).rows).toEqual([
      { n: 0 },
    ]);
    await page.goto(`http://localhost:${portA}/console/audit`);
    expect(new URL(page.url()).pathname).toBe('/console/login');
  } finally {
    await context.close();
  }
});
