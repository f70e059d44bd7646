import type { NextFunction, Request, RequestHandler, Response, Router } from 'express';
import { clientAddress } from '../../domain/cidr';
import {
  type AuditAction,
  type ConsoleRole,
  MAX_ROUTE_CHARS,
  type RefusalReason,
  sessionTokenCurrent,
  tokenFingerprint,
} from '../../domain/console';
import { maskCpfsInText } from '../../domain/privacy';
import { isLockBusy } from '../../domain/errors';
import { type Person, personDisplay, personLabel } from '../../domain/oidc';
import type { ConsoleDeps } from './deps';
import type { PageContext } from './layout';
import { loginPage, messagePage, type SignInOptions } from './pages/login-page';
import {
  type ConsoleSession,
  clearedCookie,
  cookiesSecure,
  cookieValues,
  csrfMatches,
  csrfToken,
  hashSessionId,
  newSessionId,
  roleForToken,
  sessionCookie,
  sessionCookieName,
  sessionIdFrom,
  sessionTag,
} from './session';
import type { LoginThrottle } from './throttle';

/**
 * Signing in and out of the console, the session every other page needs, and the checks every
 * POST passes (same origin, CSRF token, admin role for actions). Sessions live in the log
 * (`console_sessions`: the SQLite file, or PostgreSQL in cluster mode), so they survive a restart
 * and a hand-over, and a replica behind a load balancer knows a session another one opened.
 */

/** last_seen is written at most this often per session: a page view is not a write. */
const TOUCH_EVERY_MS = 60_000;
/** A token longer than this is not one of ours (and is not hashed). */
const MAX_TOKEN_CHARS = 1024;

/** What requireSession leaves for the routes after it. */
interface Signed {
  id: string;
  session: ConsoleSession;
}

function signedIn(res: Response): Signed {
  return res.locals.console as Signed;
}

/** The page context of the signed-in request. */
export function contextOf(d: ConsoleDeps, res: Response): PageContext {
  const { session } = signedIn(res);
  return {
    role: session.role,
    csrf: session.csrf,
    now: d.clock.now(),
    person: session.person === null ? null : personDisplay(session.person),
  };
}

/**
 * Whether this request's cookies are Secure and `__Host-` (session.ts): PUBLIC_URL is https, or the
 * request came over TLS.
 */
export function secureCookies(d: ConsoleDeps, req: Request): boolean {
  return cookiesSecure(req, d.trustProxy, d.httpsPublicUrl);
}

export function addressOf(d: ConsoleDeps, req: Request): string {
  return clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for'], d.trustProxy);
}

/** Who did something: the role, the session's short tag and its person; null before a sign-in. */
export type Actor = {
  role: ConsoleRole | null;
  tag: string | null;
  person?: Person | null;
} | null;

/** The audit's name for the actor's person (e-mail, else subject); null for a token or no one. */
function personOfActor(actor: Actor): string | null {
  return actor?.person === undefined || actor.person === null ? null : personLabel(actor.person);
}

/** The signed-in request's actor. */
export function actorOf(res: Response): Actor {
  return (res.locals.console as Signed | undefined)?.session ?? null;
}

/** Records an action in `console_audit` (the session by its tag, never its id). */
export function audit(
  d: ConsoleDeps,
  req: Request,
  actor: Actor,
  action: AuditAction,
  target: string | null,
  detail: Record<string, unknown> | null = null,
): Promise<void> {
  return d.log.audit.record({
    at: d.clock.now().toISOString(),
    role: actor?.role ?? null,
    session: actor?.tag ?? null,
    person: personOfActor(actor),
    action,
    target,
    detail,
    ip: addressOf(d, req),
  });
}

/**
 * Records a refused request (403 or 429) in `console_audit`: who (the session's role and tag, or
 * anonymous), the route, why; aggregated by the store so that refusals cannot fill the disk. Never
 * the token or the request's body.
 */
export function refuse(d: ConsoleDeps, req: Request, actor: Actor, reason: RefusalReason): Promise<void> {
  return d.log.audit.refuse({
    at: d.clock.now().toISOString(),
    role: actor?.role ?? null,
    session: actor?.tag ?? null,
    person: personOfActor(actor),
    // The path as requested (a mounted check's own req.path is relative to its mount), no query,
    // any CPF-shaped number in it masked (a path is the requester's text).
    route: maskCpfsInText(`${req.method} ${req.originalUrl.split('?')[0] ?? ''}`.slice(0, MAX_ROUTE_CHARS)),
    reason,
    ip: addressOf(d, req),
  });
}

/**
 * A POST from another site is refused: `Sec-Fetch-Site` when the browser sends it, otherwise the
 * `Origin` host against `Host` (or, behind trusted proxies, `X-Forwarded-Host`). Neither header
 * (an old browser, a script) leaves the decision to the CSRF token.
 */
export function sameOrigin(req: Request, trustProxy: number): boolean {
  const site = req.headers['sec-fetch-site'];
  if (typeof site === 'string') return site === 'same-origin' || site === 'none';
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return false;
  }
  const forwarded =
    trustProxy > 0
      ? String(req.headers['x-forwarded-host'] ?? '')
          .split(',')[0]
          ?.trim()
      : '';
  return host === req.headers.host || (forwarded !== undefined && forwarded !== '' && host === forwarded);
}

/** Where to go after signing in: a console page the request named, or the overview. */
export function nextPath(value: unknown): string {
  return typeof value === 'string' && /^\/console(\/[^\\]*)?$/.test(value) && !value.startsWith('//')
    ? value
    : '/console';
}

function signIn(d: ConsoleDeps, throttle: LoginThrottle): RequestHandler {
  return async (req, res) => {
    const now = d.clock.now();
    const ip = addressOf(d, req);
    const body = (req.body ?? {}) as Record<string, unknown>;
    const next = nextPath(req.query.next ?? body.next);
    const wait = await throttle.retryAfter(ip, now.getTime());
    if (wait > 0) {
      await refuse(d, req, null, 'throttled');
      const message = `Too many wrong tokens from this address: try again in ${wait} s.`;
      res
        .status(429)
        .set('retry-after', String(wait))
        .send(loginPage(message, next, await signInOptions(d)));
      return;
    }
    const token = typeof body.token === 'string' && body.token.length <= MAX_TOKEN_CHARS ? body.token : '';
    const role = token === '' ? null : roleForToken(token, d.tokens);
    if (role === null) {
      await throttle.failed(ip, now.getTime());
      await audit(d, req, null, 'sign_in_failed', null);
      res.status(401).send(loginPage('That token does not sign in.', next, await signInOptions(d)));
      return;
    }
    await throttle.succeeded(ip);
    const { id, tag } = await openSession(d, role, tokenFingerprint(token), null, d.sessionTtlMs);
    // While the identity provider is configured, a token signs in only as break-glass (issue 34).
    const breakGlass = d.oidc !== null;
    if (breakGlass) d.logger.warn({ role, session: tag, ip }, 'console: break-glass sign-in with a token');
    await audit(d, req, { role, tag }, breakGlass ? 'sign_in_break_glass' : 'sign_in', null);
    res.set('set-cookie', sessionCookie(id, d.sessionTtlMs, now, secureCookies(d, req)));
    res.redirect(303, next);
  };
}

/**
 * Opens a session (expired ones pruned first) lasting `ttlMs`: its id for the cookie and its tag
 * for the audit. `tokenFp` says what opened it (a token's fingerprint, or the provider's); `person`
 * who, when the identity provider did.
 */
export async function openSession(
  d: ConsoleDeps,
  role: ConsoleRole,
  tokenFp: string,
  person: Person | null,
  ttlMs: number,
): Promise<{ id: string; tag: string }> {
  const now = d.clock.now();
  const id = newSessionId();
  const idHash = hashSessionId(id);
  await d.log.sessions.pruneExpired(now.toISOString());
  await d.log.sessions.create({
    idHash,
    role,
    now: now.toISOString(),
    expiresAt: new Date(now.getTime() + ttlMs).toISOString(),
    tokenFp,
    person,
  });
  return { id, tag: sessionTag(idHash) };
}

/**
 * What the sign-in page offers: the token form (no identity provider, or break-glass), the
 * provider's button, and whether the provider answers now (discovery, retried on each view).
 */
export async function signInOptions(d: ConsoleDeps): Promise<SignInOptions> {
  if (d.oidc === null) return { tokens: true, provider: null };
  const reachable = (await d.oidc.configuration({ recheck: true })) !== undefined;
  return {
    tokens: d.tokens.admin !== undefined || d.tokens.viewer !== undefined,
    provider: { reachable, host: new URL(d.oidc.settings.issuer).host },
  };
}

/** GET/POST /login; POST /logout is mounted after the session and CSRF checks. */
export function loginRoutes(router: Router, d: ConsoleDeps, throttle: LoginThrottle): void {
  router.get('/login', async (req, res) => {
    res.send(loginPage(null, nextPath(req.query.next), await signInOptions(d)));
  });
  router.post('/login', async (req, res, next) => {
    if (!sameOrigin(req, d.trustProxy)) {
      await refuse(d, req, null, 'origin');
      res.status(403).send(
        messagePage('Refused', 'A sign-in from another site is refused.', {
          href: '/console/login',
          text: 'Sign in',
        }),
      );
      return;
    }
    await signIn(d, throttle)(req, res, next);
  });
}

export function logoutRoute(router: Router, d: ConsoleDeps): void {
  router.post('/logout', async (req, res) => {
    const { session } = signedIn(res);
    await d.log.sessions.remove(session.idHash);
    await audit(d, req, session, 'sign_out', null);
    // A person leaves the provider's session too, when it offers an end-session endpoint.
    const away = session.person !== null ? await d.oidc?.endSessionUrl() : undefined;
    res.set('set-cookie', clearedCookie(secureCookies(d, req))).redirect(303, away?.href ?? '/console/login');
  });
}

/**
 * Every path after this needs a live session: none, unknown, expired, opened by a token that is no
 * longer its role's (rotated or removed) or through the provider under other settings (another
 * provider, client or groups: the row is deleted), or a session cookie the request carries twice
 * (one was planted, session.ts) → the sign-in page (303), the stale cookie removed. Nothing is done
 * for a request without one.
 */
export function requireSession(d: ConsoleDeps): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const secure = secureCookies(d, req);
    const id = sessionIdFrom(req, secure);
    const now = d.clock.now();
    const idHash = id === undefined ? undefined : hashSessionId(id);
    let row = idHash === undefined ? undefined : await d.log.sessions.live(idHash, now.toISOString());
    if (row !== undefined && !sessionTokenCurrent(row, d.fingerprints)) {
      await d.log.sessions.remove(row.id_hash);
      row = undefined;
    }
    if (id === undefined || idHash === undefined || row === undefined) {
      if (cookieValues(req, sessionCookieName(secure)).length > 0)
        res.append('set-cookie', clearedCookie(secure));
      const back = req.method === 'GET' ? `?next=${encodeURIComponent(req.originalUrl)}` : '';
      res.redirect(303, `/console/login${back}`);
      return;
    }
    if (now.getTime() - Date.parse(row.last_seen) >= TOUCH_EVERY_MS) await touch(d, idHash, now);
    const session: ConsoleSession = {
      role: row.role,
      idHash,
      tag: sessionTag(idHash),
      csrf: csrfToken(id),
      expiresAt: row.expires_at,
      person:
        row.subject === null || row.subject === undefined
          ? null
          : { subject: row.subject, name: row.name ?? null, email: row.email ?? null },
    };
    res.locals.console = { id, session } satisfies Signed;
    next();
  };
}

async function touch(d: ConsoleDeps, idHash: string, now: Date): Promise<void> {
  try {
    await d.log.sessions.touch(idHash, now.toISOString());
  } catch (err) {
    // Another connection holds the write lock: last_seen is a courtesy, the page is not refused.
    if (!isLockBusy(err)) throw err;
  }
}

/**
 * Every POST after sign-in: from this site, with the session's CSRF token (`_csrf`). Otherwise 403
 * and nothing changes.
 */
export function requireCsrf(d: ConsoleDeps): RequestHandler {
  return async (req, res, next) => {
    if (req.method !== 'POST') return next();
    const given = ((req.body ?? {}) as Record<string, unknown>)._csrf;
    const origin = sameOrigin(req, d.trustProxy);
    if (!origin || !csrfMatches(signedIn(res).id, given)) {
      await refuse(d, req, actorOf(res), origin ? 'csrf' : 'origin');
      res
        .status(403)
        .send(
          messagePage(
            'Refused',
            'CSRF token missing or invalid. Nothing was changed: reload the page and try again.',
          ),
        );
      return;
    }
    next();
  };
}

/** Actions (replay, pause, resume) are the admin's: a viewer gets 403 and nothing changes. */
export function requireAdmin(d: ConsoleDeps): RequestHandler {
  return async (req, res, next) => {
    if (contextOf(d, res).role === 'admin') return next();
    await refuse(d, req, actorOf(res), 'role');
    res
      .status(403)
      .send(
        messagePage(
          'Refused',
          d.oidc === null
            ? 'This action needs the admin token: you are signed in read-only. Nothing was changed.'
            : 'This action needs the admin role: you are signed in read-only. Nothing was changed.',
        ),
      );
  };
}
