import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AxeResults, RunOptions } from 'axe-core';
import {
  type Browser,
  type BrowserContext,
  chromium,
  type Page,
  type Response as PwResponse,
} from 'playwright-core';

/**
 * Headless Chromium for the console's browser tests: Debian's `chromium` driven by playwright-core
 * (which never downloads a browser; `scripts/install-ci-packages.sh` installs the package), a
 * sign-in through the real form, screenshots kept under `test-artifacts/` (not committed), and
 * axe-core run inside the page.
 */

// The pages are evaluated in the browser, not here: tsconfig has no DOM library, so the few globals
// the in-page functions read are declared as narrowly as they are used.
interface InPageElement {
  tagName: string;
  className: unknown;
  textContent: string | null;
  childElementCount: number;
  getBoundingClientRect(): { right: number };
  remove(): void;
}
declare const document: {
  scrollingElement: { scrollWidth: number } | null;
  querySelectorAll(selector: string): ArrayLike<InPageElement>;
};
declare const window: { innerWidth: number };
declare const axe: { run(context: unknown, options: RunOptions): Promise<AxeResults> };

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const REPO = join(__dirname, '..', '..', '..');
export const SCREENSHOTS = join(REPO, 'test-artifacts', 'screenshots');

/** Launches Chromium, or fails saying how to get it: a missing browser is a failure, never a skip. */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM_PATH}: the browser tests need it. ` +
        'Run `bash scripts/install-ci-packages.sh` (installs Debian chromium), or set CHROMIUM_PATH.',
    );
  }
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update'],
  });
}

/** A fresh context (its own cookies) pointed at the receiver. */
export function newContext(
  browser: Browser,
  baseURL: string,
  viewport = { width: 1280, height: 900 },
): Promise<BrowserContext> {
  return browser.newContext({ baseURL, viewport });
}

/**
 * Runs `action` (a click that submits a form) and waits until the page it leads to, after any
 * redirect, has loaded; returns that page's HTTP status.
 */
export async function navigateBy(page: Page, action: () => Promise<void>): Promise<number> {
  const isFinal = (r: PwResponse) =>
    r.request().isNavigationRequest() &&
    r.frame() === page.mainFrame() &&
    (r.status() < 300 || r.status() >= 400);
  const response = page.waitForResponse(isFinal);
  const committed = page.waitForEvent('framenavigated', (f) => f === page.mainFrame());
  // If the action itself fails, its error is the one to see, not these waits timing out later.
  response.catch(() => undefined);
  committed.catch(() => undefined);
  await action();
  const [res] = await Promise.all([response, committed]);
  await page.waitForLoadState('load');
  return res.status();
}

/** Signs in through the form; returns the status of the page the console sent it to. */
export async function signIn(page: Page, token: string): Promise<number> {
  await page.goto('/console/login');
  await page.getByLabel('Token').fill(token);
  return navigateBy(page, () => page.getByRole('button', { name: 'Sign in' }).click());
}

/** A new context signed in with `token`, and its page on the overview. */
export async function signedInPage(
  browser: Browser,
  baseURL: string,
  token: string,
  viewport?: { width: number; height: number },
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await newContext(browser, baseURL, viewport);
  const page = await context.newPage();
  await signIn(page, token);
  return { context, page };
}

/** The page's `<h1>` text. */
export async function h1(page: Page): Promise<string> {
  return (await page.locator('h1').innerText()).trim();
}

/** Saves a full-page screenshot as test-artifacts/screenshots/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/**
 * What makes the page wider than its window: empty when it does not scroll sideways (1 px of
 * rounding allowed), otherwise the width and the innermost elements sticking out on the right, so
 * a failure names its culprit. (A wide table scrolling inside its own wrapper does not widen the page.)
 */
export async function horizontalOverflow(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = window.innerWidth;
    const scrollWidth = document.scrollingElement?.scrollWidth ?? 0;
    if (scrollWidth <= width + 1) return [];
    const out = [`page ${scrollWidth} px wide in a ${width} px window`];
    for (const e of Array.from(document.querySelectorAll('body *'))) {
      if (e.childElementCount > 0 || e.getBoundingClientRect().right <= width + 1) continue;
      const text = (e.textContent ?? '').replace(/\s+/g, ' ').trim().slice(0, 40);
      out.push(
        `${e.tagName.toLowerCase()}.${String(e.className)} ends at ${Math.round(e.getBoundingClientRect().right)} px: "${text}"`,
      );
    }
    return out.slice(0, 10);
  });
}

/** Removes every element matching `selector` from the live page (to forge a request). */
export async function removeAll(page: Page, selector: string): Promise<number> {
  return page.evaluate((s) => {
    const found = Array.from(document.querySelectorAll(s));
    found.forEach((e) => e.remove());
    return found.length;
  }, selector);
}

let axeSource: string | undefined;

/** The WCAG 2.0/2.1 A and AA rules plus axe's best practices. */
export const AXE_OPTIONS: RunOptions = {
  runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] },
};

/**
 * Runs axe-core in the page and returns its serious and critical violations, one line each with
 * the rule, its help text and the elements it found, so that a failing assertion explains itself.
 * The script is evaluated rather than added as a `<script>`: the console's Content-Security-Policy
 * allows no script, and the check should see the page under its real policy.
 */
export async function seriousViolations(page: Page): Promise<string[]> {
  axeSource ??= readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
  await page.evaluate(axeSource);
  const results = await page.evaluate((options) => axe.run(document, options), AXE_OPTIONS);
  if (results.passes.length === 0) throw new Error(`axe-core checked nothing on ${page.url()}`);
  return results.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map(
      (v) =>
        `${v.id} (${v.impact}): ${v.help} — ${v.nodes
          .map(
            (n) =>
              `${n.target.join(' ')}${n.failureSummary ? ` [${n.failureSummary.replace(/\s+/g, ' ')}]` : ''}`,
          )
          .join('; ')}`,
    );
}

/** Polls `check` until it holds; fails naming `what` after `timeoutMs`. */
export async function until(check: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
