import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { constantTimeEqual } from '../../domain/signature';
import type { ConsoleRole } from '../../domain/console';
import type { Person } from '../../domain/oidc';

/**
 * Console sessions: a random 32-byte id in the session cookie; the database keeps its SHA-256 only.
 * The CSRF token of a session is HMAC-SHA256(session id, "csrf"): nothing to store, unguessable
 * without the cookie, and compared in constant time.
 *
 * The cookies' names (issue 44): where they are `Secure` (PUBLIC_URL is https, or the request came
 * over TLS), `__Host-consig_console` and `__Host-consig_oidc` with `Path=/` and no `Domain` — a
 * browser takes a `__Host-` cookie only from this very host over https, so a sibling subdomain
 * cannot plant one. Without TLS (an http PUBLIC_URL on loopback, a development setup) no prefix is
 * possible: `consig_console` (Path=/console) and `consig_oidc` (Path=/console/oidc), and a request
 * carrying either name twice — ours and one planted for the parent domain — is refused rather than
 * trusting whichever came first.
 */

/** The session cookie's name without TLS; with it, {@link HOST_PREFIX} + this. */
export const COOKIE_NAME = 'consig_console';
export const COOKIE_PATH = '/console';
/** A cookie the browser takes only from this host, over https, with Path=/ and no Domain. */
export const HOST_PREFIX = '__Host-';

/** A cookie's name and path: prefixed, at `/`, where it is Secure; else as named, at `path`. */
function placed(name: string, path: string, secure: boolean): { name: string; path: string } {
  return secure ? { name: `${HOST_PREFIX}${name}`, path: '/' } : { name, path };
}

/** The session cookie's name where cookies are (not) Secure. */
export function sessionCookieName(secure: boolean): string {
  return placed(COOKIE_NAME, COOKIE_PATH, secure).name;
}

export interface ConsoleSession {
  role: ConsoleRole;
  /** SHA-256 of the id, hex: the row's key. */
  idHash: string;
  /** A short tag for the audit table and logs: not the id, and the id cannot be found from it. */
  tag: string;
  csrf: string;
  expiresAt: string;
  /** Signed in through the identity provider: who; null for a token's session. */
  person: Person | null;
}

/** A fresh session id (base64url of 32 random bytes). */
export function newSessionId(): string {
  return randomBytes(32).toString('base64url');
}

export function hashSessionId(id: string): string {
  return createHash('sha256').update(id).digest('hex');
}

/** The first 8 hex digits of the id's hash. */
export function sessionTag(idHash: string): string {
  return idHash.slice(0, 8);
}

export function csrfToken(sessionId: string): string {
  return createHmac('sha256', sessionId).update('csrf').digest('base64url');
}

export function csrfMatches(sessionId: string, given: unknown): boolean {
  return typeof given === 'string' && given !== '' && constantTimeEqual(given, csrfToken(sessionId));
}

/** Every value of cookie `name` in the Cookie header, in its order (a browser sends one per path and domain). */
export function cookieValues(req: IncomingMessage, name: string): string[] {
  const header = req.headers.cookie;
  if (header === undefined) return [];
  const values: string[] = [];
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq >= 0 && part.slice(0, eq).trim() === name) values.push(part.slice(eq + 1).trim());
  }
  return values;
}

/** What {@link cookieValue} gives for a cookie the request has more than once. */
export const DUPLICATE = Symbol('duplicate cookie');

/**
 * The value of cookie `name`: undefined when absent, and {@link DUPLICATE} when the header has it
 * more than once — one of them was set by someone else (a sibling subdomain's `Domain=` cookie),
 * and which is ours cannot be told.
 */
export function cookieValue(req: IncomingMessage, name: string): string | undefined | typeof DUPLICATE {
  const values = cookieValues(req, name);
  return values.length > 1 ? DUPLICATE : values[0];
}

/**
 * The session id from the Cookie header, if it has the console's cookie once with a plausible value
 * (its name where cookies are `secure`, {@link sessionCookieName}).
 */
export function sessionIdFrom(req: IncomingMessage, secure: boolean): string | undefined {
  const value = cookieValue(req, sessionCookieName(secure));
  return typeof value === 'string' && /^[A-Za-z0-9_-]{43}$/.test(value) ? value : undefined;
}

/**
 * The Set-Cookie value: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends
 * it), expiring with the session; where `secure`, Secure and `__Host-` at Path=/, else Path=/console.
 */
export function sessionCookie(id: string, ttlMs: number, now: Date, secure: boolean): string {
  const expires = new Date(now.getTime() + ttlMs).toUTCString();
  const { name, path } = placed(COOKIE_NAME, COOKIE_PATH, secure);
  return [
    `${name}=${id}`,
    `Path=${path}`,
    `Max-Age=${Math.floor(ttlMs / 1000)}`,
    `Expires=${expires}`,
    'HttpOnly',
    'SameSite=Strict',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}

/** Removes the cookie (sign-out, or an unknown or expired session). */
export function clearedCookie(secure: boolean): string {
  const { name, path } = placed(COOKIE_NAME, COOKIE_PATH, secure);
  return [
    `${name}=`,
    `Path=${path}`,
    'Max-Age=0',
    'Expires=Thu, 01 Jan 1970 00:00:00 GMT',
    'HttpOnly',
    'SameSite=Strict',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}

/**
 * Whether the console's cookies are Secure (and `__Host-`): always when PUBLIC_URL is https — the
 * browser is on https whatever the last hop was (a TLS proxy with TRUST_PROXY unset) — else when
 * the request came over TLS ({@link isSecureRequest}).
 */
export function cookiesSecure(req: IncomingMessage, trustProxy: number, httpsPublicUrl: boolean): boolean {
  return httpsPublicUrl || isSecureRequest(req, trustProxy);
}

/**
 * Whether the request came over TLS: to this process, or — behind `trustProxy` proxies
 * (TRUST_PROXY) — to the nearest proxy, as its `X-Forwarded-Proto` says (its first value, as
 * Express reads it).
 */
export function isSecureRequest(req: IncomingMessage, trustProxy: number): boolean {
  if ((req.socket as { encrypted?: boolean }).encrypted === true) return true;
  if (trustProxy <= 0) return false;
  const header = req.headers['x-forwarded-proto'];
  const value = Array.isArray(header) ? header[0] : header;
  return value?.split(',')[0]?.trim().toLowerCase() === 'https';
}

/** The role a sign-in token gives, comparing with each configured token in constant time. */
export function roleForToken(
  given: string,
  tokens: { admin: string | undefined; viewer: string | undefined },
): ConsoleRole | null {
  // Both comparisons always run, so the time does not say which token was close.
  const admin = tokens.admin !== undefined && constantTimeEqual(given, tokens.admin);
  const viewer = tokens.viewer !== undefined && constantTimeEqual(given, tokens.viewer);
  if (admin) return 'admin';
  return viewer ? 'viewer' : null;
}

/** The cookie of a sign-in pending at the identity provider (its sealed state, nonce and verifier). */
export const PENDING_COOKIE = 'consig_oidc';
const PENDING_PATH = '/console/oidc';

/** The pending sign-in cookie's name where cookies are (not) Secure. */
export function pendingCookieName(secure: boolean): string {
  return placed(PENDING_COOKIE, PENDING_PATH, secure).name;
}

/**
 * The pending sign-in's Set-Cookie: HttpOnly, SameSite=Lax — the provider's answer is a top-level
 * navigation from its site, which a Strict cookie would not follow — and short-lived; where
 * `secure`, Secure and `__Host-` at Path=/, else Path=/console/oidc. `value` undefined removes it
 * (the callback uses it once).
 */
export function pendingCookie(value: string | undefined, maxAgeMs: number, secure: boolean): string {
  const { name, path } = placed(PENDING_COOKIE, PENDING_PATH, secure);
  return [
    `${name}=${value ?? ''}`,
    `Path=${path}`,
    `Max-Age=${value === undefined ? 0 : Math.floor(maxAgeMs / 1000)}`,
    'HttpOnly',
    'SameSite=Lax',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}
