import type { Request, Response, Router } from 'express';
import { oidcFingerprint } from '../../domain/console';
import {
  groupsOf,
  openPending,
  PENDING_TTL_MS,
  type PendingSignIn,
  personLabel,
  personOf,
  roleForGroups,
} from '../../domain/oidc';
import {
  addressOf,
  audit,
  nextPath,
  openSession,
  refuse,
  secureCookies,
  signInOptions,
} from './console-auth';
import type { ConsoleDeps } from './deps';
import { html } from './html';
import { bareDocument } from './layout';
import { type OidcClient, SignInRefused } from './oidc-client';
import { loginPage, messagePage } from './pages/login-page';
import { cookieValue, DUPLICATE, pendingCookie, pendingCookieName, sessionCookie } from './session';
import type { LoginThrottle } from './throttle';

/**
 * Signing in through the identity provider (issue 34): `GET /console/oidc/start` sends the browser
 * to the provider with a new pending sign-in sealed in its cookie; `GET /console/oidc/callback`
 * takes the provider's answer, has openid-client check it, and opens a session for a person in one
 * of the console's groups. Every refusal is audited and opens nothing; failures count toward the
 * sign-in throttle as wrong tokens do, so a forged callback cannot be tried without end.
 */

/** Groups named in a refused sign-in's audit row at most. */
const AUDIT_GROUPS = 20;

function secure(d: ConsoleDeps, req: Request): boolean {
  return secureCookies(d, req);
}

/** The sign-in page saying the provider cannot be reached (its own alert; the tokens if break-glass). */
async function unreachablePage(d: ConsoleDeps, oidc: OidcClient, next: string): Promise<string> {
  const { tokens } = await signInOptions(d);
  return loginPage(null, next, {
    tokens,
    provider: { reachable: false, host: new URL(oidc.settings.issuer).host },
  });
}

function start(d: ConsoleDeps, oidc: OidcClient) {
  return async (req: Request, res: Response): Promise<void> => {
    const next = nextPath(req.query.next);
    const started = await oidc.start(next);
    if (started === undefined) {
      res
        .status(503)
        .set('retry-after', '2')
        .send(await unreachablePage(d, oidc, next));
      return;
    }
    res.append('set-cookie', pendingCookie(started.sealed, PENDING_TTL_MS, secure(d, req)));
    res.redirect(303, started.url.href);
  };
}

/** A refused callback: audited (who, when the provider named them), counted, a page saying why. */
async function refused(
  d: ConsoleDeps,
  req: Request,
  res: Response,
  throttle: LoginThrottle,
  failure: { reason: string; message: string },
): Promise<void> {
  await throttle.failed(addressOf(d, req), d.clock.now().getTime());
  await audit(d, req, null, 'sign_in_failed', 'oidc', {
    via: 'oidc',
    reason: failure.reason,
    message: failure.message,
  });
  d.logger.warn(
    { reason: failure.reason, ip: addressOf(d, req) },
    'console: identity provider sign-in refused',
  );
  res.status(403).send(
    messagePage('Sign-in refused', `This sign-in cannot be completed: ${failure.message}`, {
      href: '/console/login',
      text: 'Sign in again',
    }),
  );
}

/**
 * After a sign-in the browser moves on by a page of ours, not a redirect: the session cookie is
 * SameSite=Strict, and a redirect answering the provider's cross-site navigation would not carry
 * it to the next page.
 */
function continuePage(next: string): string {
  return bareDocument(
    'Signed in',
    html`<p>Signed in. <a href="${next}">Continue to the console</a>.</p>`,
    html`<meta http-equiv="refresh" content="0; url=${next}" />`,
  );
}

/** The page for a person the provider vouched for who is in neither of the console's groups. */
function notInGroupPage(person: string, claim: string): string {
  return messagePage(
    'Not allowed',
    `You are signed in at the identity provider as ${person}, but you are in neither of the console's groups ` +
      `(the ${claim} values of OIDC_ADMIN_GROUPS or OIDC_VIEWER_GROUPS), so the console does not let you in. ` +
      'Ask the people who run the receiver to add you to one of them.',
    { href: '/console/login', text: 'Sign in' },
  );
}

/**
 * Opens the session of a person in one of the console's groups, and only then clears the address's
 * failed sign-ins (issue 44: an account the provider vouches for but in no group must not reset
 * the throttle for forged callbacks from the same address). The session lasts OIDC_SESSION_TTL
 * (CONSOLE_SESSION_TTL when shorter): the groups are read again at the next sign-in.
 */
async function signedIn(
  d: ConsoleDeps,
  oidc: OidcClient,
  throttle: LoginThrottle,
  req: Request,
  res: Response,
  claims: Record<string, unknown>,
  pending: PendingSignIn,
): Promise<void> {
  const person = personOf(claims);
  if (person === undefined) throw new SignInRefused('no_subject', 'the ID token names no one.');
  const groups = groupsOf(claims, oidc.settings.groupsClaim);
  const role = roleForGroups(groups, oidc.settings);
  if (role === null) {
    await audit(d, req, { role: null, tag: null, person }, 'sign_in_refused', 'oidc', {
      reason: 'no_group',
      groups: groups.slice(0, AUDIT_GROUPS),
    });
    res.status(403).send(notInGroupPage(personLabel(person), oidc.settings.groupsClaim));
    return;
  }
  const ttlMs = Math.min(d.sessionTtlMs, oidc.settings.sessionTtlMs);
  const { id, tag } = await openSession(d, role, oidcFingerprint(oidc.settings), person, ttlMs);
  await throttle.succeeded(addressOf(d, req));
  await audit(d, req, { role, tag, person }, 'sign_in', null, { via: 'oidc' });
  res.append('set-cookie', sessionCookie(id, ttlMs, d.clock.now(), secure(d, req)));
  res.send(continuePage(pending.next));
}

function callback(d: ConsoleDeps, oidc: OidcClient, throttle: LoginThrottle) {
  return async (req: Request, res: Response): Promise<void> => {
    const ip = addressOf(d, req);
    const wait = await throttle.retryAfter(ip, d.clock.now().getTime());
    // The pending sign-in is used once, whatever happens to it.
    res.append('set-cookie', pendingCookie(undefined, 0, secure(d, req)));
    if (wait > 0) {
      // Counted on one row per hour as the token form's throttled sign-ins are: a flood adds no rows.
      await refuse(d, req, null, 'throttled');
      res
        .status(429)
        .set('retry-after', String(wait))
        .send(messagePage('Too many attempts', `Try again in ${wait} s.`));
      return;
    }
    const sealed = cookieValue(req, pendingCookieName(secure(d, req)));
    if (sealed === DUPLICATE) {
      // Ours and one planted by a sibling subdomain (no `__Host-` without TLS): neither is trusted.
      const message = 'this browser carries two pending sign-ins, one not set by this site: start again.';
      await refused(d, req, res, throttle, { reason: 'pending_duplicate', message });
      return;
    }
    const pending = openPending(sealed, await oidc.pendingKey(), d.clock.now().getTime());
    if ('problem' in pending) {
      const message = 'no sign-in was started in this browser, or it expired: start again.';
      await refused(d, req, res, throttle, { reason: `pending_${pending.problem}`, message });
      return;
    }
    try {
      // The provider answered PUBLIC_URL's callback: that, not this hop's Host, is the URL it checks.
      const current = new URL(`${oidc.settings.publicUrl}${req.originalUrl}`);
      const claims = await oidc.finish(pending, current);
      await signedIn(d, oidc, throttle, req, res, claims, pending);
    } catch (err) {
      if (!(err instanceof SignInRefused)) throw err;
      await refused(d, req, res, throttle, { reason: err.reason, message: err.message });
    }
  };
}

/** Mounts the provider's routes (before the session check: they are how a session begins). */
export function oidcRoutes(router: Router, d: ConsoleDeps, throttle: LoginThrottle): void {
  const oidc = d.oidc;
  if (oidc === null) return;
  router.get('/oidc/start', start(d, oidc));
  router.get('/oidc/callback', callback(d, oidc, throttle));
}
