/**
 * Bearer tokens for the service (interface §5): a static token, or OAuth2 client credentials cached
 * until shortly before they expire. The token endpoint is not shown in the interface; see
 * client-credentials.ts for the RFC 6749 form this client assumes.
 */

export interface IssuedToken {
  accessToken: string;
  /** Lifetime in seconds from the moment of the request (`expires_in`). */
  expiresInS: number;
}

export interface TokenSource {
  /** A token to send now; concurrent callers share one in-flight request for it. */
  get(): Promise<string>;
  /** Drops `token` from the cache if it is still the cached one (after a 401 that used it). */
  invalidate(token: string): void;
  /** False for a static token: a 401 cannot be cured by asking again. */
  readonly refreshable: boolean;
}

export function staticToken(token: string): TokenSource {
  return { get: () => Promise.resolve(token), invalidate: () => undefined, refreshable: false };
}

/** Stop using a token 60 s before it expires, or 10 % of its lifetime before if that is less. */
export function tokenExpiresAt(issuedAtMs: number, expiresInS: number): number {
  const lifetimeMs = expiresInS * 1000;
  return issuedAtMs + lifetimeMs - Math.min(60_000, lifetimeMs * 0.1);
}

export interface CachedTokenOptions {
  /** Asks the token endpoint for a new token. */
  fetchToken: () => Promise<IssuedToken>;
  now: () => number;
  /** Called after each token obtained (metrics: token refreshes). */
  onTokenRefresh?: () => void;
}

export function cachedToken(options: CachedTokenOptions): TokenSource {
  let cached: { token: string; expiresAt: number } | null = null;
  let inflight: Promise<string> | null = null;

  async function refresh(): Promise<string> {
    // Counted from the moment of asking, so network time shortens the cached life, never extends it.
    const askedAt = options.now();
    const issued = await options.fetchToken();
    cached = { token: issued.accessToken, expiresAt: tokenExpiresAt(askedAt, issued.expiresInS) };
    options.onTokenRefresh?.();
    return issued.accessToken;
  }

  return {
    refreshable: true,
    get() {
      if (cached !== null && options.now() < cached.expiresAt) return Promise.resolve(cached.token);
      if (inflight === null) {
        inflight = refresh().finally(() => {
          inflight = null;
        });
      }
      return inflight;
    },
    invalidate(token) {
      if (cached?.token === token) cached = null;
    },
  };
}
