import type { Page } from 'playwright-core';
import { passwordOf } from '../../helpers/oidc-provider';

/**
 * Signing in to the console through the test identity provider in Chromium, as a person does: the
 * console's "Sign in with your identity provider", the provider's own login form, back to the
 * console. Returns the status of the console's callback (200 signed in, 403 refused); once signed
 * in, waits until the page the console sent the browser on to has loaded.
 */
export async function providerSignIn(page: Page, login: string, from = '/console/login'): Promise<number> {
  await page.goto(from);
  await page.getByRole('link', { name: 'Sign in with your identity provider' }).click();
  await page.waitForURL(/\/interaction\//);
  await page.getByLabel('Login').fill(login);
  await page.getByLabel('Password').fill(passwordOf(login));
  const callback = page.waitForResponse((r) => new URL(r.url()).pathname === '/console/oidc/callback');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const status = (await callback).status();
  if (status === 200) await page.waitForURL((u) => !u.pathname.startsWith('/console/oidc/'));
  await page.waitForLoadState('load');
  return status;
}
