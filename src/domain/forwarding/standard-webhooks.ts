import { createHmac, timingSafeEqual } from 'node:crypto';

import { boundedMemo } from '../memo';

/**
 * Standard Webhooks signing for the requests we forward to a lender (contract §8; the
 * specification is https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp` (unix
 * seconds) and `webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, one
 * `v1,…` per secret, space-separated, while secrets rotate.
 *
 * Pure functions over strings: no HTTP and no clock. The reference library (`standardwebhooks`)
 * reads `Date.now()` inside its verifier; here the caller passes `nowSeconds`, so the freshness
 * window is testable and the same everywhere.
 */

const WHSEC_PREFIX = 'whsec_';
/** Unix seconds as the header carries them: digits only, at most 15 (a safe integer). */
const TIMESTAMP_PATTERN = /^\d{1,15}$/;

/** How far `webhook-timestamp` may be from the verifier's clock, either way (the library's 5 min). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export type StandardWebhookHeaderName = 'webhook-id' | 'webhook-timestamp' | 'webhook-signature';

export interface StandardWebhookInput {
  /** The message id; the same on every attempt of one message, so the receiver can deduplicate. */
  id: string;
  /** Unix seconds of this attempt (a non-negative integer). */
  timestampSeconds: number;
  /** The exact body sent; signed as its UTF-8 bytes. */
  body: string;
}

export type StandardWebhookFailure =
  'missing_headers' | 'bad_timestamp' | 'too_old' | 'too_new' | 'no_matching_signature';

export type StandardWebhookVerification = { ok: true } | { ok: false; reason: StandardWebhookFailure };

/**
 * The HMAC key for a configured secret.
 *
 * - `whsec_<base64>` is the specification's format: the key is the base64 after the prefix,
 *   decoded (what the `standardwebhooks` library and Svix do).
 * - Any other string is keyed by its UTF-8 bytes, as typed. This is what a partner gets with
 *   `FORWARD_SECRET=some-string`; to verify with the library they pass
 *   `whsec_` + base64(UTF-8 bytes of the string), or the bytes with its `{ format: 'raw' }` option.
 *
 * @throws RangeError when the key would be empty or a `whsec_` secret is not canonical base64
 *   (RFC 4648 §4, padded or not: anything else is a typo, not a key). Node's decoder skips bad
 *   characters silently, which would sign with the wrong key: what it skipped or repaired (a
 *   character outside the alphabet, base64url's, padding inside or too much, stray bits in the last
 *   character) is not in the key's own base64, so the two differ.
 */
export function secretKey(secret: string): Buffer {
  let key: Buffer;
  if (secret.startsWith(WHSEC_PREFIX)) {
    const encoded = secret.slice(WHSEC_PREFIX.length);
    key = Buffer.from(encoded, 'base64');
    // Canonical base64 (Node's decoder skips what is not), its padding optional but never wrong.
    const padded = encoded.padEnd(Math.ceil(encoded.length / 4) * 4, '=');
    if (key.toString('base64') !== padded || (encoded.includes('=') && encoded !== padded)) {
      throw new RangeError('a whsec_ secret must be base64 after the prefix');
    }
  } else {
    key = Buffer.from(secret, 'utf8');
  }
  if (key.length === 0) throw new RangeError('a signing secret must not be empty');
  return key;
}

/**
 * Keys by secret: decoding and checking a `whsec_` secret on every attempt was ~5 % of a send.
 * Configured secrets are few; a verifier given many distinct ones (tests) just recomputes.
 */
const KEYS = boundedMemo(64, secretKey);

function hmac(key: Buffer, input: StandardWebhookInput): Buffer {
  return createHmac('sha256', key)
    .update(`${input.id}.${input.timestampSeconds}.${input.body}`, 'utf8')
    .digest();
}

/**
 * The `webhook-signature` header value: `v1,<base64>` for each secret, space-separated, in the
 * order given (during a rotation the receiver accepts whichever one it knows).
 *
 * @throws RangeError without secrets, with a timestamp that is not a non-negative integer (the
 *   header would not be what the specification's verifiers parse), or a bad secret (`secretKey`).
 */
export function signStandardWebhook(input: StandardWebhookInput, secrets: readonly string[]): string {
  if (secrets.length === 0) throw new RangeError('at least one signing secret is needed');
  if (!Number.isSafeInteger(input.timestampSeconds) || input.timestampSeconds < 0) {
    throw new RangeError('timestampSeconds must be a non-negative integer');
  }
  return secrets.map((secret) => `v1,${hmac(KEYS.get(secret), input).toString('base64')}`).join(' ');
}

/** The three Standard Webhooks headers of one attempt (content-type is the sender's business). */
export function standardWebhookHeaders(
  input: StandardWebhookInput,
  secrets: readonly string[],
): Record<StandardWebhookHeaderName, string> {
  return {
    'webhook-id': input.id,
    'webhook-timestamp': String(input.timestampSeconds),
    'webhook-signature': signStandardWebhook(input, secrets),
  };
}

/** Header names are case-insensitive (RFC 9110 §5.1); Node lower-cases them, other callers may not. */
function header(headers: Record<string, string | undefined>, name: StandardWebhookHeaderName): string {
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name && value !== undefined && value.trim() !== '') return value.trim();
  }
  return '';
}

/**
 * Whether any `v1,` entry of a `webhook-signature` value is the HMAC under any secret. Each entry
 * is compared as base64 text, with `timingSafeEqual` on equal-length buffers (a length differing
 * from 44 characters reveals nothing: every v1 signature has that length). Every secret and every
 * entry is tried, so the time taken does not tell which one matched. Other versions (`v1a`, the
 * asymmetric scheme) are skipped, as the specification asks.
 */
function anySignatureMatches(signatureHeader: string, expected: readonly Buffer[]): boolean {
  let matched = false;
  for (const entry of signatureHeader.split(' ')) {
    const comma = entry.indexOf(',');
    // Without a comma, slice(0, -1) is 'v1' only for a 3-character entry, never a digest's 44.
    if (entry.slice(0, comma) !== 'v1') continue;
    const candidate = Buffer.from(entry.slice(comma + 1), 'utf8');
    for (const digest of expected) {
      if (candidate.length === digest.length && timingSafeEqual(candidate, digest)) matched = true;
    }
  }
  return matched;
}

/**
 * Verifies a Standard Webhooks request on its raw body, against every configured secret (any one
 * verifies). Checked in the reference library's order: the three headers present, the timestamp a
 * whole number of seconds within `toleranceSeconds` of `nowSeconds` (a replay window, so an old
 * captured request cannot be sent again later), then the signature.
 *
 * `toleranceSeconds` defaults to {@link DEFAULT_TOLERANCE_SECONDS}.
 *
 * @throws RangeError for a malformed configured secret (see {@link secretKey}): that is a
 *   configuration mistake to surface, not a request to refuse.
 */
export function verifyStandardWebhook(input: {
  headers: Record<string, string | undefined>;
  body: string;
  secrets: readonly string[];
  nowSeconds: number;
  toleranceSeconds?: number;
}): StandardWebhookVerification {
  const id = header(input.headers, 'webhook-id');
  const timestamp = header(input.headers, 'webhook-timestamp');
  const signature = header(input.headers, 'webhook-signature');
  if (id === '' || timestamp === '' || signature === '') return { ok: false, reason: 'missing_headers' };
  if (!TIMESTAMP_PATTERN.test(timestamp)) return { ok: false, reason: 'bad_timestamp' };
  const timestampSeconds = Number(timestamp);
  const tolerance = input.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (input.nowSeconds - timestampSeconds > tolerance) return { ok: false, reason: 'too_old' };
  if (timestampSeconds - input.nowSeconds > tolerance) return { ok: false, reason: 'too_new' };
  const message = { id, timestampSeconds, body: input.body };
  const expected = input.secrets.map((secret) =>
    Buffer.from(hmac(KEYS.get(secret), message).toString('base64')),
  );
  return anySignatureMatches(signature, expected)
    ? { ok: true }
    : { ok: false, reason: 'no_matching_signature' };
}
