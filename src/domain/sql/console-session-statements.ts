import type { TokenFingerprints } from '../console';

/**
 * Ends the console sessions not opened by their role's configured token ($1 the admin token's
 * fingerprint, $2 the viewer's; '' for a role without a token, which no fingerprint equals) nor by
 * the configured identity provider ($3, '' without one): the
 * console's store (src/core/console-session-queries.ts) and a replica starting with a rotated token
 * (runtime/cluster/node.ts) run it, one text for both stores.
 */
export const END_OTHER_SESSIONS = `DELETE FROM console_sessions WHERE token_fp IS NULL
  OR NOT ((role = 'admin' AND token_fp = $1) OR (role = 'viewer' AND token_fp = $2) OR token_fp = $3)`;

/** END_OTHER_SESSIONS's parameters for the fingerprints configured now. */
export function endOtherSessionsParams(fps: TokenFingerprints): [string, string, string] {
  return [fps.admin ?? '', fps.viewer ?? '', fps.oidc ?? ''];
}
