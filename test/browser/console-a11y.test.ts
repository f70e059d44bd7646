import type { Page } from 'playwright-core';
import { h1, screenshot, seriousViolations, signIn } from './helpers/browser';
import { ADMIN, REQUEST_ID, STORY_NU, VIEWER } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 12: every console page, filled with real data, checked by axe-core in Chromium against
 * WCAG 2.0/2.1 A and AA and axe's best practices — no serious or critical violation — at a desktop's
 * width and at a phone's (issue 21: tables as cards, the charts' narrow drawing), and kept as a
 * screenshot under test-artifacts/screenshots/.
 */

const bed = consoleBed({ deadLetters: 1 });

/** A phone's screen (issue 21): the tables are cards there, the charts their narrow drawing. */
const PHONE = { width: 390, height: 844 };

const as = (token: string, viewport?: { width: number; height: number }): Promise<Page> =>
  bed.as(token, viewport);

async function check(page: Page, name: string, heading: string): Promise<void> {
  expect(await h1(page)).toBe(heading);
  await screenshot(page, name);
  expect(await seriousViolations(page)).toEqual([]);
}

describe('signed out', () => {
  it('login: no serious violations', async () => {
    const context = await bed.context();
    const page = await context.newPage();
    await page.goto('/console/login');
    await check(page, 'login', 'Sign in');
  });

  it('login with an error: no serious violations', async () => {
    const context = await bed.context();
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
    const id = bed.story.storyEventIds[0] as number;
    await page.goto(`/console/events/${id}`);
    await check(page, 'event', `Event ${id}`);
  });

  it('a dead event page (with its Replay button): no serious violations', async () => {
    const page = await as(ADMIN);
    const id = bed.story.deadEventIds[0] as number;
    await page.goto(`/console/events/${id}`);
    await check(page, 'event-dead', `Event ${id}`);
  });

  it.each(PAGES)('%s (%s) at 390×844: no serious violations', async (name, path, heading, who) => {
    const page = await as(who === 'admin' ? ADMIN : VIEWER, PHONE);
    await page.goto(path);
    await check(page, `phone-a11y-${name}`, heading);
  });

  it('login at 390×844: no serious violations', async () => {
    const context = await bed.context(PHONE);
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
