import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { constantTimeEqual } from '../../domain/signature';
import type { ConsoleRole } from '../../domain/console';
import type { Person } from '../../domain/oidc';

/**
 * Console sessions: a random 32-byte id in the `consig_console` cookie; the database keeps its
 * SHA-256 only. The CSRF token of a session is HMAC-SHA256(session id, "csrf"): nothing to store,
 * unguessable without the cookie, and compared in constant time.
 */

export const COOKIE_NAME = 'consig_console';
export const COOKIE_PATH = '/console';

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

/** The value of cookie `name` from the Cookie header, if any. */
export function cookieValue(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq >= 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The session id from the Cookie header, if it has the console's cookie with a plausible value. */
export function sessionIdFrom(req: IncomingMessage): string | undefined {
  const value = cookieValue(req, COOKIE_NAME);
  return value !== undefined && /^[A-Za-z0-9_-]{43}$/.test(value) ? value : undefined;
}

/**
 * The Set-Cookie value: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends
 * it), Path=/console, Secure when the request came over TLS, expiring with the session.
 */
export function sessionCookie(id: string, ttlMs: number, now: Date, secure: boolean): string {
  const expires = new Date(now.getTime() + ttlMs).toUTCString();
  return [
    `${COOKIE_NAME}=${id}`,
    `Path=${COOKIE_PATH}`,
    `Max-Age=${Math.floor(ttlMs / 1000)}`,
    `Expires=${expires}`,
    'HttpOnly',
    'SameSite=Strict',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}

/** Removes the cookie (sign-out, or an unknown or expired session). */
export function clearedCookie(secure: boolean): string {
  return [
    `${COOKIE_NAME}=`,
    `Path=${COOKIE_PATH}`,
    'Max-Age=0',
    'Expires=Thu, 01 Jan 1970 00:00:00 GMT',
    'HttpOnly',
    'SameSite=Strict',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
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

/**
 * The pending sign-in's Set-Cookie: HttpOnly, Path=/console/oidc, SameSite=Lax — the provider's
 * answer is a top-level navigation from its site, which a Strict cookie would not follow — and
 * short-lived; `value` undefined removes it (the callback uses it once).
 */
export function pendingCookie(value: string | undefined, maxAgeMs: number, secure: boolean): string {
  return [
    `${PENDING_COOKIE}=${value ?? ''}`,
    `Path=${PENDING_PATH}`,
    `Max-Age=${value === undefined ? 0 : Math.floor(maxAgeMs / 1000)}`,
    'HttpOnly',
    'SameSite=Lax',
    ...(secure ? ['Secure'] : []),
  ].join('; ');
}
