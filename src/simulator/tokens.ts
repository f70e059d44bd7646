import { randomBytes } from 'node:crypto';
import type { Clock } from '../clock';
import { isObject } from '../domain/json';
import type { Logger } from '../logger';
import { type Reply, reply } from './http-util';
import type { Context } from './http-util';
import { sameCredential } from './signing';

/**
 * Access tokens: the bearer tokens every API route asks for (interface §5) and the endpoint that
 * issues them. The interface does not show that endpoint ("How credentials are obtained, and the
 * token endpoint: not shown"), so it follows OAuth 2.0 client credentials (RFC 6749 §4.4).
 */

/** Above this many tokens, issuing one first forgets the expired ones (a sandbox may run for days). */
const SWEEP_ABOVE = 1000;

export class TokenBook {
  /** token → expiry (ms since the epoch, by the simulator's clock). */
  private readonly expiry = new Map<string, number>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlSeconds: number,
  ) {}

  issue(): string {
    const token = randomBytes(24).toString('base64url');
    const now = this.clock.now().getTime();
    if (this.expiry.size >= SWEEP_ABOVE)
      for (const [t, expiresAt] of this.expiry) if (now >= expiresAt) this.expiry.delete(t);
    this.expiry.set(token, now + this.ttlSeconds * 1000);
    return token;
  }

  /** Why `Authorization` does not carry a valid token (in Portuguese, like the service), or null. */
  problem(authorization: string | undefined): string | null {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match?.[1]) return 'Cabeçalho Authorization: Bearer <token> ausente';
    const expiresAt = this.expiry.get(match[1]);
    if (expiresAt === undefined) return 'Token inválido';
    if (this.clock.now().getTime() >= expiresAt) {
      this.expiry.delete(match[1]);
      return 'Token expirado';
    }
    return null;
  }
}

export interface TokenEndpointDeps {
  tokens: TokenBook;
  /** The only client credentials accepted; any non-empty pair when undefined. */
  clientId: string | undefined;
  clientSecret: string | undefined;
  tokenTtlSeconds: number;
  logger: Logger;
}

const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' };

/** An error answer of RFC 6749 §5.2. */
function oauthError(status: number, error: string, description: string, extra: Record<string, string> = {}) {
  return reply(status, { error, error_description: description }, { ...NO_STORE, ...extra });
}

/** The client credentials from the body (form or JSON), or from HTTP Basic (RFC 6749 §2.3.1) when sent. */
function clientCredentials(
  body: Record<string, unknown>,
  authorization: string | undefined,
): { clientId: string; clientSecret: string; basic: boolean } {
  let clientId = typeof body.client_id === 'string' ? body.client_id : '';
  let clientSecret = typeof body.client_secret === 'string' ? body.client_secret : '';
  const basic = /^Basic\s+(\S+)$/i.exec(authorization ?? '');
  if (basic?.[1]) {
    const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon > 0) {
      // RFC 6749 §2.3.1: both parts are form-urlencoded before they are joined.
      clientId = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '));
      clientSecret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' '));
    }
  }
  return { clientId, clientSecret, basic: basic !== null };
}

/** `POST /oauth/token`: the client credentials grant (RFC 6749 §4.4), answers as in RFC 6749 §5. */
export function tokenEndpoint(deps: TokenEndpointDeps) {
  return (ctx: Context): Reply => {
    const body = ctx.body === undefined ? {} : ctx.body;
    if (!isObject(body)) return oauthError(400, 'invalid_request', 'expected form or JSON parameters');
    const { clientId, clientSecret, basic } = clientCredentials(body, ctx.req.headers.authorization);
    if (body.grant_type === undefined) return oauthError(400, 'invalid_request', 'grant_type is required');
    if (body.grant_type !== 'client_credentials')
      return oauthError(400, 'unsupported_grant_type', 'only client_credentials is supported');
    const accepted =
      clientId !== '' &&
      clientSecret !== '' &&
      (deps.clientId === undefined || sameCredential(clientId, deps.clientId)) &&
      (deps.clientSecret === undefined || sameCredential(clientSecret, deps.clientSecret));
    if (!accepted) {
      deps.logger.warn({ client_id: clientId || undefined }, 'token refused: bad client credentials');
      const challenge: Record<string, string> = basic
        ? { 'www-authenticate': 'Basic realm="consig-simulator"' }
        : {};
      return oauthError(401, 'invalid_client', 'client authentication failed', challenge);
    }
    deps.logger.debug({ client_id: clientId }, 'token issued');
    const answer = {
      access_token: deps.tokens.issue(),
      token_type: 'Bearer',
      expires_in: Math.max(1, Math.round(deps.tokenTtlSeconds)),
    };
    return reply(200, answer, NO_STORE);
  };
}
