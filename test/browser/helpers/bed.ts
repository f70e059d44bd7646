import type { Browser, BrowserContext, Page } from 'playwright-core';
import { launchBrowser, newContext, signedInPage } from './browser';
import { type ConsoleStory, startConsoleStory } from './story';

/**
 * What a browser test file of the console needs, with its Jest hooks: one Chromium and one
 * console story (a receiver with real data, see story.ts) for the file, and browser contexts closed
 * after each test. Read `browser` and `story` inside tests or hooks, not at load time.
 */
export function consoleBed(options: Parameters<typeof startConsoleStory>[0] = {}) {
  const contexts: BrowserContext[] = [];
  const bed = {
    browser: undefined as unknown as Browser,
    story: undefined as unknown as ConsoleStory,
    /** A fresh context on the story's receiver (signed out), closed after the test. */
    async context(viewport?: { width: number; height: number }): Promise<BrowserContext> {
      const context = await newContext(bed.browser, bed.story.r.url, viewport);
      contexts.push(context);
      return context;
    },
    /** A page signed in with `token`, in a context of its own closed after the test. */
    async as(token: string, viewport?: { width: number; height: number }): Promise<Page> {
      const signed = await signedInPage(bed.browser, bed.story.r.url, token, viewport);
      contexts.push(signed.context);
      return signed.page;
    },
  };
  beforeAll(async () => {
    bed.browser = await launchBrowser();
    bed.story = await startConsoleStory(options);
  }, 120_000);
  afterAll(async () => {
    await bed.browser?.close();
    await bed.story?.stop();
  });
  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((c) => c.close()));
  });
  return bed;
}
