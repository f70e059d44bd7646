import type { Browser, BrowserContext } from 'playwright-core';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { openPool, waitFor } from '../helpers/cluster-db';
import { play, scenario } from '../helpers/cluster-scenario';
import { createTestDatabase, workerPostgres } from '../helpers/postgres';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { h1, launchBrowser, navigateBy, screenshot, signedInPage } from './helpers/browser';

/**
 * The console of a cluster-mode replica (contract §10) in headless Chromium: signed in through the
 * form (the session stored in PostgreSQL), the overview with the cluster's figures and this
 * replica's relay, and a proposal's timeline read from PostgreSQL.
 */

const ADMIN = 'cluster-browser-admin-token-0123';

let pg: LocalPostgres;
let browser: Browser;
let replica: TestReceiver;
let context: BrowserContext | undefined;

beforeAll(async () => {
  browser = await launchBrowser();
  pg = await workerPostgres();
  const url = await createTestDatabase(pg, 'browser');
  replica = await startTestReceiver({
    env: { DATABASE_URL: url, REPLICA_ID: 'replica-a', RELAY_INTERVAL_MS: '20', ADMIN_TOKEN: ADMIN },
  });
  await waitFor(() => replica.runtime.state === 'running', 'the replica connected to PostgreSQL');
  const pool = openPool(url);
  try {
    await play(replica, pool, scenario());
  } finally {
    await pool.end();
  }
}, 120_000);
afterAll(async () => {
  await context?.close();
  await browser?.close();
  await replica?.stop();
  await pg?.stop();
});

it('signs in, shows the overview with the relay, and opens a proposal from the list', async () => {
  const signed = await signedInPage(browser, replica.url, ADMIN);
  context = signed.context;
  const { page } = signed;
  expect(new URL(page.url()).pathname).toBe('/console');
  expect(await h1(page)).toBe('Overview');
  expect(await page.getByRole('heading', { name: 'Relay (cluster mode)' }).count()).toBe(1);
  expect((await page.locator('#c-relay + p.big').innerText()).trim()).toBe('0');
  await expect(page.getByRole('row', { name: /replica-a \(this replica\)/ }).count()).resolves.toBe(1);
  // The hourly chart counted the cluster's deliveries (PostgreSQL's rollup).
  await expect(page.locator('main').innerText()).resolves.toContain(
    'Last 24 hours: accepted 9, duplicate 1, quarantined 1, failed 1',
  );
  await screenshot(page, 'cluster-overview');

  await navigateBy(page, () => page.getByRole('link', { name: 'Proposals', exact: true }).click());
  expect(await h1(page)).toBe('Proposals');
  await navigateBy(page, () => page.getByRole('link', { name: '9101', exact: true }).click());
  expect(await h1(page)).toBe('Proposal 9101');
  const items = await page.locator('ol.timeline > li').allInnerTexts();
  expect(items.filter((t) => / received \(event \d+\)/.test(t))).toHaveLength(4);
  expect(items.some((t) => t.includes('aprovada → averbacao_solicitada'))).toBe(true);
  expect(items.some((t) => t.includes('Registry webhook for req-9101: completed'))).toBe(true);
  // LGPD: the CPF only masked.
  const facts = await page.locator('dl.facts').innerText();
  expect(facts).toMatch(/\*\*\*\.\d{3}\.\d{3}-\*\*/);
  expect(await page.content()).not.toMatch(/\d{11}/);
  await screenshot(page, 'cluster-proposal');
});
