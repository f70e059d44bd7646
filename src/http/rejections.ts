import type { IncomingMessage } from 'node:http';
import type { SchemaHold } from '../domain/migration-compat';
import type { SignatureFailure } from '../domain/signature';
import type { DeliveryOutcome } from '../domain/delivery';

/**
 * The webhook requests refused before anything is stored (contract §4 and the table of docs/operating.md):
 * what each one answers and records. The webhook handler sends, counts, audits and logs them all
 * one way.
 */

/** A request refused before anything was stored. */
export interface Rejection {
  outcome: Extract<
    DeliveryOutcome,
    'forbidden' | 'aborted' | 'payload_too_large' | 'invalid_signature' | 'storage_unavailable'
  >;
  status: number;
  error: string;
  message: string;
  /** The body was not read to its end: close the connection rather than reuse it. */
  close: boolean;
  bodyBytes: number | null;
  /** Why, in a few words: the audit row's `detail` and the log line's `reason`. */
  reason: string;
  /** Seconds the service should wait before it tries again (a `Retry-After` header). @default none */
  retryAfter?: number;
}

/** A replica that takes no delivery for now (issue 46): the 503's `error`, and why. */
export type WebhookHold = SchemaHold;

/**
 * Cluster mode (issue 46): this replica refuses PostgreSQL's schema (a newer one with a breaking
 * migration, or one behind while MIGRATE_ON_START=false), migrates it, or has not read it yet, so
 * it acknowledges nothing it might not relay in order: 503 before the body is read, and the service
 * retries (the balancer, following `/readyz`, sends it elsewhere; HAProxy's `retry-on 503` at once).
 * Counted as `storage_unavailable`: the delivery was not stored.
 */
export function schemaRefused(hold: WebhookHold): Rejection {
  return {
    outcome: 'storage_unavailable',
    status: 503,
    error: hold.error,
    message: `this replica does not take deliveries now: ${hold.message}`,
    close: true,
    bodyBytes: null,
    reason: hold.error,
    // A refused schema lasts until the replica is replaced; the others, a moment.
    retryAfter: hold.error === 'schema_incompatible' ? 5 : 1,
  };
}

/** ALLOWED_CIDRS does not hold the client's address (checked before the body is read). */
export function forbidden(): Rejection {
  return {
    outcome: 'forbidden',
    status: 403,
    error: 'forbidden',
    message: 'this address may not deliver webhooks here',
    close: true,
    bodyBytes: null,
    reason: 'not in ALLOWED_CIDRS',
  };
}

/** raw-body's error: over the limit (413), or the body stopped before its end (the client went away). */
export function unreadBody(
  err: Error & { type?: string },
  req: IncomingMessage,
  maxBodyBytes: number,
): Rejection {
  const declared = Number(req.headers['content-length']);
  const common = {
    close: true,
    bodyBytes: Number.isFinite(declared) ? declared : null,
    reason: err.type ?? err.message,
  };
  return err.type === 'entity.too.large'
    ? {
        ...common,
        outcome: 'payload_too_large',
        status: 413,
        error: 'payload_too_large',
        message: `body exceeds MAX_BODY_BYTES (${maxBodyBytes} bytes)`,
      }
    : {
        ...common,
        outcome: 'aborted',
        status: 400,
        error: 'bad_request',
        message: 'request body could not be read completely',
      };
}

/**
 * The signature header is missing, malformed or does not match the body (interface §5, "Webhook
 * authenticity"). The body was read whole, so the connection can be reused.
 */
export function badSignature(reason: SignatureFailure, bodyBytes: number, header: string): Rejection {
  const messages: Record<SignatureFailure, string> = {
    missing: `missing ${header} header`,
    malformed: `${header} must be sha256= followed by 64 hex digits`,
    mismatch: 'signature does not match the body',
  };
  return {
    outcome: 'invalid_signature',
    status: 401,
    error: 'invalid_signature',
    message: messages[reason],
    close: false,
    bodyBytes,
    reason,
  };
}
