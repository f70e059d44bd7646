import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The service's side of interface §5 "Webhook authenticity", written apart from the receiver's
 * verifier so that a mistake in one is not mirrored by the other.
 */

/** `sha256=` and the lowercase hex HMAC-SHA256 of the raw body, keyed with the registered secret. */
export function signatureOf(secret: string, body: string | Uint8Array): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * Whether a credential a client sent equals the expected one, in time that tells nothing about
 * where they differ or how long the expected one is (both are hashed to 32 bytes first).
 */
export function sameCredential(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}
