import type { Page } from 'playwright-core';
import { h1, navigateBy, removeAll, screenshot, signIn } from './helpers/browser';
import { ADMIN, VIEWER } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 12, in headless Chromium: signing in with each token (and not with a wrong one), signing
 * out, a viewer who cannot replay even with a forged form, and a replay without its CSRF token
 * refused — each refusal leaving the dead letter dead.
 */

const bed = consoleBed({ deadLetters: 2 });

const as = (token: string): Promise<Page> => bed.as(token);

const replayForm = (id: number) => `form[action="/console/events/${id}/replay"]`;

describe('signing in', () => {
  it('signs in with ADMIN_TOKEN and lands on the overview, as admin', async () => {
    const page = await as(ADMIN);
    expect(new URL(page.url()).pathname).toBe('/console');
    expect(await h1(page)).toBe('Overview');
    expect(await page.locator('.who').innerText()).toContain('admin');
  });

  it('signs in with VIEWER_TOKEN and lands on the overview, read only', async () => {
    const page = await as(VIEWER);
    expect(new URL(page.url()).pathname).toBe('/console');
    expect(await h1(page)).toBe('Overview');
    expect(await page.locator('.who').innerText()).toContain('viewer (read only)');
  });

  it('keeps a wrong token on the sign-in page with an error, and no session', async () => {
    const context = await bed.context();
    const page = await context.newPage();
    const status = await signIn(page, 'not-a-token-of-ours');
    expect(status).toBe(401);
    expect(new URL(page.url()).pathname).toBe('/console/login');
    expect(await h1(page)).toBe('Sign in');
    expect(await page.getByRole('alert').innerText()).toContain('That token does not sign in.');
    expect(await page.getByLabel('Token').count()).toBe(1);
    await screenshot(page, 'login-error');
    expect(await context.cookies()).toEqual([]);
    await page.goto('/console');
    expect(new URL(page.url()).pathname).toBe('/console/login');
  });

  it('signs out: back on the sign-in page, the cookie gone, the console closed again', async () => {
    const page = await as(ADMIN);
    expect((await page.context().cookies())?.map((c) => c.name)).toContain('consig_console');
    const status = await navigateBy(page, () => page.getByRole('button', { name: 'Sign out' }).click());
    expect(status).toBe(200);
    expect(new URL(page.url()).pathname).toBe('/console/login');
    expect(await h1(page)).toBe('Sign in');
    expect((await page.context().cookies())?.map((c) => c.name)).not.toContain('consig_console');
    await page.goto('/console/events');
    expect(new URL(page.url()).pathname).toBe('/console/login');
  });
});

describe('a viewer cannot replay', () => {
  it('shows the viewer the dead letters without a Replay button or bulk replay', async () => {
    const page = await as(VIEWER);
    await page.goto('/console/dead');
    expect(await h1(page)).toBe('Dead letters');
    const dead = bed.story.deadEventIds[0] as number;
    expect(await page.locator(`a[href="/console/events/${dead}"]`).count()).toBeGreaterThan(0);
    expect(await page.getByRole('button', { name: 'Replay' }).count()).toBe(0);
    expect(await page.locator('form[action$="/replay"]').count()).toBe(0);
    expect(await page.getByRole('link', { name: /Replay every/ }).count()).toBe(0);
    await page.goto(`/console/events/${dead}`);
    expect(await page.getByRole('button', { name: 'Replay' }).count()).toBe(0);
    await screenshot(page, 'dead-letters-viewer');
  });

  it("refuses a replay forged in the viewer's page, with the page's own CSRF token: 403, still dead", async () => {
    const page = await as(VIEWER);
    await page.goto('/console/dead');
    const dead = bed.story.deadEventIds[0] as number;
    // The sign-out form carries the session's valid token; re-aim it at the replay action.
    const form = page.locator('.who form');
    expect(await form.getAttribute('action')).toBe('/console/logout');
    expect(await form.locator('input[name="_csrf"]').count()).toBe(1);
    await form.evaluate((f, id) => f.setAttribute('action', `/console/events/${id}/replay`), dead);
    const status = await navigateBy(page, () => form.getByRole('button').click());
    expect(status).toBe(403);
    expect(await h1(page)).toBe('Refused');
    expect(await page.getByRole('alert').innerText()).toContain('needs the admin token');
    expect(bed.story.statusOf(dead)).toBe('dead');
  });

  it("refuses a bulk replay forged in the viewer's page: 403, still dead", async () => {
    const page = await as(VIEWER);
    await page.goto('/console/dead');
    const form = page.locator('.who form');
    await form.evaluate((f) => f.setAttribute('action', '/console/dead/replay'));
    expect(await navigateBy(page, () => form.getByRole('button').click())).toBe(403);
    expect(bed.story.deadEventIds.map((id) => bed.story.statusOf(id))).toEqual(
      bed.story.deadEventIds.map(() => 'dead'),
    );
  });
});

describe('CSRF', () => {
  it('refuses an admin replay whose form lost its _csrf field: 403, still dead, nothing audited', async () => {
    const page = await as(ADMIN);
    await page.goto('/console/dead');
    const dead = bed.story.deadEventIds[1] as number;
    const form = page.locator(replayForm(dead)).first();
    expect(await form.locator('input[name="_csrf"]').count()).toBe(1);
    expect(await removeAll(page, `${replayForm(dead)} input[name="_csrf"]`)).toBeGreaterThan(0);
    const status = await navigateBy(page, () => form.getByRole('button', { name: 'Replay' }).click());
    expect(status).toBe(403);
    expect(await h1(page)).toBe('Refused');
    expect(await page.getByRole('alert').innerText()).toContain('CSRF token missing or invalid');
    await screenshot(page, 'refused-csrf');
    expect(bed.story.statusOf(dead)).toBe('dead');
    const audited = bed.story.r.store.db
      .prepare("SELECT count(*) AS n FROM console_audit WHERE action LIKE 'replay%'")
      .get() as { n: number };
    expect(audited.n).toBe(0);
  });

  it('refuses the same replay with a wrong _csrf value', async () => {
    const page = await as(ADMIN);
    await page.goto('/console/dead');
    const dead = bed.story.deadEventIds[1] as number;
    const form = page.locator(replayForm(dead)).first();
    await form.locator('input[name="_csrf"]').evaluate((i) => i.setAttribute('value', 'forged'));
    expect(await navigateBy(page, () => form.getByRole('button', { name: 'Replay' }).click())).toBe(403);
    expect(bed.story.statusOf(dead)).toBe('dead');
  });
});
