import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from 'jose';
import { freePort } from '../../rigs/harness';
import { CookieJar, step } from '../helpers/oidc-http';
import { ADMIN_GROUP, CLIENT_ID, CLIENT_SECRET, VIEWER_GROUP } from '../helpers/oidc-provider';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * Issue 34: the ID tokens a real provider never issues, from a hostile provider on loopback — a
 * discovery document, published keys, an authorization endpoint that sends the browser straight
 * back, and a token endpoint answering whatever ID token the test asks for (signed with jose).
 * Each bad token (wrong nonce, iss or aud, expired, signed by a key the provider does not publish,
 * unsigned) is refused by openid-client's checks: 403, audited with the check that failed, no
 * session. A good token from the same provider signs in, so each refusal is the one change's.
 */

type Mode =
  | 'good'
  | 'wrong-nonce'
  | 'wrong-iss'
  | 'wrong-aud'
  | 'expired'
  | 'unknown-key'
  | 'forged-signature'
  | 'unsigned'
  | 'aud-list-of-one'
  | 'audiences-with-azp'
  | 'audiences-without-azp'
  | 'audiences-wrong-azp'
  | 'one-aud-wrong-azp';

let hostile: Server;
let issuer: string;
let mode: Mode = 'good';
let lastNonce = '';
let r: TestReceiver;
let url: string;
type PrivateKey = Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
const keys = { published: undefined as unknown as PrivateKey, unknown: undefined as unknown as PrivateKey };
let jwks: unknown;

/** The ID token's `aud` and `azp` in each mode (several audiences: issue 44). */
function audience(): Pick<JWTPayload, 'aud'> & { azp?: string } {
  const two = [CLIENT_ID, 'another-api'];
  switch (mode) {
    case 'wrong-aud':
      return { aud: 'another-client' };
    case 'aud-list-of-one':
      return { aud: [CLIENT_ID] };
    case 'audiences-with-azp':
      return { aud: two, azp: CLIENT_ID };
    case 'audiences-without-azp':
      return { aud: two };
    case 'audiences-wrong-azp':
      return { aud: two, azp: 'another-api' };
    case 'one-aud-wrong-azp':
      return { aud: CLIENT_ID, azp: 'another-client' };
    default:
      return { aud: CLIENT_ID };
  }
}

async function idToken(): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const claims: JWTPayload = {
    iss: mode === 'wrong-iss' ? 'http://127.0.0.1:1/not-the-issuer' : issuer,
    ...audience(),
    sub: 'mallory',
    email: 'mallory@evil.example',
    email_verified: true,
    name: 'Mallory',
    groups: [ADMIN_GROUP],
    nonce: mode === 'wrong-nonce' ? 'a-nonce-of-another-sign-in' : lastNonce,
    iat: mode === 'expired' ? now - 7200 : now,
    exp: mode === 'expired' ? now - 3600 : now + 300,
  };
  if (mode === 'unsigned') {
    const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
    return `${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.`;
  }
  // unknown-key: a key id the provider does not publish; forged-signature: the published key's id,
  // signed by another key.
  const kid = mode === 'unknown-key' ? 'not-published' : 'published';
  const key = mode === 'unknown-key' || mode === 'forged-signature' ? keys.unknown : keys.published;
  return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid }).sign(key);
}

function send(res: import('node:http').ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

async function answer(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) {
  const at = new URL(req.url ?? '/', issuer);
  if (at.pathname === '/.well-known/openid-configuration')
    return send(res, 200, {
      issuer,
      authorization_endpoint: `${issuer}/authorize`,
      token_endpoint: `${issuer}/token`,
      jwks_uri: `${issuer}/jwks`,
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256'],
      code_challenge_methods_supported: ['S256'],
    });
  if (at.pathname === '/jwks') return send(res, 200, jwks);
  if (at.pathname === '/authorize') {
    lastNonce = at.searchParams.get('nonce') ?? '';
    const back = new URL(at.searchParams.get('redirect_uri') ?? '');
    back.searchParams.set('code', `code-${Date.now()}`);
    back.searchParams.set('state', at.searchParams.get('state') ?? '');
    res.writeHead(303, { location: back.href }).end();
    return;
  }
  if (at.pathname === '/token' && req.method === 'POST') {
    for await (const _ of req) void _;
    return send(res, 200, {
      access_token: 'opaque-access',
      token_type: 'Bearer',
      expires_in: 300,
      id_token: await idToken(),
    });
  }
  send(res, 404, { error: 'not_found' });
}

beforeAll(async () => {
  const published = await generateKeyPair('RS256');
  const unknown = await generateKeyPair('RS256');
  keys.published = published.privateKey;
  keys.unknown = unknown.privateKey;
  jwks = {
    keys: [{ ...(await exportJWK(published.publicKey)), kid: 'published', alg: 'RS256', use: 'sig' }],
  };
  hostile = createServer((req, res) => {
    answer(req, res).catch((err: Error) => send(res, 500, { error: err.message }));
  });
  await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`;
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  r = await startTestReceiver({
    env: {
      PORT: String(port),
      OIDC_ISSUER: issuer,
      OIDC_CLIENT_ID: CLIENT_ID,
      OIDC_CLIENT_SECRET: CLIENT_SECRET,
      PUBLIC_URL: url,
      OIDC_ADMIN_GROUPS: ADMIN_GROUP,
      OIDC_VIEWER_GROUPS: VIEWER_GROUP,
    },
  });
}, 60_000);
afterAll(async () => {
  await r?.stop();
  hostile?.closeAllConnections();
  await new Promise((resolve) => hostile?.close(resolve));
});

beforeEach(() => {
  r.store.db.exec('DELETE FROM console_sessions; DELETE FROM console_sign_in_failures');
});

/** One sign-in through the hostile provider in `m`: the callback's answer, the jar, the audit row. */
async function signInWith(m: Mode) {
  mode = m;
  const jar = new CookieJar();
  const started = await step(jar, `${url}/console/oidc/start`);
  const back = await step(jar, started.location as string);
  const done = await step(jar, back.location as string);
  const sessions = (r.store.db.prepare('SELECT count(*) AS n FROM console_sessions').get() as { n: number })
    .n;
  const row = r.store.db
    .prepare('SELECT action, person, detail FROM console_audit ORDER BY id DESC LIMIT 1')
    .get() as { action: string; person: string | null; detail: string };
  return { done, jar, sessions, row, detail: JSON.parse(row.detail ?? '{}') as Record<string, string> };
}

it('signs in with a good ID token from the same provider (so each refusal below is its one change)', async () => {
  const { done, jar, sessions, row } = await signInWith('good');
  expect(done.status).toBe(200);
  expect(jar.get(url, 'consig_console')).toBeDefined();
  expect(sessions).toBe(1);
  expect(row).toMatchObject({ action: 'sign_in', person: 'mallory@evil.example' });
});

it.each(['aud-list-of-one', 'audiences-with-azp'] as const)(
  'signs in with several audiences when ours is one of them and azp names us: %s',
  async (m) => {
    const { done, sessions, row } = await signInWith(m);
    expect(done.status).toBe(200);
    expect(sessions).toBe(1);
    expect(row).toMatchObject({ action: 'sign_in', person: 'mallory@evil.example' });
  },
);

it.each([
  // Several audiences: openid-client wants an azp, and ours (issue 44).
  ['audiences-without-azp', /^OAUTH_JWT_CLAIM_COMPARISON_FAILED .*additional untrusted audiences/],
  ['audiences-wrong-azp', /^OAUTH_JWT_CLAIM_COMPARISON_FAILED .*"azp"/],
  // One audience (ours) but issued to another client: openid-client lets it through; the console does not.
  ['one-aud-wrong-azp', /^wrong_azp .*"azp"/],
  ['wrong-nonce', /^OAUTH_JWT_CLAIM_COMPARISON_FAILED .*"nonce"/],
  ['wrong-iss', /^OAUTH_JWT_CLAIM_COMPARISON_FAILED .*"iss"/],
  ['wrong-aud', /^OAUTH_JWT_CLAIM_COMPARISON_FAILED .*"aud"/],
  ['expired', /^OAUTH_JWT_TIMESTAMP_CHECK_FAILED .*"exp"/],
  // Refused only because the signature is checked (openid-client's enableNonRepudiationChecks).
  ['unknown-key', /^OAUTH_KEY_SELECTION_FAILED /],
  ['forged-signature', /^OAUTH_INVALID_RESPONSE JWT signature verification failed/],
  ['unsigned', /^OAUTH_INVALID_RESPONSE .*"alg"/],
] as const)('refuses an ID token with %s: 403, audited, no session', async (m, check) => {
  const { done, jar, sessions, row, detail } = await signInWith(m);
  expect(done.status).toBe(403);
  expect(done.text).toContain('Sign-in refused');
  expect(jar.get(url, 'consig_console')).toBeUndefined();
  expect(sessions).toBe(0);
  expect(row.action).toBe('sign_in_failed');
  expect(row.person).toBeNull();
  expect(`${detail.reason} ${detail.message}`).toMatch(check);
  if (process.env.OIDC_ATTACK_REPORT)
    process.stdout.write(`${m}: ${done.status} ${detail.reason}: ${detail.message}\n`);
});
