import type { Page } from 'playwright-core';
import { h1, navigateBy, removeAll, screenshot, seriousViolations, signIn } from './helpers/browser';
import { ADMIN, VIEWER } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 21, in headless Chromium: refused attempts (a replay without its CSRF token, a viewer's
 * forged replay, a throttled sign-in) are on the audit page, saying who, which route and why; an
 * admin ends every session with the audit page's button, and a viewer's open page is signed out.
 */

const bed = consoleBed({ deadLetters: 1 });

const as = (token: string): Promise<Page> => bed.as(token);

/** The audit table's rows as the page shows them, one text per row (cells joined by " | "). */
async function auditRows(page: Page): Promise<string[]> {
  await page.goto('/console/audit');
  const rows: string[] = [];
  for (const tr of await page.locator('table tbody tr').all()) {
    const cells = await tr.locator('th, td').allInnerTexts();
    rows.push(cells.map((c) => c.trim()).join(' | '));
  }
  return rows;
}

it('shows refused attempts on the audit page: who, which route, why, how often', async () => {
  const dead = bed.story.deadEventIds[0] as number;
  const form = `form[action="/console/events/${dead}/replay"]`;
  const admin = await as(ADMIN);
  for (let i = 0; i < 2; i++) {
    await admin.goto('/console/dead');
    expect(await removeAll(admin, `${form} input[name="_csrf"]`)).toBeGreaterThan(0);
    const status = await navigateBy(admin, () =>
      admin.locator(form).first().getByRole('button', { name: 'Replay' }).click(),
    );
    expect(status).toBe(403);
  }
  const viewer = await as(VIEWER);
  await viewer.goto('/console/dead');
  const signOut = viewer.locator('.who form');
  await signOut.evaluate((f, id) => f.setAttribute('action', `/console/events/${id}/replay`), dead);
  expect(await navigateBy(viewer, () => signOut.getByRole('button').click())).toBe(403);

  const rows = await auditRows(admin);
  const route = `POST /console/events/${dead}/replay`;
  expect(rows).toEqual(
    expect.arrayContaining([
      expect.stringMatching(
        new RegExp(
          `^\\d+ \\| .+ \\| refused: csrf\\n2 times, the last .+ \\| admin \\| [0-9a-f]{8} \\| ${route} \\|  \\| 127\\.0\\.0\\.1$`,
        ),
      ),
      expect.stringMatching(
        new RegExp(
          `^\\d+ \\| .+ \\| refused: role \\| viewer \\| [0-9a-f]{8} \\| ${route} \\|  \\| 127\\.0\\.0\\.1$`,
        ),
      ),
    ]),
  );
  expect(rows.join('\n')).not.toContain(ADMIN);
  expect(bed.story.statusOf(dead)).toBe('dead');
  await screenshot(admin, 'audit-refused');
  expect(await seriousViolations(admin)).toEqual([]);
});

it("ends every session with the admins' button: the viewer's next page is the sign-in page", async () => {
  const viewer = await as(VIEWER);
  await viewer.goto('/console/audit');
  expect(await viewer.getByRole('button', { name: 'End all sessions' }).count()).toBe(0);
  const admin = await as(ADMIN);
  await admin.goto('/console/audit');
  expect(await admin.getByRole('heading', { name: 'Sessions' }).count()).toBe(1);
  const status = await navigateBy(admin, () =>
    admin.getByRole('button', { name: 'End all sessions' }).click(),
  );
  expect(status).toBe(200);
  expect(new URL(admin.url()).pathname).toBe('/console/login');
  expect(await h1(admin)).toBe('Sign in');
  await viewer.reload();
  expect(new URL(viewer.url()).pathname).toBe('/console/login');
  // Signed in again, the admin finds it in the audit table.
  await signIn(admin, ADMIN);
  const rows = await auditRows(admin);
  expect(rows).toEqual(
    expect.arrayContaining([
      expect.stringMatching(/ \| end_sessions \| admin \| [0-9a-f]{8} \| console \| \{"ended":\d+\} \| /),
    ]),
  );
});

// Last: it throttles the loopback address for the rest of the bed.story.
it('shows a throttled sign-in as anonymous, refused: throttled', async () => {
  const admin = await as(ADMIN);
  const context = await bed.context();
  const stranger = await context.newPage();
  for (let i = 0; i < 5; i++) expect(await signIn(stranger, `wrong-token-${i}`)).toBe(401);
  expect(await signIn(stranger, ADMIN)).toBe(429);
  expect(await stranger.getByRole('alert').innerText()).toContain('Too many wrong tokens');
  const rows = await auditRows(admin);
  expect(rows).toEqual(
    expect.arrayContaining([
      expect.stringMatching(
        / \| refused: throttled \| anonymous \| — \| POST \/console\/login \| {2}\| 127\.0\.0\.1$/,
      ),
    ]),
  );
});
