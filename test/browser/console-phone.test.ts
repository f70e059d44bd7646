import type { Page } from 'playwright-core';
import { h1, horizontalOverflow, screenshot } from './helpers/browser';
import { ADMIN, OTHER_NUS, STORY_NU, VIEWER } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 21 (items 6 and 9), in headless Chromium: the console on a phone (390×844) — chart text at
 * least 10 px as rendered, the funnel's labels inside their chart, tables as cards whose every cell
 * (the actions too) shows without scrolling sideways, the first dead letter's Replay button on the
 * first screen — and no console error on any page (the favicon).
 */

const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1280, height: 900 };

// Evaluated in the page: tsconfig has no DOM library, so the globals used are declared narrowly.
interface Box {
  left: number;
  right: number;
  top: number;
  bottom: number;
  width: number;
  height: number;
}
interface InPageElement {
  tagName: string;
  textContent: string | null;
  clientWidth: number;
  scrollWidth: number;
  getAttribute(name: string): string | null;
  getBoundingClientRect(): Box;
  querySelectorAll(selector: string): ArrayLike<InPageElement>;
  closest(selector: string): InPageElement | null;
  viewBox: { baseVal: { width: number } };
}
declare const document: { querySelectorAll(selector: string): ArrayLike<InPageElement> };
declare function getComputedStyle(e: InPageElement, pseudo?: string): { fontSize: string; content: string };

const bed = consoleBed({ deadLetters: 2 });

const as = (token: string, viewport?: { width: number; height: number }): Promise<Page> =>
  bed.as(token, viewport);

/**
 * Every text of every chart shown, with its rendered size: the font size times the chart's scale
 * (its width on screen over its viewBox's), and the height of its box.
 */
async function chartTexts(page: Page) {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('svg.chart')).flatMap((svg) => {
      const shown = svg.getBoundingClientRect();
      if (shown.width === 0) return [];
      const scale = shown.width / svg.viewBox.baseVal.width;
      return Array.from(svg.querySelectorAll('text')).map((t) => ({
        text: (t.textContent ?? '').trim(),
        px: Math.round(parseFloat(getComputedStyle(t).fontSize) * scale * 10) / 10,
        height: Math.round(t.getBoundingClientRect().height * 10) / 10,
      }));
    }),
  );
}

describe('charts', () => {
  it.each([
    ['phone', PHONE],
    ['desktop', DESKTOP],
  ])('on a %s, every chart text measures at least 10 px (overview and funnel)', async (_name, viewport) => {
    const page = await as(VIEWER, viewport);
    const texts = [...(await chartTexts(page))];
    await page.goto('/console/proposals');
    texts.push(...(await chartTexts(page)));
    // Axis values and hour labels of two charts, and the funnel's labels and values.
    expect(texts.length).toBeGreaterThan(30);
    expect(texts.filter((t) => t.px < 10 || t.height < 10)).toEqual([]);
  });

  it.each([
    ['phone', PHONE],
    ['desktop', DESKTOP],
  ])("on a %s, the funnel's labels lie inside its chart (none cut off)", async (name, viewport) => {
    const page = await as(VIEWER, viewport);
    await page.goto('/console/proposals');
    const outside = await page.evaluate(() =>
      Array.from(document.querySelectorAll('svg.chart')).flatMap((svg) => {
        const frame = svg.getBoundingClientRect();
        if (frame.width === 0) return [];
        return Array.from(svg.querySelectorAll('text'))
          .map((t) => ({ text: (t.textContent ?? '').trim(), box: t.getBoundingClientRect() }))
          .filter(
            ({ box }) =>
              box.left < frame.left - 0.5 ||
              box.right > frame.right + 0.5 ||
              box.top < frame.top - 0.5 ||
              box.bottom > frame.bottom + 0.5,
          )
          .map(({ text, box }) => `${text}: ${Math.round(box.left)}–${Math.round(box.right)} px`);
      }),
    );
    await screenshot(page, `funnel-${name}`);
    expect(outside).toEqual([]);
    expect(await page.locator('svg.chart >> visible=true').count()).toBe(1);
    expect(await page.locator('svg.chart >> visible=true').locator('text').first().textContent()).toBe(
      'Proposta · em_analise',
    );
  });
});

describe('tables on a phone', () => {
  it('the first dead letter and its Replay button are on the first screen, the filters folded above', async () => {
    const page = await as(ADMIN, PHONE);
    await page.goto('/console/dead');
    expect(await h1(page)).toBe('Dead letters');
    await screenshot(page, 'phone-dead-letters-first-screen');
    const replay = page.getByRole('button', { name: 'Replay' }).first();
    const box = await replay.evaluate((b: unknown) => (b as InPageElement).getBoundingClientRect());
    expect(box.top).toBeGreaterThanOrEqual(0);
    expect(box.left).toBeGreaterThanOrEqual(0);
    expect(box.bottom).toBeLessThanOrEqual(PHONE.height);
    expect(box.right).toBeLessThanOrEqual(PHONE.width);
    // The filters are there, folded; opened, they work as before.
    expect(await page.getByLabel('evento', { exact: true }).isVisible()).toBe(false);
    await page.getByText('Filter dead events').click();
    expect(await page.getByLabel('evento', { exact: true }).isVisible()).toBe(true);
  });

  it('a stuck proposal\'s "stuck since" shows in its card, inside the width of the screen', async () => {
    // Proposal 456, unchanged for weeks: past em_analise's stuck limit.
    bed.story.r.store.db
      .prepare("UPDATE proposals SET updated_at = '2026-01-02T03:04:05.000Z' WHERE nu_proposta = ?")
      .run(OTHER_NUS[0]);
    const page = await as(VIEWER, PHONE);
    await page.goto('/console/proposals?stuck=yes');
    await screenshot(page, 'phone-cards-stuck');
    const cell = page.locator('td', { hasText: 'stuck since' }).first();
    const seen = await cell.evaluate((td: unknown) => {
      const e = td as InPageElement;
      return { box: e.getBoundingClientRect(), label: getComputedStyle(e, '::before').content };
    });
    expect(seen.label).toBe('"stuck"');
    expect(seen.box.left).toBeGreaterThanOrEqual(0);
    expect(seen.box.right).toBeLessThanOrEqual(PHONE.width);
    expect(await cell.isVisible()).toBe(true);
  });

  it.each([
    ['events', '/console/events'],
    ['dead-letters', '/console/dead'],
    ['proposals', '/console/proposals'],
    ['averbacoes', '/console/averbacoes'],
    ['deliveries', '/console/deliveries'],
    ['forwarding', '/console/forwards'],
    ['overview', '/console'],
  ])('%s: each row a card of labelled cells, nothing scrolling sideways', async (name, path) => {
    const page = await as(ADMIN, PHONE);
    await page.goto(path);
    await screenshot(page, `phone-cards-${name}`);
    expect(await horizontalOverflow(page)).toEqual([]);
    const found = await page.evaluate(
      ({ width }) => {
        const problems: string[] = [];
        let cells = 0;
        for (const wrap of Array.from(document.querySelectorAll('.table-wrap.cards'))) {
          if (wrap.scrollWidth > wrap.clientWidth + 1)
            problems.push(`${wrap.getAttribute('aria-label')} scrolls sideways`);
          const headings = Array.from(wrap.querySelectorAll('thead th')).map((th) => th.textContent?.trim());
          for (const cell of Array.from(wrap.querySelectorAll('tbody td, tbody th'))) {
            cells++;
            const box = cell.getBoundingClientRect();
            if (box.width > 0 && (box.right > width + 1 || box.left < -1))
              problems.push(
                `a cell of ${wrap.getAttribute('aria-label')} ends at ${Math.round(box.right)} px`,
              );
            const label = getComputedStyle(cell, '::before').content;
            if (!headings.some((h) => label === `"${h}"`))
              problems.push(`a cell of ${wrap.getAttribute('aria-label')} is labelled ${label}`);
          }
        }
        return { problems, cells };
      },
      { width: PHONE.width },
    );
    expect(found.problems).toEqual([]);
    expect(found.cells).toBeGreaterThan(0);
  });
});

describe('console errors', () => {
  // A page that declares no icon makes a browser ask for /favicon.ico, a 404 logged as an error in
  // its console (headless Chromium does not ask, hence the check of the declaration itself).
  it('every page declares its icon, which is served; no page logs an error in the console', async () => {
    const context = await bed.context(DESKTOP);
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`${page.url()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => errors.push(`${page.url()}: ${e.message}`));
    page.on('response', (r) => {
      if (r.status() >= 400) errors.push(`${r.url()}: ${r.status()}`);
    });
    await page.goto('/console/login');
    await page.getByLabel('Token').fill(ADMIN);
    await Promise.all([page.waitForURL('**/console'), page.getByRole('button', { name: 'Sign in' }).click()]);
    const icons = new Set<string>();
    for (const path of [
      '/console/login',
      '/console',
      '/console/proposals',
      `/console/proposals/${STORY_NU}`,
      '/console/events',
      `/console/events/${bed.story.deadEventIds[0]}`,
      '/console/deliveries',
      '/console/dead',
      '/console/averbacoes',
      '/console/forwards',
      '/console/audit',
    ]) {
      await page.goto(path);
      // Everything the page asked for has answered (an error would be in `errors` by now).
      await page.waitForLoadState('networkidle');
      const icon = await page.evaluate(
        () => document.querySelectorAll('link[rel="icon"]')[0]?.getAttribute('href') ?? null,
      );
      icons.add(icon ?? `no icon on ${path}`);
    }
    expect(errors).toEqual([]);
    expect([...icons]).toEqual(['/console/assets/favicon.svg']);
    const icon = await context.request.get('/console/assets/favicon.svg');
    expect(icon.status()).toBe(200);
    expect(icon.headers()['content-type']).toMatch(/^image\/svg\+xml/);
    expect(await icon.text()).toMatch(/^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  });
});
