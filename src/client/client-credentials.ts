import { isObject, nonBlankString } from '../domain/json';
import { finiteNumber } from './api';
import { cachedToken, type IssuedToken, type TokenSource } from './auth';
import { AuthError, type CallContext, ProtocolError } from './errors';
import type { Transport } from './transport';

/**
 * interface §5: the token endpoint is not shown. This is the standard OAuth2 client credentials
 * grant (RFC 6749 §4.4): a form POST with grant_type, client_id and client_secret in the body
 * (RFC 6749 §2.3.1 allows them there; a server that insists on HTTP Basic answers 401 → AuthError),
 * answered by JSON with access_token and expires_in (seconds).
 */

/** Tokens from such services live minutes; one that comes without `expires_in` is kept this long. */
const DEFAULT_TOKEN_LIFETIME_S = 300;

export interface ClientCredentialsOptions {
  /** The token endpoint. */
  url: URL;
  clientId: string;
  clientSecret: string;
  /** Carries the token request; it must send no bearer token of its own. */
  transport: Transport;
  now: () => number;
  /** Called each time a token is obtained (metrics). */
  onTokenRefresh?: () => void;
}

/** Tokens from the token endpoint, cached until shortly before they expire. */
export function clientCredentialsTokens(options: ClientCredentialsOptions): TokenSource {
  return cachedToken({
    fetchToken: () => requestToken(options),
    now: options.now,
    onTokenRefresh: options.onTokenRefresh,
  });
}

async function requestToken(options: ClientCredentialsOptions): Promise<IssuedToken> {
  const { url, clientId, clientSecret, transport } = options;
  const response = await transport.call({
    method: 'POST',
    url,
    route: `POST ${url.pathname}`,
    form: new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: clientId,
      client_secret: clientSecret,
    }),
    auth: false,
    idempotent: true, // asking for a token twice has no effect on the service
    onClientError: refusal,
  });
  return readIssuedToken(response.body, { method: 'POST', path: url.pathname, status: response.status });
}

/** A 4xx from the token endpoint: the credentials were refused, with RFC 6749 §5.2's `error` if sent. */
function refusal(status: number, body: unknown, context: CallContext): AuthError {
  const oauthError = isObject(body) ? nonBlankString(body.error) : null;
  return new AuthError(
    context,
    `token endpoint refused the client credentials (HTTP ${status}${oauthError ? `, ${oauthError}` : ''})`,
    oauthError,
  );
}

function readIssuedToken(body: unknown, context: CallContext): IssuedToken {
  const fields = isObject(body) ? body : {};
  const accessToken = nonBlankString(fields.access_token);
  if (accessToken === null) throw new ProtocolError(context, 'token response without access_token');
  const expiresIn = finiteNumber(fields.expires_in);
  return {
    accessToken,
    expiresInS: expiresIn !== null && expiresIn > 0 ? expiresIn : DEFAULT_TOKEN_LIFETIME_S,
  };
}
