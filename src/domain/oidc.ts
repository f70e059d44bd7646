import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import type { ConsoleRole } from './console';

/**
 * The console's OpenID Connect sign-in (contract §9, issue 34), its rules: which role a person's
 * groups give, how a person is named in the audit, and the sealed cookie that carries a pending
 * sign-in from its start to the provider's answer. Token validation is not here: openid-client
 * does it (http/console/oidc-client.ts). Pure: the clock and the randomness's results are passed in
 * or drawn from node:crypto alone.
 */

/** Who signed in, as the session keeps them: never a token. */
export interface Person {
  /** `sub`: the provider's stable id of the person. */
  subject: string;
  /** `name` (else `preferred_username`), null when the provider gave none. */
  name: string | null;
  /** `email`, null when the provider gave none. */
  email: string | null;
}

/** Characters kept of any claim (a hostile or broken provider must not fill a row). */
const MAX_CLAIM_CHARS = 256;

function claimText(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const text = value.trim();
  return text === '' ? null : text.slice(0, MAX_CLAIM_CHARS);
}

/** The person of verified ID token claims (undefined without a `sub`, which a valid token has). */
export function personOf(claims: Record<string, unknown>): Person | undefined {
  const subject = claimText(claims.sub);
  if (subject === null) return undefined;
  return {
    subject,
    name: claimText(claims.name) ?? claimText(claims.preferred_username),
    email: claimText(claims.email),
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
 * Anything else is no group.
 */
export function groupsOf(claims: Record<string, unknown>, claim: string): string[] {
  const value = Object.prototype.hasOwnProperty.call(claims, claim) ? claims[claim] : undefined;
  if (typeof value === 'string') return [value];
  if (!Array.isArray(value)) return [];
  return value.filter((v): v is string => typeof v === 'string');
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

/** The sealing key: HKDF-SHA256 of the client secret, for this use only. */
export function pendingKey(clientSecret: string): Buffer {
  return Buffer.from(hkdfSync('sha256', clientSecret, 'consig-receiver', 'console oidc pending sign-in', 32));
}

/**
 * Seals a pending sign-in for its cookie: AES-256-GCM (encrypted and authenticated), base64url of
 * IV ‖ tag ‖ ciphertext. Any replica with the same client secret opens it; no one can read or
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
    const raw = Buffer.from(sealed, 'base64url');
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent, a value without IV, tag and ciphertext fails setAuthTag or final() below (tampered too); a sealed sign-in is far longer than 29 bytes
    if (raw.length < 29) return { problem: 'tampered' };
    const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    p = JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8'));
  } catch {
    // Unreadable, or not sealed with our key: `p` stays undefined, which isPending refuses below.
  }
  if (!isPending(p)) return { problem: 'tampered' };
  return p.expiresAt > nowMs ? p : { problem: 'expired' };
}

function isPending(p: unknown): p is PendingSignIn {
  // Stryker disable next-line ConditionalExpression: equivalent, a primitive fails the field checks below (o[k] is undefined); a sealed null would need our key, which seals objects only
  if (typeof p !== 'object' || p === null) return false;
  const o = p as Record<string, unknown>;
  return (
    ['state', 'nonce', 'verifier', 'next'].every((k) => typeof o[k] === 'string') &&
    typeof o.expiresAt === 'number'
  );
}
