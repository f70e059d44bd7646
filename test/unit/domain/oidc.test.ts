import {
  consoleFingerprints,
  consoleTokens,
  sessionTokenCurrent,
  tokenFingerprint,
} from '../../../src/domain/console';
import {
  groupsOf,
  openPending,
  type PendingSignIn,
  PENDING_TTL_MS,
  pendingKey,
  personDisplay,
  personLabel,
  personOf,
  roleForGroups,
  sealPending,
} from '../../../src/domain/oidc';

const ROLES = { adminGroups: ['consig-admins', 'ops'], viewerGroups: ['consig-viewers'] };

describe('roleForGroups', () => {
  it.each([
    [['consig-admins'], 'admin'],
    [['staff', 'ops'], 'admin'],
    [['consig-viewers'], 'viewer'],
    [['consig-viewers', 'consig-admins'], 'admin'], // admin wins where both match
    [['staff'], null],
    [[], null],
    [['Consig-Admins'], null], // values match exactly
  ] as const)('%j → %s', (groups, role) => {
    expect(roleForGroups(groups, ROLES)).toBe(role);
  });
});

describe('groupsOf', () => {
  it.each([
    [{ groups: ['a', 'b'] }, 'groups', ['a', 'b']],
    [{ groups: ['a', 7, null, 'b'] }, 'groups', ['a', 'b']],
    [{ email: 'maria@lender.example' }, 'email', ['maria@lender.example']], // a string claim is one value
    [{ groups: { a: true } }, 'groups', []],
    [{}, 'groups', []],
    [{}, 'toString', []], // an inherited property is no claim
    [{ roles: ['admin'] }, 'groups', []],
  ])('%j[%s] → %j', (claims, claim, groups) => {
    expect(groupsOf(claims as Record<string, unknown>, claim)).toEqual(groups);
  });
});

describe('personOf and how a person is named', () => {
  it.each([
    [
      { sub: 'u1', name: 'Maria Souza', email: 'maria@x' },
      { subject: 'u1', name: 'Maria Souza', email: 'maria@x' },
      'maria@x',
      'Maria Souza',
    ],
    [{ sub: 'u2', preferred_username: 'joao' }, { subject: 'u2', name: 'joao', email: null }, 'u2', 'joao'],
    [{ sub: 'u3', email: '  ' }, { subject: 'u3', name: null, email: null }, 'u3', 'u3'],
    [{ sub: 'u4', email: 'a@x', name: 42 }, { subject: 'u4', name: null, email: 'a@x' }, 'a@x', 'a@x'],
  ])('%j', (claims, person, label, display) => {
    const p = personOf(claims);
    expect(p).toEqual(person);
    expect(personLabel(p as never)).toBe(label);
    expect(personDisplay(p as never)).toBe(display);
  });

  it('has no person without a sub, and keeps at most 256 characters of a claim', () => {
    expect(personOf({ email: 'a@x' })).toBeUndefined();
    expect(personOf({ sub: 7 })).toBeUndefined();
    expect(personOf({ sub: 's', name: 'x'.repeat(1000) })?.name).toHaveLength(256);
  });
});

describe('the sealed pending sign-in', () => {
  const key = pendingKey('client-secret-a');
  const now = 1_700_000_000_000;
  const pending: PendingSignIn = {
    state: 's',
    nonce: 'n',
    verifier: 'v',
    next: '/console/dead',
    expiresAt: now + PENDING_TTL_MS,
  };

  it('opens what it sealed until it expires, and not after', () => {
    const sealed = sealPending(pending, key);
    expect(openPending(sealed, key, now)).toEqual(pending);
    expect(openPending(sealed, key, now + PENDING_TTL_MS - 1)).toEqual(pending);
    expect(openPending(sealed, key, now + PENDING_TTL_MS)).toEqual({ problem: 'expired' });
  });

  it('hides its content and seals differently each time', () => {
    const a = sealPending(pending, key);
    expect(a).not.toEqual(sealPending(pending, key));
    expect(Buffer.from(a, 'base64url').toString('latin1')).not.toContain('/console/dead');
  });

  it('refuses it missing, altered anywhere, truncated, or sealed with another client secret', () => {
    const sealed = sealPending(pending, key);
    expect(openPending(undefined, key, now)).toEqual({ problem: 'missing' });
    expect(openPending('', key, now)).toEqual({ problem: 'missing' });
    const raw = Buffer.from(sealed, 'base64url');
    for (let i = 0; i < raw.length; i += 7) {
      const bad = Buffer.from(raw);
      bad[i] = (bad[i] as number) ^ 1;
      expect(openPending(bad.toString('base64url'), key, now)).toEqual({ problem: 'tampered' });
    }
    expect(openPending(sealed.slice(0, 30), key, now)).toEqual({ problem: 'tampered' });
    expect(openPending('not base64 at all!', key, now)).toEqual({ problem: 'tampered' });
    expect(openPending(sealed, pendingKey('client-secret-b'), now)).toEqual({ problem: 'tampered' });
  });

  // Sealed with the right key, so only its shape can refuse it (issue 37: nothing fed it these).
  it.each<[string, unknown]>([
    ['null', null],
    ['a string', 'text'],
    ['a number', 7],
    ['an array', ['s', 'n', 'v', '/console']],
    ['without its nonce', { ...pending, nonce: undefined }],
    ['without its next', { ...pending, next: undefined }],
    ['with a verifier not a string', { ...pending, verifier: 5 }],
    ['with expiresAt as text', { ...pending, expiresAt: String(pending.expiresAt) }],
    ['without expiresAt', { ...pending, expiresAt: undefined }],
  ])('refuses a well-sealed value that is not a pending sign-in: %s', (_name, value) => {
    expect(openPending(sealPending(value as PendingSignIn, key), key, now)).toEqual({ problem: 'tampered' });
  });

  // Every replica derives the same key from the client secret, across versions too: a sign-in
  // begun on a replica still on the previous version ends on one on the next.
  it('derives the key as it always has (HKDF-SHA256, its salt and label)', () => {
    expect(pendingKey('client-secret').toString('hex')).toBe(
      'd7f0462e6f038419a1c182b3cd6cbc23fea612ef144bf4702e3f8abe364efefc',
    );
  });
});

describe('which sessions stay open (consoleFingerprints)', () => {
  const ADMIN = 'admin-token-0123456789';
  const oidc = { issuer: 'https://idp.example', clientId: 'c', breakGlass: false };
  const person = (fps: ReturnType<typeof consoleFingerprints>) => ({
    role: 'viewer' as const,
    token_fp: fps.oidc ?? null,
  });

  it('keeps the tokens out of the console while the provider is configured, unless break-glass', () => {
    expect(consoleTokens({ adminToken: ADMIN, viewerToken: undefined, oidc: null })).toEqual({
      admin: ADMIN,
      viewer: undefined,
    });
    expect(consoleTokens({ adminToken: ADMIN, viewerToken: undefined, oidc })).toEqual({
      admin: undefined,
      viewer: undefined,
    });
    expect(
      consoleTokens({ adminToken: ADMIN, viewerToken: undefined, oidc: { ...oidc, breakGlass: true } }).admin,
    ).toBe(ADMIN);
  });

  it("ends a token's session once the provider is configured without break-glass; a person's when the provider changes", () => {
    const tokenSession = { role: 'admin' as const, token_fp: tokenFingerprint(ADMIN) };
    const before = consoleFingerprints({ adminToken: ADMIN, viewerToken: undefined, oidc: null });
    expect(sessionTokenCurrent(tokenSession, before)).toBe(true);
    const withOidc = consoleFingerprints({ adminToken: ADMIN, viewerToken: undefined, oidc });
    expect(sessionTokenCurrent(tokenSession, withOidc)).toBe(false);
    const glass = consoleFingerprints({
      adminToken: ADMIN,
      viewerToken: undefined,
      oidc: { ...oidc, breakGlass: true },
    });
    expect(sessionTokenCurrent(tokenSession, glass)).toBe(true);
    expect(sessionTokenCurrent(person(withOidc), withOidc)).toBe(true);
    const other = consoleFingerprints({
      adminToken: ADMIN,
      viewerToken: undefined,
      oidc: { ...oidc, clientId: 'd' },
    });
    expect(sessionTokenCurrent(person(withOidc), other)).toBe(false);
    expect(sessionTokenCurrent(person(withOidc), before)).toBe(false);
  });

  // A session row without a fingerprint never matches a fingerprint that is not there either.
  it.each<[string, { admin: string | null; viewer: string | null; oidc?: string | null }]>([
    ['no viewer token', { admin: 'fp-admin', viewer: null }],
    ['no viewer token, the provider null', { admin: 'fp-admin', viewer: null, oidc: null }],
    ['a viewer token, the provider null', { admin: 'fp-admin', viewer: 'fp-viewer', oidc: null }],
  ])('a row without token_fp is not current: %s', (_name, fps) => {
    expect(sessionTokenCurrent({ role: 'viewer', token_fp: null }, fps)).toBe(false);
  });
});
