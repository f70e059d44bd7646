import {
  consoleFingerprints,
  consoleTokens,
  sessionTokenCurrent,
  tokenFingerprint,
} from '../../../src/domain/console';
import {
  authorizedParty,
  emailVerified,
  groupsOf,
  newPendingKey,
  openPending,
  PENDING_KEY_NAME,
  type PendingSignIn,
  PENDING_TTL_MS,
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
    // A string claim is one value; the e-mail only when the provider verified it (issue 44).
    [{ email: 'maria@lender.example', email_verified: true }, 'email', ['maria@lender.example']],
    [{ email: 'maria@lender.example', email_verified: 'true' }, 'email', ['maria@lender.example']],
    [{ email: 'maria@lender.example', email_verified: false }, 'email', []],
    [{ email: 'maria@lender.example', email_verified: 'false' }, 'email', []],
    [{ email: 'maria@lender.example' }, 'email', []],
    [{ hd: 'lender.example' }, 'hd', ['lender.example']], // another string claim needs no verification
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
      { sub: 'u1', name: 'Maria Souza', email: 'maria@x', email_verified: true },
      { subject: 'u1', name: 'Maria Souza', email: 'maria@x' },
      'maria@x',
      'Maria Souza',
    ],
    [{ sub: 'u2', preferred_username: 'joao' }, { subject: 'u2', name: 'joao', email: null }, 'u2', 'joao'],
    [
      { sub: 'u3', email: '  ', email_verified: true },
      { subject: 'u3', name: null, email: null },
      'u3',
      'u3',
    ],
    [
      { sub: 'u4', email: 'a@x', email_verified: true, name: 42 },
      { subject: 'u4', name: null, email: 'a@x' },
      'a@x',
      'a@x',
    ],
    // An address the provider did not verify names no one (issue 44): the subject does.
    [
      { sub: 'u5', email: 'maria@x', email_verified: false },
      { subject: 'u5', name: null, email: null },
      'u5',
      'u5',
    ],
    [{ sub: 'u6', email: 'maria@x', name: 'M' }, { subject: 'u6', name: 'M', email: null }, 'u6', 'M'],
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

describe('email_verified and azp', () => {
  it.each<[unknown, boolean]>([
    [true, true],
    ['true', true],
    [false, false],
    ['false', false],
    [undefined, false],
    [1, false],
    ['yes', false],
  ])('email_verified %j → %p', (value, verified) => {
    expect(emailVerified({ email: 'a@x', email_verified: value })).toBe(verified);
  });

  it.each<[unknown, boolean]>([
    [undefined, true],
    ['consig-console', true],
    ['another-client', false],
    ['', false],
  ])('azp %j → %p', (azp, ok) => {
    expect(authorizedParty(azp === undefined ? {} : { azp }, 'consig-console')).toBe(ok);
  });
});

describe('the sealed pending sign-in', () => {
  const key = newPendingKey();
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

  it('refuses it missing, altered anywhere, truncated, or sealed with another key', () => {
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
    expect(openPending(sealed, newPendingKey(), now)).toEqual({ problem: 'tampered' });
  });

  // Shorter than IV ‖ tag, or exactly that (no ciphertext): an empty IV, a short tag, an empty text.
  it.each([0, 1, 11, 12, 15, 16, 20, 27, 28, 29])('refuses a value of %i bytes', (n) => {
    const raw = Buffer.from(sealPending(pending, key), 'base64url').subarray(0, n);
    expect(openPending(raw.toString('base64url') || '=', key, now)).toEqual({ problem: 'tampered' });
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

  // Random, not derived from anything (issue 44): the log keeps the one every replica uses.
  it('makes a new random 32-byte key each time', () => {
    const a = newPendingKey();
    expect(a).toHaveLength(32);
    expect(newPendingKey().equals(a)).toBe(false);
  });

  // The row's name in console_keys: another name would void the sign-ins pending at an upgrade.
  it('keeps its key in the log under the name oidc-pending', () => {
    expect(PENDING_KEY_NAME).toBe('oidc-pending');
  });
});

describe('which sessions stay open (consoleFingerprints)', () => {
  const ADMIN = 'admin-token-0123456789';
  const oidc = {
    issuer: 'https://idp.example',
    clientId: 'c',
    groupsClaim: 'groups',
    adminGroups: ['consig-admins', 'ops'],
    viewerGroups: ['consig-viewers'],
    breakGlass: false,
  };
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

  // Issue 44: a person's role is never kept under group settings that would not give it now.
  it.each<[string, Partial<typeof oidc>]>([
    ['another issuer', { issuer: 'https://idp2.example' }],
    ['another groups claim', { groupsClaim: 'roles' }],
    ['a group taken out of OIDC_ADMIN_GROUPS', { adminGroups: ['ops'] }],
    ['a group added to OIDC_ADMIN_GROUPS', { adminGroups: ['consig-admins', 'ops', 'all'] }],
    [
      'a group moved from admin to viewer',
      { adminGroups: ['ops'], viewerGroups: ['consig-viewers', 'consig-admins'] },
    ],
    ['OIDC_VIEWER_GROUPS emptied', { viewerGroups: [] }],
  ])("ends a person's session under %s", (_name, change) => {
    const fps = (o: typeof oidc) =>
      consoleFingerprints({ adminToken: undefined, viewerToken: undefined, oidc: o });
    expect(sessionTokenCurrent(person(fps(oidc)), fps({ ...oidc, ...change }))).toBe(false);
  });

  it("keeps a person's session when the same groups are listed in another order", () => {
    const fps = (o: typeof oidc) =>
      consoleFingerprints({ adminToken: undefined, viewerToken: undefined, oidc: o });
    const reordered = { ...oidc, adminGroups: ['ops', 'consig-admins'] };
    expect(sessionTokenCurrent(person(fps(oidc)), fps(reordered))).toBe(true);
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
