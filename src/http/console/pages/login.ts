import { html } from '../html';
import { bareDocument } from '../layout';

/** The sign-in page, and the pages a request gets when it cannot go further. */

/** `next`: the console page to go to once signed in (already checked by the caller). */
export function loginPage(message: string | null = null, next = '/console'): string {
  const alert = message === null ? '' : html`<p class="error-box" role="alert">${message}</p>`;
  const back = next === '/console' ? '' : html`<input type="hidden" name="next" value="${next}" />`;
  return bareDocument(
    'Sign in',
    html`${alert}
      <p>Sign in with the admin token (ADMIN_TOKEN) or the read-only viewer token (VIEWER_TOKEN).</p>
      <form method="post" action="/console/login">
        ${back}
        <div class="field">
          <label for="token">Token</label
          ><input id="token" name="token" type="password" autocomplete="current-password" required />
        </div>
        <p><button type="submit">Sign in</button></p>
      </form>`,
  );
}

/** A page that says what went wrong and where to go (no detail an attacker could use). */
export function messagePage(
  title: string,
  message: string,
  link: { href: string; text: string } = { href: '/console', text: 'Back to the console' },
): string {
  return bareDocument(
    title,
    html`<p class="error-box" role="alert">${message}</p>
      <p><a href="${link.href}">${link.text}</a></p>`,
  );
}
