import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';

/**
 * The lender's side of the wire: a small HTTP server that receives the messages consig-receiver
 * forwards (contract §8), as a lender's engineer would write one. It is an example to copy, so it
 * uses only `node:http` and the `standardwebhooks` library — nothing of the receiver — and every
 * step says why it is there:
 *
 * 1. read the raw body (the signature covers the exact bytes, so never re-serialise parsed JSON);
 * 2. verify it (`webhook-id`, `webhook-timestamp`, `webhook-signature`) → 401 when it does not;
 * 3. answer 503 while "down" (`failFirst`), so the sender retries later — nothing is lost;
 * 4. skip a `webhook-id` already seen (the sender delivers at least once) → 200, not shown again;
 * 5. record it, then 200. Only a 2xx tells the sender the message arrived.
 *
 * The library reads `Date.now()` inside its verifier (the 5-minute replay window): acceptable in a
 * consumer; the receiver's own verifier (domain/forwarding/standard-webhooks.ts) takes the clock.
 */

/** A message as consig-receiver forwards it: `{ id, type, created_at, data }`. */
export interface ForwardedMessage {
  /** The same as the `webhook-id` header. */
  id: string;
  /** `proposal.changed`, `averbacao.result` or `event.received`. */
  type: string;
  created_at: string;
  data: Record<string, unknown>;
}

/** One message this consumer accepted, in the order they arrived. */
export interface ReceivedMessage {
  webhookId: string;
  receivedAt: Date;
  message: ForwardedMessage;
  /** How many times this consumer answered 503 to this `webhook-id` before accepting it. */
  failedBefore: number;
}

/** A request answered with something other than 200. */
export interface Refusal {
  /** 401 bad signature, 503 failing on purpose, 400 not a message, 405 not a POST, 413 too large. */
  status: 400 | 401 | 405 | 413 | 503;
  reason: string;
  /** The verified message, for a 503 (it will come again). */
  message?: ForwardedMessage;
}

export interface LenderConsumerOptions {
  /** @default 0 (any free port) */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /**
   * The signing secrets, any one verifies (several while the receiver rotates). Keyed as the
   * receiver keys them: `whsec_<base64>` by the decoded bytes (Standard Webhooks' format), any
   * other string by its UTF-8 bytes.
   */
  secrets: readonly string[];
  /**
   * Answer 503 to the first this-many verified requests, to show a destination that is down for a
   * while and catches up.
   * @default 0
   */
  failFirst?: number;
  /** Called once per accepted message (never for a repeat), before the 200 goes out. */
  onMessage: (received: ReceivedMessage) => void;
  /** Called for each request not answered 200. */
  onRefused?: (refusal: Refusal) => void;
}

export interface LenderConsumer {
  /** `http://host:port/`; any path is accepted. */
  readonly url: string;
  /** Accepted messages, first arrival of each `webhook-id`, in order. */
  readonly received: readonly ReceivedMessage[];
  readonly counts: {
    /** Repeats of a `webhook-id` already accepted (answered 200, not recorded again). */
    duplicates: number;
    /** 503 answers (`failFirst`). */
    failed: number;
    /** 401 answers (bad or missing signature). */
    refused: number;
  };
  close(): Promise<void>;
}

/** Forwarded messages are small; anything larger is not one of them. */
const MAX_BODY_BYTES = 1024 * 1024;

/** The secret as the `standardwebhooks` library wants it (see `LenderConsumerOptions.secrets`). */
export function webhookFor(secret: string): Webhook {
  return secret.startsWith('whsec_')
    ? new Webhook(secret)
    : new Webhook(Buffer.from(secret, 'utf8'), { format: 'raw' });
}

/**
 * Starts the consumer; resolves once it listens. Every request is answered as the module's comment
 * says; `close` stops it (dropping kept-alive connections).
 */
export async function startLenderConsumer(options: LenderConsumerOptions): Promise<LenderConsumer> {
  if (options.secrets.length === 0) throw new Error('startLenderConsumer: at least one secret is needed');
  // Built once: a malformed whsec_ secret fails here, at startup, not on the first message.
  const verifiers = options.secrets.map(webhookFor);
  const received: ReceivedMessage[] = [];
  const counts = { duplicates: 0, failed: 0, refused: 0 };
  // The ids accepted so far. A real consumer keeps this in its database (a unique key on
  // webhook-id), for at least as long as the sender retries (hours).
  const seen = new Set<string>();
  const failedIds = new Map<string, number>();

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const refuse = (refusal: Refusal): void => {
      options.onRefused?.(refusal);
      res.writeHead(refusal.status, { 'content-type': 'text/plain' }).end(`${refusal.reason}\n`);
    };
    if (req.method !== 'POST') return refuse({ status: 405, reason: 'POST only' });
    const body = await readBody(req);
    if (body === null) return refuse({ status: 413, reason: `body over ${MAX_BODY_BYTES} bytes` });

    const verified = verify(verifiers, body, req.headers);
    if (!verified.ok) {
      if (verified.status === 401) counts.refused += 1;
      return refuse({ status: verified.status, reason: verified.reason });
    }
    const { message, webhookId } = verified;

    if (counts.failed < (options.failFirst ?? 0)) {
      counts.failed += 1;
      failedIds.set(webhookId, (failedIds.get(webhookId) ?? 0) + 1);
      return refuse({ status: 503, reason: 'down for a while (on purpose)', message });
    }
    if (seen.has(webhookId)) {
      counts.duplicates += 1;
    } else {
      seen.add(webhookId);
      const entry = {
        webhookId,
        receivedAt: new Date(),
        message,
        failedBefore: failedIds.get(webhookId) ?? 0,
      };
      received.push(entry);
      options.onMessage(entry);
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // A bug in onMessage, a broken connection: 500 tells the sender to try again.
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy(err instanceof Error ? err : undefined);
    });
  });
  const url = await listen(server, options.port ?? 0, options.host ?? '127.0.0.1');
  return { url, received, counts, close: () => close(server) };
}

type Verified =
  | { ok: true; message: ForwardedMessage; webhookId: string }
  | { ok: false; status: 400 | 401; reason: string };

/**
 * `Webhook.verify` throws `WebhookVerificationError` ("Missing required headers", "No matching
 * signature found", "Message timestamp too old") → 401; it then parses the body as JSON, whose
 * failure is the sender's bug, not an attack → 400. Several secrets: any one verifies.
 */
function verify(verifiers: readonly Webhook[], body: string, headers: IncomingMessage['headers']): Verified {
  const plain: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value === 'string') plain[name] = value;
  }
  let failure = 'no secret';
  for (const webhook of verifiers) {
    try {
      const parsed = webhook.verify(body, plain);
      return isMessage(parsed)
        ? { ok: true, message: parsed, webhookId: plain['webhook-id'] ?? parsed.id }
        : { ok: false, status: 400, reason: 'not a forwarded message ({id, type, created_at, data})' };
    } catch (err) {
      if (!(err instanceof WebhookVerificationError)) {
        return { ok: false, status: 400, reason: `body is not JSON: ${(err as Error).message}` };
      }
      failure = err.message;
    }
  }
  return { ok: false, status: 401, reason: failure };
}

function isMessage(value: unknown): value is ForwardedMessage {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Record<string, unknown>;
  return (
    typeof m.id === 'string' && typeof m.type === 'string' && typeof m.data === 'object' && m.data !== null
  );
}

/**
 * The body as text, or null when it is over MAX_BODY_BYTES (read to the end all the same, so that
 * the 413 reaches the sender instead of a reset connection).
 */
async function readBody(req: IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  }
  return size > MAX_BODY_BYTES ? null : Buffer.concat(chunks).toString('utf8');
}

function listen(server: Server, port: number, host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address() as AddressInfo;
      const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${shownHost}:${address.port}/`);
    });
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    // The sender keeps connections alive; without this, close waits for them to time out.
    server.closeAllConnections();
  });
}
