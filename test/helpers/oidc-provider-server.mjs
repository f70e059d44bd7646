// A real OpenID Provider for the tests: `oidc-provider` (panva's certified implementation), run in
// a child process of its own (test/helpers/oidc-provider.ts starts, stops and restarts it) so that
// a test can take it down and bring it back on the same port. Its own login form (interactions),
// consent skipped as for a first-party client, users in groups, a `groups` claim in the ID token,
// RP-initiated logout. Settings come as JSON in OIDC_TEST_PROVIDER; it prints `listening <url>`.
import { createServer } from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import { URLSearchParams } from 'node:url';
import Provider from 'oidc-provider';

const settings = JSON.parse(process.env.OIDC_TEST_PROVIDER ?? '{}');
const issuer = `http://127.0.0.1:${settings.port}`;

/** The users, by login: the password is the login reversed (the tests know it). */
export const USERS = {
  maria: { name: 'Maria Souza', email: 'maria@lender.example', groups: ['consig-admins', 'staff'] },
  joao: { name: 'João Lima', email: 'joao@lender.example', groups: ['consig-viewers'] },
  ana: { name: 'Ana Costa', email: 'ana@lender.example', groups: ['staff'] },
  both: { name: 'Bia Both', email: 'bia@lender.example', groups: ['consig-viewers', 'consig-admins'] },
  // No e-mail: the audit names her by subject.
  nomail: { name: 'Nem Mail', groups: ['consig-viewers'] },
  // Issue 44: an address she typed and the provider never verified (email_verified false) — an
  // admin's. It must name no one and grant nothing.
  mallory: {
    name: 'Mallory',
    email: 'maria@lender.example',
    emailVerified: false,
    groups: ['consig-viewers'],
  },
};

const escape = (s) =>
  String(s).replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c],
  );

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key-1', use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: settings.clientId,
      client_secret: settings.clientSecret,
      redirect_uris: settings.redirectUris,
      post_logout_redirect_uris: settings.postLogoutRedirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [jwk] },
  cookies: { keys: ['a-test-cookie-key-0123456789'] },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  // The ID token carries the scopes' claims (as Entra ID, Okta and Keycloak put groups in it).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      logoutSource: async (ctx, form) => {
        ctx.body = `<!doctype html><html lang="en"><head><title>Sign out</title></head><body>
          <h1>Sign out of the test provider?</h1>${form}
          <button type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>
          </body></html>`;
      },
    },
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  findAccount: async (_ctx, id) => {
    const user = USERS[id];
    if (user === undefined) return undefined;
    return {
      accountId: id,
      claims: async () => ({
        sub: id,
        name: user.name,
        ...(user.email === undefined
          ? {}
          : { email: user.email, email_verified: user.emailVerified ?? true }),
        groups: user.groups,
      }),
    };
  },
  // Consent is not asked: the console is the lender's own (first-party) client.
  loadExistingGrant: async (ctx) => {
    const grantId =
      ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  renderError: async (ctx, out) => {
    ctx.type = 'html';
    ctx.body = `<!doctype html><html lang="en"><head><title>Error</title></head><body><h1>Provider error</h1><pre>${escape(JSON.stringify(out))}</pre></body></html>`;
  },
});

function loginForm(uid, error) {
  return `<!doctype html><html lang="en"><head><title>Test provider sign-in</title></head><body>
    <h1>Sign in to the test provider</h1>${error ? `<p role="alert">${escape(error)}</p>` : ''}
    <form method="post" action="/interaction/${escape(uid)}/login">
      <label for="login">Login</label><input id="login" name="login" autocomplete="username" />
      <label for="password">Password</label><input id="password" name="password" type="password" />
      <button type="submit">Sign in</button>
    </form></body></html>`;
}

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (req.method === 'GET') {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(loginForm(details.uid));
    return;
  }
  const form = await readForm(req);
  const login = form.get('login') ?? '';
  if (USERS[login] === undefined || form.get('password') !== [...login].reverse().join('')) {
    res
      .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      .end(loginForm(details.uid, 'Wrong login or password.'));
    return;
  }
  await provider.interactionFinished(
    req,
    res,
    { login: { accountId: login } },
    { mergeWithLastSubmission: false },
  );
}

const handler = provider.callback();
const server = createServer((req, res) => {
  if (req.url?.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.writeHead(400, { 'content-type': 'text/plain' }).end(`interaction failed: ${err.message}`);
    });
    return;
  }
  handler(req, res);
});
server.listen(settings.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${issuer}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
});
