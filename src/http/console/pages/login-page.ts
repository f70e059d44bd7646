import { html, type SafeHtml } from '../html';
import { bareDocument } from '../layout';

/** The sign-in page, and the pages a request gets when it cannot go further. */

/** What the sign-in page offers (http/console/console-auth.ts signInOptions). */
export interface SignInOptions {
  /** The token form: no identity provider configured, or break-glass on. */
  tokens: boolean;
  /** The identity provider, when configured: whether it answers now, and its host. */
  provider: { reachable: boolean; host: string } | null;
}

function tokenForm(next: string): SafeHtml {
  const back = next === '/console' ? '' : html`<input type="hidden" name="next" value="${next}" />`;
  return html`<form method="post" action="/console/login">
    ${back}
    <div class="field">
      <label for="token">Token</label
      ><input id="token" name="token" type="password" autocomplete="current-password" required />
    </div>
    <p><button type="submit">Sign in</button></p>
  </form>`;
}

/** The provider's button (a link: starting a sign-in changes nothing here), and its state. */
function providerPart(provider: { reachable: boolean; host: string }, next: string): SafeHtml {
  const start =
    next === '/console' ? '/console/oidc/start' : `/console/oidc/start?next=${encodeURIComponent(next)}`;
  const down = provider.reachable
    ? ''
    : html`<p class="error-box" role="alert">
        The identity provider (${provider.host}) cannot be reached right now, so no one can sign in with it.
        Try again in a moment; webhooks are still received.
      </p>`;
  return html`${down}
    <p>Sign in with your organisation's account at ${provider.host}.</p>
    <p><a class="button" href="${start}">Sign in with your identity provider</a></p>`;
}

/** `next`: the console page to go to once signed in (already checked by the caller). */
export function loginPage(
  message: string | null = null,
  next = '/console',
  options: SignInOptions = { tokens: true, provider: null },
): string {
  const alert = message === null ? '' : html`<p class="error-box" role="alert">${message}</p>`;
  if (options.provider === null)
    return bareDocument(
      'Sign in',
      html`${alert}
        <p>Sign in with the admin token (ADMIN_TOKEN) or the read-only viewer token (VIEWER_TOKEN).</p>
        ${tokenForm(next)}`,
    );
  const breakGlass = options.tokens
    ? html`<section aria-labelledby="break-glass">
        <h2 id="break-glass">Break-glass sign-in</h2>
        <p class="note">
          For when the identity provider is down: sign in with ADMIN_TOKEN or VIEWER_TOKEN. Such a sign-in is
          recorded as break-glass in the audit and in the log.
        </p>
        ${tokenForm(next)}
      </section>`
    : '';
  return bareDocument('Sign in', html`${alert}${providerPart(options.provider, next)}${breakGlass}`);
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
