import type { Page } from 'playwright-core';
import { h1, navigateBy, screenshot, until } from './helpers/browser';
import { ADMIN, DEAD_NU } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 12, in headless Chromium: an admin replays a dead letter from the dead-letters page once
 * its handler works again, and watches the event become `done`; the bulk replay asks first and
 * says how many; both are in the audit trail.
 */

const bed = consoleBed({ deadLetters: 3 });

const asAdmin = (): Promise<Page> => bed.as(ADMIN);

/** The status badge's class on an event page (`status-dead`, `status-done`, …). */
async function statusClass(page: Page): Promise<string> {
  return (await page.locator('dl.facts .status').first().getAttribute('class')) ?? '';
}

it('replays a dead letter from the dead-letters page and the event becomes done', async () => {
  const page = await asAdmin();
  const dead = bed.story.deadEventIds[0] as number;
  await page.goto(`/console/events/${dead}`);
  expect(await h1(page)).toBe(`Event ${dead}`);
  expect(await statusClass(page)).toContain('status-dead');
  expect(await page.locator('dl.facts').innerText()).toContain('handler down for proposal');

  bed.story.failing.delete(DEAD_NU); // the handler works again
  await page.goto('/console/dead');
  expect(await h1(page)).toBe('Dead letters');
  const row = page
    .locator('table tbody tr')
    .filter({ has: page.locator(`a[href="/console/events/${dead}"]`) });
  expect(await row.locator('.status-dead').count()).toBe(1);
  await screenshot(page, 'dead-letters-admin');
  const status = await navigateBy(page, () => row.getByRole('button', { name: 'Replay' }).click());
  expect(status).toBe(200);
  expect(await h1(page)).toBe('Dead letters');

  // Watch it: the event's page, reloaded until the pipeline has run it.
  await page.goto(`/console/events/${dead}`);
  await until(async () => {
    await page.reload();
    return (await statusClass(page)).includes('status-done');
  }, `event ${dead} shown as done`);
  expect(bed.story.statusOf(dead)).toBe('done');
  expect(await page.locator('dl.facts .status').first().innerText()).toBe('done');
  await screenshot(page, 'event-replayed');

  // Gone from the dead letters; in the audit trail, by the admin.
  await page.goto('/console/dead');
  expect(await page.locator(`table a[href="/console/events/${dead}"]`).count()).toBe(0);
  await page.goto('/console/audit');
  const audit = await page.locator('table').first().innerText();
  expect(audit).toMatch(new RegExp(`replay_event\\s+admin\\s+\\w+\\s+event:${dead}`));
});

it('replays from the event page too, with a notice, until done', async () => {
  const page = await asAdmin();
  const dead = bed.story.deadEventIds[1] as number;
  bed.story.failing.delete(DEAD_NU + 1);
  await page.goto(`/console/events/${dead}`);
  await navigateBy(page, () => page.getByRole('button', { name: 'Replay' }).click());
  expect(new URL(page.url()).pathname).toBe(`/console/events/${dead}`);
  expect(await page.getByRole('status').innerText()).toContain('Queued for replay');
  await until(async () => {
    await page.reload();
    return (await statusClass(page)).includes('status-done');
  }, `event ${dead} shown as done`);
});

it('bulk replay says how many first, replays only on "Confirm replay", and they become done', async () => {
  const page = await asAdmin();
  const dead = bed.story.deadEventIds[2] as number;
  bed.story.failing.delete(DEAD_NU + 2);
  await page.goto('/console/dead');
  await navigateBy(page, () => page.getByRole('link', { name: /Replay every dead event/ }).click());
  expect(await h1(page)).toBe('Replay 1 event?');
  expect(bed.story.statusOf(dead)).toBe('dead'); // asking changed nothing
  await screenshot(page, 'confirm-replay');
  await navigateBy(page, () => page.getByRole('button', { name: 'Confirm replay' }).click());
  expect(await page.getByRole('status').innerText()).toContain('1 queued for replay');
  await page.goto(`/console/events/${dead}`);
  await until(async () => {
    await page.reload();
    return (await statusClass(page)).includes('status-done');
  }, `event ${dead} shown as done`);
});
