import type { Browser, BrowserContext, Page } from 'playwright-core';
import {
  h1,
  launchBrowser,
  newContext,
  screenshot,
  seriousViolations,
  signedInPage,
  signIn,
} from './helpers/browser';
import { ADMIN, type ConsoleStory, REQUEST_ID, startConsoleStory, STORY_NU, VIEWER } from './helpers/story';

/**
 * Issue 12: every console page, filled with real data, checked by axe-core in Chromium against
 * WCAG 2.0/2.1 A and AA and axe's best practices — no serious or critical violation — at a desktop's
 * width and at a phone's (issue 21: tables as cards, the charts' narrow drawing), and kept as a
 * screenshot under test-artifacts/screenshots/.
 */

let browser: Browser;
let story: ConsoleStory;
let contexts: BrowserContext[] = [];

beforeAll(async () => {
  browser = await launchBrowser();
  story = await startConsoleStory({ deadLetters: 1 });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await story?.stop();
});
afterEach(async () => {
  await Promise.all(contexts.map((c) => c.close()));
  contexts = [];
});

/** A phone's screen (issue 21): the tables are cards there, the charts their narrow drawing. */
const PHONE = { width: 390, height: 844 };

async function as(token: string, viewport?: { width: number; height: number }): Promise<Page> {
  const signed = await signedInPage(browser, story.r.url, token, viewport);
  contexts.push(signed.context);
  return signed.page;
}

async function check(page: Page, name: string, heading: string): Promise<void> {
  expect(await h1(page)).toBe(heading);
  await screenshot(page, name);
  expect(await seriousViolations(page)).toEqual([]);
}

describe('signed out', () => {
  it('login: no serious violations', async () => {
    const context = await newContext(browser, story.r.url);
    contexts.push(context);
    const page = await context.newPage();
    await page.goto('/console/login');
    await check(page, 'login', 'Sign in');
  });

  it('login with an error: no serious violations', async () => {
    const context = await newContext(browser, story.r.url);
    contexts.push(context);
    const page = await context.newPage();
    await signIn(page, 'wrong-token');
    await check(page, 'login-wrong-token', 'Sign in');
  });
});

// [screenshot name, path, h1, who]
const PAGES: [string, string, string, 'admin' | 'viewer'][] = [
  ['overview', '/console', 'Overview', 'admin'],
  ['proposals', '/console/proposals', 'Proposals', 'admin'],
  ['proposals-filtered', '/console/proposals?stage=Averbação', 'Proposals', 'viewer'],
  ['proposal', `/console/proposals/${STORY_NU}`, `Proposal ${STORY_NU}`, 'admin'],
  ['events', '/console/events', 'Events', 'admin'],
  ['events-filtered', '/console/events?status=done&evento=proposta.criada', 'Events', 'viewer'],
  ['deliveries', '/console/deliveries', 'Deliveries', 'admin'],
  ['dead-letters', '/console/dead', 'Dead letters', 'admin'],
  ['dead-letters-as-viewer', '/console/dead', 'Dead letters', 'viewer'],
  ['confirm-bulk-replay', '/console/dead/replay', 'Replay 1 event?', 'admin'],
  ['averbacoes', '/console/averbacoes', 'Averbações', 'admin'],
  ['forwarding', '/console/forwards', 'Forwarding', 'admin'],
  ['audit', '/console/audit', 'Audit', 'admin'],
  ['not-found', '/console/events/999999', 'Not found', 'admin'],
  ['bad-filter', '/console/events?status=bogus', 'Bad request', 'admin'],
];

describe('signed in', () => {
  it.each(PAGES)('%s (%s): no serious violations', async (name, path, heading, who) => {
    const page = await as(who === 'admin' ? ADMIN : VIEWER);
    await page.goto(path);
    await check(page, name, heading);
  });

  it('an event page (with its body and forwarding): no serious violations', async () => {
    const page = await as(ADMIN);
    const id = story.storyEventIds[0] as number;
    await page.goto(`/console/events/${id}`);
    await check(page, 'event', `Event ${id}`);
  });

  it('a dead event page (with its Replay button): no serious violations', async () => {
    const page = await as(ADMIN);
    const id = story.deadEventIds[0] as number;
    await page.goto(`/console/events/${id}`);
    await check(page, 'event-dead', `Event ${id}`);
  });

  it.each(PAGES)('%s (%s) at 390×844: no serious violations', async (name, path, heading, who) => {
    const page = await as(who === 'admin' ? ADMIN : VIEWER, PHONE);
    await page.goto(path);
    await check(page, `phone-a11y-${name}`, heading);
  });

  it('login at 390×844: no serious violations', async () => {
    const context = await newContext(browser, story.r.url, PHONE);
    contexts.push(context);
    const page = await context.newPage();
    await page.goto('/console/login');
    await check(page, 'phone-a11y-login', 'Sign in');
  });

  it('the averbação is listed (the page was checked with a row in it)', async () => {
    const page = await as(VIEWER);
    await page.goto('/console/averbacoes');
    expect(await page.locator('main').innerText()).toContain(REQUEST_ID);
  });
});
