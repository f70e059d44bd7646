import type { Page } from 'playwright-core';
import { h1, horizontalOverflow, navigateBy, screenshot } from './helpers/browser';
import { ADMIN, OTHER_NUS, STORY_NU, VIEWER } from './helpers/story';
import { consoleBed } from './helpers/bed';

/**
 * Issue 12, in headless Chromium: a proposal's story as one timeline in time order, the events
 * list filtered through its form into a URL that shows the same rows to someone else, the
 * overview's server-drawn charts, and the pages on a phone-sized screen.
 */

const bed = consoleBed();

const as = (token: string, viewport?: { width: number; height: number }): Promise<Page> =>
  bed.as(token, viewport);

/** The rows of the page's first table: one array of cell texts per row. */
async function tableRows(page: Page): Promise<string[][]> {
  const rows = page.locator('table').first().locator('tbody tr');
  const out: string[][] = [];
  for (const row of await rows.all())
    out.push((await row.locator('th, td').allInnerTexts()).map((t) => t.trim()));
  return out;
}

describe("a proposal's page", () => {
  it('tells its story as one timeline in time order: events, the duplicate, transitions, the late one', async () => {
    const page = await as(VIEWER);
    // Reached the way an operator would: search by nu_proposta from the proposals page.
    await page.goto('/console/proposals');
    expect(await h1(page)).toBe('Proposals');
    const search = page.locator('form[method="get"]').filter({ has: page.locator('[name="nu"]') });
    await search.locator('[name="nu"]').fill(String(STORY_NU));
    await navigateBy(page, () => search.getByRole('button').first().click());
    expect(new URL(page.url()).pathname).toBe(`/console/proposals/${STORY_NU}`);
    expect(await h1(page)).toBe(`Proposal ${STORY_NU}`);

    const items = page.locator('ol.timeline > li');
    const n = await items.count();
    expect(n).toBeGreaterThanOrEqual(10);
    const timeline: { kind: string; at: string; text: string }[] = [];
    for (const li of await items.all()) {
      timeline.push({
        kind: (await li.getAttribute('data-kind')) ?? '',
        // The item's own time is its first child; its text may hold more times (a poll's).
        at: (await li.locator(':scope > time').first().getAttribute('datetime')) ?? '',
        text: (await li.innerText()).replace(/\s+/g, ' '),
      });
    }
    const instants = timeline.map((t) => Date.parse(t.at));
    expect(instants.every((ms) => Number.isFinite(ms))).toBe(true);
    const outOfOrder = instants.flatMap((ms, i) =>
      i > 0 && ms < (instants[i - 1] as number) ? [`${timeline[i - 1]?.at} then ${timeline[i]?.at}`] : [],
    );
    expect(outOfOrder).toEqual([]);

    const kinds = new Set(timeline.map((t) => t.kind));
    for (const kind of ['event', 'duplicate', 'transition', 'averbacao', 'forward'])
      expect(kinds).toContain(kind);
    const transitions = timeline.filter((t) => t.kind === 'transition').map((t) => t.text);
    expect(transitions.some((t) => /\(new\) → em_analise/.test(t))).toBe(true);
    expect(transitions.some((t) => /pre_aprovada → aprovada/.test(t))).toBe(true);
    const late = timeline.filter((t) => t.kind === 'transition' && t.text.includes('recorded, not applied'));
    expect(late.length).toBeGreaterThanOrEqual(1);
    expect(late.some((t) => t.text.includes('out of order'))).toBe(true);
    // The late transition comes after the one that moved the proposal past it.
    const lateIndex = timeline.findIndex((t) => t.text.includes('would set pre_aprovada'));
    const requested = timeline.findIndex(
      (t) => t.kind === 'transition' && t.text.includes('→ averbacao_solicitada'),
    );
    expect(requested).toBeGreaterThanOrEqual(0);
    expect(lateIndex).toBeGreaterThan(requested);
    expect(timeline.some((t) => t.kind === 'duplicate' && t.text.includes('1 duplicate delivery'))).toBe(
      true,
    );
    // The CPF is masked, and the raw body is one click away.
    expect(await page.locator('main').innerText()).not.toContain('12345678909');
    await screenshot(page, 'proposal');
    const firstEvent = bed.story.storyEventIds[0] as number;
    await navigateBy(page, () =>
      page.locator('ol.timeline').locator(`a[href="/console/events/${firstEvent}"]`).first().click(),
    );
    expect(await h1(page)).toBe(`Event ${firstEvent}`);
    const body = await page.locator('pre.body').innerText();
    expect(body).toContain('"evento": "proposta.criada"');
    expect(body).not.toContain('12345678909');
  });
});

describe('events', () => {
  it('filters with the form, keeps the filters in the URL, and the URL shows the same rows elsewhere', async () => {
    const page = await as(ADMIN);
    await page.goto('/console/events');
    expect(await h1(page)).toBe('Events');
    const all = await tableRows(page);
    const filters = page.locator('form.filters');
    await filters.getByLabel('Status').selectOption('done');
    await filters.getByLabel('evento', { exact: true }).fill('proposta.criada');
    await navigateBy(page, () => filters.getByRole('button', { name: 'Apply' }).click());

    const url = new URL(page.url());
    expect(url.pathname).toBe('/console/events');
    expect(url.searchParams.get('status')).toBe('done');
    expect(url.searchParams.get('evento')).toBe('proposta.criada');
    // The form shows the filters it applied.
    expect(await filters.getByLabel('Status').inputValue()).toBe('done');
    expect(await filters.getByLabel('evento', { exact: true }).inputValue()).toBe('proposta.criada');

    const rows = await tableRows(page);
    // One proposta.criada each for 123 and the other proposals; fewer rows than unfiltered.
    expect(rows.length).toBe(1 + OTHER_NUS.length);
    expect(rows.length).toBeLessThan(all.length);
    for (const row of rows) expect(row).toContain('proposta.criada');
    expect(await page.locator('table tbody tr .status').count()).toBe(rows.length);
    expect(await page.locator('table tbody tr .status-done').count()).toBe(rows.length);
    await screenshot(page, 'events-filtered');

    // Shared: someone else, signed in, opens the same address and sees the same rows.
    const other = await as(VIEWER);
    await other.goto(url.pathname + url.search);
    expect(await h1(other)).toBe('Events');
    expect(await tableRows(other)).toEqual(rows);
    expect(await other.locator('form.filters').getByLabel('Status').inputValue()).toBe('done');

    // Someone not signed in yet: the link leads to the sign-in page, and from there to the view.
    const fresh = await bed.context();
    const third = await fresh.newPage();
    await third.goto(url.pathname + url.search);
    expect(new URL(third.url()).pathname).toBe('/console/login');
    await third.getByLabel('Token').fill(VIEWER);
    await navigateBy(third, () => third.getByRole('button', { name: 'Sign in' }).click());
    const landed = new URL(third.url());
    expect(landed.pathname + landed.search).toBe(url.pathname + url.search);
    expect(await tableRows(third)).toEqual(rows);
  });
});

describe('overview', () => {
  it('draws its charts: labelled SVG images with bars in them', async () => {
    const page = await as(ADMIN);
    expect(await h1(page)).toBe('Overview');
    // Each chart is drawn for a desktop and for a phone: the desktop's shows here.
    const charts = page.locator('svg.chart >> visible=true');
    expect(await charts.count()).toBe(2);
    expect(await page.locator('svg.chart-narrow >> visible=true').count()).toBe(0);
    for (const chart of await charts.all()) {
      expect(await chart.getAttribute('role')).toBe('img');
      const label = (await chart.getAttribute('aria-label')) ?? '';
      expect(label.length).toBeGreaterThan(10);
      expect(await chart.isVisible()).toBe(true);
      const box = await chart.boundingBox();
      expect(box?.width ?? 0).toBeGreaterThan(100);
      expect(box?.height ?? 0).toBeGreaterThan(30);
    }
    // Deliveries arrived within the hour: the 24-hour chart and the 7-day chart both have bars
    // of a real size, and their labels count them.
    const sent = (bed.story.r.store.db.prepare('SELECT count(*) AS n FROM deliveries').get() as { n: number })
      .n;
    for (const chart of (await charts.all()).slice(0, 2)) {
      expect(await chart.getAttribute('aria-label')).toContain(`${sent} in total`);
      const bars = chart.locator('rect');
      expect(await bars.count()).toBeGreaterThan(0);
      const heights = await Promise.all(
        (await bars.all()).map(async (b) => (await b.boundingBox())?.height ?? 0),
      );
      expect(Math.max(...heights)).toBeGreaterThan(1);
    }
    await screenshot(page, 'overview');
  });
});

describe('on a phone', () => {
  const PHONE = { width: 390, height: 844 };

  it.each([
    ['overview', () => '/console'],
    ['proposal', () => `/console/proposals/${STORY_NU}`],
    ['event', () => `/console/events/${bed.story.storyEventIds[3]}`],
    ['events', () => '/console/events'],
    ['dead-letters', () => '/console/dead'],
  ])('renders the %s page without horizontal scrolling at 390×844', async (name, path) => {
    const page = await as(ADMIN, PHONE);
    await page.goto(path());
    expect(await page.locator('h1').isVisible()).toBe(true);
    await screenshot(page, `phone-${name}`);
    expect(await horizontalOverflow(page)).toEqual([]);
  });
});
