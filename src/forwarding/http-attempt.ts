import type { AttemptResult } from '../domain/forwarding/retry';
import { standardWebhookHeaders } from '../domain/forwarding/standard-webhooks';

/** One signed POST of a message to a destination, and what came back. */

/** How much of an answer's body is kept with the attempt. */
export const ANSWER_EXCERPT_BYTES = 1024;

export interface AttemptRequest {
  url: string;
  webhookId: string;
  /** The exact bytes to send (already masked for this destination). */
  body: string;
  secrets: readonly string[];
  timestampSeconds: number;
  timeoutMs: number;
  /** Aborts the request when the sender stops. */
  signal: AbortSignal;
}

export interface AttemptAnswer {
  result: AttemptResult;
  /** The first KB of the answer's body (UTF-8, lossy); null without an answer. */
  answer: string | null;
  /** The `Retry-After` header as sent. */
  retryAfter: string | undefined;
  /** `timeout: …` / `network: …` when there was no answer. */
  error: string | null;
  /** True when the request was aborted because the sender is stopping: not an attempt at all. */
  stopped: boolean;
}

/**
 * Sends one attempt. Never throws: a timeout (which also covers reading the answer) and network
 * errors are results. Redirects are not followed (retry.ts says why).
 */
export async function sendAttempt(request: AttemptRequest): Promise<AttemptAnswer> {
  const headers = {
    ...standardWebhookHeaders(
      { id: request.webhookId, timestampSeconds: request.timestampSeconds, body: request.body },
      request.secrets,
    ),
    'content-type': 'application/json',
    'user-agent': 'consig-receiver',
  };
  const timeout = AbortSignal.timeout(request.timeoutMs);
  const signal = AbortSignal.any([timeout, request.signal]);
  try {
    const res = await fetch(request.url, {
      method: 'POST',
      headers,
      body: request.body,
      signal,
      redirect: 'manual',
    });
    const answer = await readExcerpt(res);
    return {
      result: { status: res.status },
      answer,
      retryAfter: res.headers.get('retry-after') ?? undefined,
      error: null,
      stopped: false,
    };
  } catch (err) {
    const stopped = request.signal.aborted;
    const timedOut = timeout.aborted && !stopped;
    const detail = describe(err);
    return {
      result: { error: timedOut ? 'timeout' : 'network' },
      answer: null,
      retryAfter: undefined,
      error: timedOut ? `timeout: no answer within ${request.timeoutMs} ms` : `network: ${detail}`,
      stopped,
    };
  }
}

/** The first {@link ANSWER_EXCERPT_BYTES} of the body; the rest is not read (the stream is cancelled). */
async function readExcerpt(res: Response): Promise<string | null> {
  if (res.body === null) return null;
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < ANSWER_EXCERPT_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  const bytes = Buffer.concat(chunks).subarray(0, ANSWER_EXCERPT_BYTES);
  return bytes.length === 0 ? null : bytes.toString('utf8');
}

/** undici hides the reason (ECONNREFUSED, …) in `cause`. */
function describe(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.cause?.message ?? e.message ?? String(err);
}
