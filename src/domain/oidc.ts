import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { ConsoleRole, Person } from './console';

// Person is the console's (a session keeps one): oidc.ts makes one from a provider's claims.
export type { Person } from './console';

/**
 * The console's OpenID Connect sign-in (contract §9, issue 34), its rules: which role a person's
 * groups give, how a person is named in the audit, and the sealed cookie that carries a pending
 * sign-in from its start to the provider's answer. Token validation is not here: openid-client
 * does it (http/console/oidc-client.ts). Pure: the clock and the randomness's results are passed in
 * or drawn from node:crypto alone.
 */

/** Characters kept of any claim (a hostile or broken provider must not fill a row). */
const MAX_CLAIM_CHARS = 256;

function claimText(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const text = value.trim();
  return text === '' ? null : text.slice(0, MAX_CLAIM_CHARS);
}

/**
 * Whether the provider says it verified the address in `email` (`email_verified`: true, or the text
 * "true" some providers send). An address it did not verify is whatever the person typed: it names
 * no one and grants nothing (issue 44).
 */
export function emailVerified(claims: Record<string, unknown>): boolean {
  return claims.email_verified === true || claims.email_verified === 'true';
}

/**
 * The person of verified ID token claims (undefined without a `sub`, which a valid token has). An
 * e-mail the provider did not verify is dropped: the audit then names the person by subject.
 */
export function personOf(claims: Record<string, unknown>): Person | undefined {
  const subject = claimText(claims.sub);
  if (subject === null) return undefined;
  return {
    subject,
    name: claimText(claims.name) ?? claimText(claims.preferred_username),
    email: emailVerified(claims) ? claimText(claims.email) : null,
  };
}

/** How the audit names a person: the e-mail, else the subject. */
export function personLabel(p: Pick<Person, 'subject' | 'email'>): string {
  return p.email ?? p.subject;
}

/** How the console's header names a person: the name, else the e-mail, else the subject. */
export function personDisplay(p: Person): string {
  return p.name ?? personLabel(p);
}

/**
 * The values of the groups claim: a list of strings (Entra ID, Okta, Keycloak), or one string (a
 * claim such as `email` or `hd` used as the "group", for a provider that sends no groups).
 * Anything else is no group, and so is an `email` the provider did not verify.
 */
export function groupsOf(claims: Record<string, unknown>, claim: string): string[] {
  if (claim === 'email' && !emailVerified(claims)) return [];
  const value = Object.prototype.hasOwnProperty.call(claims, claim) ? claims[claim] : undefined;
  if (typeof value === 'string') return [value];
  if (!Array.isArray(value)) return [];
  return value.filter((v): v is string => typeof v === 'string');
}

/**
 * Whether the ID token was issued to this client by its `azp` (authorized party): absent, or our
 * client id. openid-client refuses a token with several audiences whose `azp` is not ours, or that
 * has none; one audience (ours) with another client's `azp` is refused here (OpenID Connect Core
 * 3.1.3.7: the client verifies its client id is the `azp` when there is one).
 */
export function authorizedParty(claims: Record<string, unknown>, clientId: string): boolean {
  return claims.azp === undefined || claims.azp === clientId;
}

export interface GroupRoles {
  adminGroups: readonly string[];
  viewerGroups: readonly string[];
}

/** The role the person's groups give: admin wins where both match; null when neither does. */
export function roleForGroups(groups: readonly string[], roles: GroupRoles): ConsoleRole | null {
  if (groups.some((g) => roles.adminGroups.includes(g))) return 'admin';
  if (groups.some((g) => roles.viewerGroups.includes(g))) return 'viewer';
  return null;
}

// ---- the pending sign-in -------------------------------------------------------------------------

/** How long a sign-in may take at the provider (its login form, a second factor). */
export const PENDING_TTL_MS = 10 * 60_000;

/** What the browser carries from the start of a sign-in to the callback. */
export interface PendingSignIn {
  state: string;
  nonce: string;
  /** The PKCE code verifier (its S256 challenge went to the provider). */
  verifier: string;
  /** The console page to go to once signed in. */
  next: string;
  /** Epoch ms after which the callback refuses it. */
  expiresAt: number;
}

/** The name of the sealing key in `console_keys` (migrations 0015, pg 0011). */
export const PENDING_KEY_NAME = 'oidc-pending';

/**
 * A new sealing key: 32 random bytes. Not derived from the client secret (issue 44): anyone can
 * get a sealed cookie from /console/oidc/start, and its plaintext's start is known, so a key derived
 * from a short secret falls to an offline search of the secret. The first replica to need it keeps
 * it in the log (`console_keys`), where every replica reads the same one.
 */
export function newPendingKey(): Buffer {
  return randomBytes(32);
}

/**
 * Seals a pending sign-in for its cookie: AES-256-GCM (encrypted and authenticated), base64url of
 * IV ‖ tag ‖ ciphertext. Any replica on the same log (the same key) opens it; no one can read or
 * change it on the way.
 */
export function sealPending(p: PendingSignIn, key: Buffer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const sealed = Buffer.concat([cipher.update(JSON.stringify(p), 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url');
}

/** Why a pending sign-in cannot be used (the callback's refusal says which). */
export type PendingProblem = 'missing' | 'tampered' | 'expired';

/** Opens a sealed pending sign-in, refused when absent, altered, sealed with another key, or expired. */
export function openPending(
  sealed: string | undefined,
  key: Buffer,
  nowMs: number,
): PendingSignIn | { problem: PendingProblem } {
  if (sealed === undefined || sealed === '') return { problem: 'missing' };
  let p: unknown;
  try {
    // No length check: a value shorter than IV (12) ‖ tag (16) has an empty IV (which throws) or a
    // short tag (which the option below refuses), and leaves no ciphertext, whose empty text is no
    // JSON anyway — refused as tampered, as anything unreadable is.
    const raw = Buffer.from(sealed, 'base64url');
    const decipher = createDecipheriv(
      'aes-256-gcm',
      key,
      raw.subarray(0, 12),
      // Stryker disable next-line ObjectLiteral: equivalent, without it a tag shorter than 16 bytes comes with no ciphertext and is refused as '' is no JSON (Node >= 23 also warns, DEP0182): the option says the tag length rather than leaving it to that
      { authTagLength: 16 },
    );
    decipher.setAuthTag(raw.subarray(12, 28));
    p = JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8'));
  } catch {
    // Unreadable, or not sealed with our key: `p` stays undefined, which isPending refuses below.
  }
  if (!isPending(p)) return { problem: 'tampered' };
  return p.expiresAt > nowMs ? p : { problem: 'expired' };
}

function isPending(p: unknown): p is PendingSignIn {
  if (typeof p !== 'object' || p === null) return false;
  const o = p as Record<string, unknown>;
  return (
    ['state', 'nonce', 'verifier', 'next'].every((k) => typeof o[k] === 'string') &&
    typeof o.expiresAt === 'number'
  );
}
