import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { consoleStore } from '../../../src/core/store-port';
import { sqliteStorePort } from '../../../src/sqlite/sqlite-port';
import { openStore, type Store } from '../../../src/sqlite/store';
import { tempDir } from '../../helpers/tmp';
import {
  clearedCookie,
  csrfMatches,
  csrfToken,
  cookiesSecure,
  hashSessionId,
  isSecureRequest,
  pendingCookie,
  newSessionId,
  roleForToken,
  sessionCookie,
  sessionIdFrom,
  sessionTag,
} from '../../../src/http/console/session';
import { LoginThrottle, type LoginThrottleOptions } from '../../../src/http/console/throttle';

const req = (headers: Record<string, string>, encrypted = false) =>
  ({ headers, socket: { encrypted } }) as unknown as IncomingMessage;

describe('session ids and CSRF', () => {
  it('makes 43-character ids, stored as their SHA-256, tagged by 8 hex digits', () => {
    const id = newSessionId();
    expect(id).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(newSessionId()).not.toBe(id);
    expect(hashSessionId(id)).toMatch(/^[0-9a-f]{64}$/);
    expect(sessionTag(hashSessionId(id))).toBe(hashSessionId(id).slice(0, 8));
  });

  it('derives the CSRF token from the session id and compares it exactly', () => {
    const id = newSessionId();
    expect(csrfMatches(id, csrfToken(id))).toBe(true);
    expect(csrfMatches(id, csrfToken(newSessionId()))).toBe(false);
    for (const bad of [undefined, '', 'x', ['a'], 42]) expect(csrfMatches(id, bad)).toBe(false);
  });

  it.each([
    ['consig_console=' + 'a'.repeat(43), 'a'.repeat(43)],
    ['other=1; consig_console=' + 'b'.repeat(43) + '; x=2', 'b'.repeat(43)],
    ['consig_console=short', undefined],
    ['consig_console=' + '<'.repeat(43), undefined],
    ['xconsig_console=' + 'a'.repeat(43), undefined],
    // Twice (one planted for the parent domain by a sibling subdomain): neither is trusted.
    ['consig_console=' + 'a'.repeat(43) + '; consig_console=' + 'b'.repeat(43), undefined],
    ['__Host-consig_console=' + 'a'.repeat(43), undefined],
  ])('reads the cookie %s without TLS', (cookie, expected) => {
    expect(sessionIdFrom(req({ cookie }), false)).toBe(expected);
  });

  it.each([
    ['__Host-consig_console=' + 'a'.repeat(43), 'a'.repeat(43)],
    // A sibling's consig_console is not the __Host- cookie, which it cannot set.
    ['consig_console=' + 'b'.repeat(43) + '; __Host-consig_console=' + 'a'.repeat(43), 'a'.repeat(43)],
    ['consig_console=' + 'b'.repeat(43), undefined],
    ['__Host-consig_console=' + 'a'.repeat(43) + '; __Host-consig_console=' + 'b'.repeat(43), undefined],
  ])('reads the cookie %s with TLS', (cookie, expected) => {
    expect(sessionIdFrom(req({ cookie }), true)).toBe(expected);
  });
});

describe('cookies', () => {
  const now = new Date('2026-11-21T10:00:00Z');
  it('sets HttpOnly, SameSite=Strict, Max-Age and Expires; without TLS Path=/console, with it __Host-, Path=/ and Secure', () => {
    expect(sessionCookie('ID', 8 * 3_600_000, now, false)).toBe(
      'consig_console=ID; Path=/console; Max-Age=28800; Expires=Sat, 21 Nov 2026 18:00:00 GMT; HttpOnly; SameSite=Strict',
    );
    expect(sessionCookie('ID', 60_000, now, true)).toBe(
      '__Host-consig_console=ID; Path=/; Max-Age=60; Expires=Sat, 21 Nov 2026 10:01:00 GMT; HttpOnly; SameSite=Strict; Secure',
    );
    expect(clearedCookie(false)).toMatch(/^consig_console=; Path=\/console; Max-Age=0; .*; SameSite=Strict$/);
    expect(clearedCookie(true)).toMatch(/^__Host-consig_console=; Path=\/; Max-Age=0; .*; Secure$/);
    expect(pendingCookie('S', 600_000, false)).toBe(
      'consig_oidc=S; Path=/console/oidc; Max-Age=600; HttpOnly; SameSite=Lax',
    );
    expect(pendingCookie(undefined, 600_000, true)).toBe(
      '__Host-consig_oidc=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure',
    );
  });

  it('makes the cookies Secure whenever PUBLIC_URL is https, whatever the last hop', () => {
    expect(cookiesSecure(req({}), 0, true)).toBe(true);
    expect(cookiesSecure(req({}), 0, false)).toBe(false);
    expect(cookiesSecure(req({}, true), 0, false)).toBe(true);
  });

  it.each([
    [{}, false, 0, false],
    [{}, true, 0, true],
    [{ 'x-forwarded-proto': 'https' }, false, 0, false],
    [{ 'x-forwarded-proto': 'https' }, false, 1, true],
    [{ 'x-forwarded-proto': 'https, http' }, false, 1, true],
    [{ 'x-forwarded-proto': 'http' }, false, 1, false],
  ])('headers %j over TLS %p with TRUST_PROXY=%p → secure %p', (headers, tls, trust, expected) => {
    expect(isSecureRequest(req(headers as Record<string, string>, tls), trust)).toBe(expected);
  });
});

describe('tokens and the sign-in throttle', () => {
  const ADMIN = 'admin-token-0123456789';
  const VIEWER = 'viewer-token-0123456789';

  it.each([
    [ADMIN, 'admin'],
    [VIEWER, 'viewer'],
    [ADMIN.slice(0, -1), null],
    [`${ADMIN}x`, null],
    ['', null],
  ])('token %j → %p', (token, role) => {
    expect(roleForToken(token, { admin: ADMIN, viewer: VIEWER })).toBe(role);
  });

  it('a viewer token alone signs in read-only', () => {
    expect(roleForToken(VIEWER, { admin: undefined, viewer: VIEWER })).toBe('viewer');
  });

  // The throttle on a real log (a temp SQLite file): the counts are in console_sign_in_failures.
  let tmp: ReturnType<typeof tempDir>;
  let store: Store;
  const throttle = (options: LoginThrottleOptions = {}) =>
    new LoginThrottle(consoleStore(sqliteStorePort(store)).signInFailures, options);
  beforeEach(() => {
    tmp = tempDir('consig-throttle-');
    store = openStore(join(tmp.dir, 'consig.db'), { migrate: true });
  });
  afterEach(() => {
    store.close();
    tmp.cleanup();
  });

  it('refuses an address after 5 failures within a minute, until the minute is over', async () => {
    const t = throttle();
    for (let i = 0; i < 5; i++) {
      expect(await t.retryAfter('1.2.3.4', 1000 + i)).toBe(0);
      await t.failed('1.2.3.4', 1000 + i);
    }
    expect(await t.retryAfter('1.2.3.4', 2000)).toBe(59);
    expect(await t.retryAfter('5.6.7.8', 2000)).toBe(0);
    expect(await t.retryAfter('1.2.3.4', 61_000)).toBe(0);
    // A failure after the window starts a new one.
    await t.failed('1.2.3.4', 61_000);
    expect(await t.retryAfter('1.2.3.4', 61_001)).toBe(0);
  });

  it('forgets an address on success, and the addresses whose window is over at each failure', async () => {
    const t = throttle({ maxFailures: 1 });
    await t.failed('a', 0);
    expect(await t.retryAfter('a', 1)).toBe(60);
    await t.succeeded('a');
    expect(await t.retryAfter('a', 1)).toBe(0);
    await t.failed('b', 0);
    await t.failed('c', 60_000);
    const rows = store.db.prepare('SELECT address FROM console_sign_in_failures ORDER BY address').all();
    expect(rows).toEqual([{ address: 'c' }]);
  });
});
