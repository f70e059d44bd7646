import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/**
 * `X-Service-Signature: sha256=<lowercase hex HMAC-SHA256(raw body, secret)>` (interface §5,
 * "Webhook authenticity"). Pure functions over bytes: no HTTP, no clock.
 */

const PREFIX = 'sha256=';
/** `sha256=` followed by exactly 64 hex digits. Upper-case hex is tolerated on input. */
const HEADER_PATTERN = /^sha256=([0-9a-fA-F]{64})$/;

export type SignatureFailure = 'missing' | 'malformed' | 'mismatch';

export type VerifyResult = { ok: true; secretIndex: number } | { ok: false; reason: SignatureFailure };

/** Compares an expected digest with the one received, in time independent of their contents. */
export type DigestEqual = (expected: Buffer, received: Buffer) => boolean;

/** Signs `body` the way the service does. */
export function sign(secret: string, body: Uint8Array | string): string {
  return PREFIX + createHmac('sha256', secret).update(body).digest('hex');
}

/**
 * Parses a signature header into its 32-byte digest, or says why it cannot be one.
 * Anything but `sha256=` + 64 hex digits is refused before any HMAC is computed.
 */
export function parseSignatureHeader(
  header: string | readonly string[] | undefined,
): { ok: true; digest: Buffer } | { ok: false; reason: 'missing' | 'malformed' } {
  if (header === undefined || header === '') return { ok: false, reason: 'missing' };
  // Node joins repeated headers into an array for some names; two signatures is not one signature.
  if (typeof header !== 'string') return { ok: false, reason: 'malformed' };
  const match = HEADER_PATTERN.exec(header.trim());
  if (!match?.[1]) return { ok: false, reason: 'malformed' };
  return { ok: true, digest: Buffer.from(match[1], 'hex') };
}

/**
 * Verifies `header` over the raw `body` against every configured secret (rotation: any one that
 * matches is accepted, like octokit's `verifyWithFallback`). Every secret is tried, matching or
 * not, so the time taken does not tell which one matched: each secret's digest goes through
 * `equal` (`timingSafeEqual`; the unit tests pass one that counts), the first match is reported.
 */
export function verifySignature(
  body: Uint8Array,
  header: string | readonly string[] | undefined,
  secrets: readonly string[],
  equal: DigestEqual = timingSafeEqual,
): VerifyResult {
  const parsed = parseSignatureHeader(header);
  if (!parsed.ok) return parsed;
  let matched = -1;
  for (let i = 0; i < secrets.length; i++) {
    const expected = createHmac('sha256', secrets[i] as string)
      .update(body)
      .digest();
    if (equal(expected, parsed.digest) && matched === -1) matched = i;
  }
  return matched === -1 ? { ok: false, reason: 'mismatch' } : { ok: true, secretIndex: matched };
}

/**
 * Compares two strings in time independent of where they differ and of their lengths: both are
 * hashed to 32 bytes first (for bearer tokens, where lengths may differ), and equal digests mean
 * equal strings (SHA-256's collision resistance), so no length check is needed beside them.
 */
export function constantTimeEqual(a: string, b: string): boolean {
  const x = createHash('sha256').update(a).digest();
  const y = createHash('sha256').update(b).digest();
  return timingSafeEqual(x, y);
}
