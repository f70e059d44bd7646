import * as client from 'openid-client';
import type { OidcConfig } from '../../config';
import {
  authorizedParty,
  newPendingKey,
  PENDING_KEY_NAME,
  type PendingSignIn,
  PENDING_TTL_MS,
  sealPending,
} from '../../domain/oidc';
import type { Logger } from '../../logger';

/**
 * The console's OpenID Connect client: openid-client (the reference implementation) does the
 * protocol — discovery, the authorization code flow with PKCE (S256), `state` and `nonce`, the
 * token request and every check of the ID token (signature against the provider's published keys,
 * `iss`, `aud`, `exp`, `nonce`). Nothing here validates a token by hand.
 *
 * Discovery is lazy and retried: the receiver starts and answers webhooks while the provider is
 * unreachable; the sign-in page asks again (at most every {@link RETRY_MS}) and sign-in works as
 * soon as the provider answers, without a restart. The provider's metadata is then kept for the
 * life of the process (its keys are fetched again by openid-client when a token names a new one).
 */

/** A failed discovery is not tried again sooner than this (a page view must not hammer the provider). */
const RETRY_MS = 2_000;
/**
 * The sign-in page asks the provider again when its discovery is older than this, so that a
 * provider gone down since says so there (one small GET per replica at most this often).
 */
const RECHECK_MS = 5_000;
/** How long a request to the provider may take (discovery, keys, token), in seconds. */
const TIMEOUT_S = 5;

export const CALLBACK_PATH = '/console/oidc/callback';

/** Why a callback was refused: a short code for the audit, and a message the page may show. */
export class SignInRefused extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = 'SignInRefused';
  }
}

export class OidcClient {
  private config: client.Configuration | undefined;
  private discovering: Promise<client.Configuration | undefined> | undefined;
  private failedAt = Number.NEGATIVE_INFINITY;
  private discoveredAt = Number.NEGATIVE_INFINITY;
  private key: Promise<Buffer> | undefined;

  /**
   * `sharedKey(name, candidate)`: the console's key `name` from the log, `candidate` written when
   * there is none yet (every replica reads the same one).
   */
  constructor(
    readonly settings: OidcConfig,
    private readonly logger: Logger,
    private readonly now: () => number,
    private readonly sharedKey: (name: string, candidate: string) => Promise<string>,
  ) {}

  /** The redirect URI registered at the provider. */
  get redirectUri(): string {
    return `${this.settings.publicUrl}${CALLBACK_PATH}`;
  }

  /**
   * The key that seals a pending sign-in's cookie: random, kept in the log (issue 44; not derived
   * from the client secret), read once per process. A failed read is tried again at the next use.
   */
  pendingKey(): Promise<Buffer> {
    if (this.key === undefined) {
      const key = this.sharedKey(PENDING_KEY_NAME, newPendingKey().toString('base64url')).then((text) => {
        const bytes = Buffer.from(text, 'base64url');
        if (bytes.length !== 32) throw new Error(`console_keys ${PENDING_KEY_NAME} is not a 32-byte key`);
        return bytes;
      });
      key.catch(() => {
        if (this.key === key) this.key = undefined;
      });
      this.key = key;
    }
    return this.key;
  }

  /**
   * The provider's configuration, or undefined while it cannot be reached. `recheck` (the sign-in
   * page): discovered again when older than {@link RECHECK_MS}.
   */
  async configuration(options: { recheck?: boolean } = {}): Promise<client.Configuration | undefined> {
    const stale = options.recheck === true && this.now() - this.discoveredAt >= RECHECK_MS;
    if (this.config !== undefined && !stale) return this.config;
    if (this.now() - this.failedAt < RETRY_MS) return undefined;
    this.discovering ??= this.discover().finally(() => {
      this.discovering = undefined;
    });
    return this.discovering;
  }

  private async discover(): Promise<client.Configuration | undefined> {
    const { issuer, clientId, clientSecret } = this.settings;
    const url = new URL(issuer);
    try {
      this.config = await client.discovery(url, clientId, undefined, client.ClientSecretBasic(clientSecret), {
        timeout: TIMEOUT_S,
        execute: [
          // The ID token's signature is checked against the provider's published keys even though
          // it came straight from the token endpoint (which OpenID Connect lets a client skip): a
          // token signed by any other key is refused.
          client.enableNonRepudiationChecks,
          // Plain http only on a loopback host (config.ts signInUrl refuses it elsewhere).
          ...(url.protocol === 'http:' ? [client.allowInsecureRequests] : []),
        ],
      });
      this.config.timeout = TIMEOUT_S;
      if (this.discoveredAt === Number.NEGATIVE_INFINITY || this.failedAt > this.discoveredAt)
        this.logger.info({ issuer }, 'console: identity provider discovered');
      this.discoveredAt = this.now();
      return this.config;
    } catch (err) {
      // Gone since it was discovered: a sign-in started now would lead to a provider that is not there.
      this.config = undefined;
      this.failedAt = this.now();
      this.logger.warn(
        { issuer, err: errorCode(err) },
        'console: the identity provider cannot be reached; sign-in waits for it (webhooks are not affected)',
      );
      return undefined;
    }
  }

  /**
   * Starts a sign-in: the provider's authorization URL and the sealed pending sign-in for the
   * browser's cookie; undefined while the provider cannot be reached.
   */
  async start(next: string): Promise<{ url: URL; sealed: string } | undefined> {
    const config = await this.configuration();
    if (config === undefined) return undefined;
    const verifier = client.randomPKCECodeVerifier();
    const pending: PendingSignIn = {
      state: client.randomState(),
      nonce: client.randomNonce(),
      verifier,
      next,
      expiresAt: this.now() + PENDING_TTL_MS,
    };
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: this.redirectUri,
      scope: this.settings.scopes.join(' '),
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url, sealed: sealPending(pending, await this.pendingKey()) };
  }

  /**
   * Completes a sign-in from the provider's answer (`currentUrl`: PUBLIC_URL + the callback's path
   * and query): the code exchanged with the PKCE verifier, the answer's `state` and the ID token's
   * `nonce` checked against the pending sign-in. Returns the ID token's verified claims; throws
   * {@link SignInRefused} otherwise. The tokens themselves are dropped here: never logged or stored.
   */
  async finish(pending: PendingSignIn, currentUrl: URL): Promise<Record<string, unknown>> {
    const config = await this.configuration();
    if (config === undefined)
      throw new SignInRefused('provider_unreachable', 'The identity provider cannot be reached.');
    try {
      const tokens = await client.authorizationCodeGrant(config, currentUrl, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      const claims = tokens.claims();
      if (claims === undefined) throw new SignInRefused('no_id_token', 'The provider sent no ID token.');
      if (!authorizedParty(claims, this.settings.clientId))
        throw new SignInRefused('wrong_azp', 'the ID token was issued to another client (its "azp").');
      return { ...claims };
    } catch (err) {
      if (err instanceof SignInRefused) throw err;
      throw new SignInRefused(errorCode(err), errorMessage(err));
    }
  }

  /** Where sign-out sends the browser: the provider's end-session endpoint, when it offers one. */
  async endSessionUrl(): Promise<URL | undefined> {
    const config = await this.configuration();
    if (config?.serverMetadata().end_session_endpoint === undefined) return undefined;
    return client.buildEndSessionUrl(config, {
      client_id: this.settings.clientId,
      post_logout_redirect_uri: `${this.settings.publicUrl}/console/login`,
    });
  }

  /** The origins the console's forms may lead to (CSP form-action): the provider's, as known now. */
  formOrigins(): string[] {
    const origins = new Set([new URL(this.settings.issuer).origin]);
    const meta = this.config?.serverMetadata();
    for (const url of [meta?.authorization_endpoint, meta?.end_session_endpoint]) {
      if (url !== undefined) origins.add(new URL(url).origin);
    }
    return [...origins];
  }
}

/** A short code for an error from openid-client: the OAuth error, else its code, else its name. */
function errorCode(err: unknown): string {
  const e = err as { error?: unknown; code?: unknown; name?: unknown; cause?: { code?: unknown } };
  if (typeof e.error === 'string') return e.error.slice(0, 64);
  if (typeof e.code === 'string') return e.code.slice(0, 64);
  if (typeof e.cause?.code === 'string') return e.cause.code.slice(0, 64);
  return typeof e.name === 'string' ? e.name.slice(0, 64) : 'error';
}

/**
 * Its message, short: the provider's `error_description`, else the message of the check that failed
 * (oauth4webapi's, which openid-client wraps as `cause`: `unexpected ID Token "nonce" claim value`),
 * which names the check, never a token.
 */
function errorMessage(err: unknown): string {
  const e = err as { message?: unknown; error_description?: unknown; cause?: { message?: unknown } };
  const cause = typeof e.cause?.message === 'string' ? e.cause.message : undefined;
  const text = typeof e.error_description === 'string' ? e.error_description : (cause ?? e.message);
  return typeof text === 'string' ? text.slice(0, 200) : 'the sign-in could not be completed';
}
