import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { AttemptResult } from '../domain/forwarding/retry';
import { standardWebhookHeaders } from '../domain/forwarding/standard-webhooks';

/**
 * One signed POST of a message to a destination, and what came back, over undici's dispatcher
 * interface (a keep-alive pool per origin, callbacks, no streams). Issue 23 measured a request and
 * its answer at ~31–37 µs of client CPU against ~57–90 µs with `node:http` and a keep-alive agent
 * (and several times that with global `fetch`, which adds web streams and `AbortSignal.any`).
 */

/** How much of an answer's body is kept with the attempt. */
export const ANSWER_EXCERPT_BYTES = 1024;

/** Connections per origin: above the sender's concurrency (16 by default), so requests never queue here. */
const MAX_CONNECTIONS = 64;
/** An idle socket is closed before a server's usual keep-alive timeout (Node's: 5 s) closes it. */
const IDLE_SOCKET_MS = 4000;
/**
 * undici's own connect, headers and body timeouts are set beyond the longest attempt timeout a
 * destination may configure (60 s): each attempt's own timer governs, so a timeout always reads
 * `timeout: no answer within N ms`.
 */
const UNDICI_TIMEOUT_MS = 65_000;

/**
 * Keep-alive pools, one per destination origin, created on first use. A socket whose answer was
 * cut short (timeout, stop, excerpt read) is destroyed by undici, never reused.
 */
export class AttemptPools {
  private readonly pools = new Map<string, Pool>();

  for(url: URL): Pool {
    let pool = this.pools.get(url.origin);
    if (pool === undefined) {
      pool = new Pool(url.origin, {
        connections: MAX_CONNECTIONS,
        pipelining: 1,
        keepAliveTimeout: IDLE_SOCKET_MS,
        keepAliveMaxTimeout: IDLE_SOCKET_MS,
        connectTimeout: UNDICI_TIMEOUT_MS,
        headersTimeout: UNDICI_TIMEOUT_MS,
        bodyTimeout: UNDICI_TIMEOUT_MS,
      });
      this.pools.set(url.origin, pool);
    }
    return pool;
  }

  /** Closes every socket (idle or not): requests in flight fail; the next request opens new ones. */
  close(): void {
    for (const pool of this.pools.values()) pool.destroy().catch(() => undefined);
    this.pools.clear();
  }
}

/** Used when a request names no pools of its own. */
const sharedPools = new AttemptPools();

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
  /** Whose keep-alive sockets to use (the sender's own, closed when it stops); shared ones otherwise. */
  pools?: AttemptPools;
  /** Tracing: `traceparent` (and `tracestate`) naming the attempt's span. @default none */
  traceHeaders?: Readonly<Record<string, string>> | undefined;
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
 * Sends one attempt. Never throws: a timeout (which covers connecting, the answer and reading its
 * excerpt) and network errors are results. Redirects are not followed (retry.ts says why; undici's
 * dispatcher never follows them).
 */
export function sendAttempt(request: AttemptRequest): Promise<AttemptAnswer> {
  return new Promise<AttemptAnswer>((resolve) => {
    if (request.signal.aborted) return resolve(failure(request, 'stopped', 'aborted'));
    try {
      post(request, resolve);
    } catch (err) {
      // An unusable URL: refused before anything was sent.
      resolve(failure(request, 'network', describe(err)));
    }
  });
}

/** Destination URLs parsed once (a destination's URL is fixed; parsing it was ~5 % of a send). */
const URLS = new Map<string, URL>();
const MAX_CACHED_URLS = 256;

function parsedUrl(text: string): URL {
  let url = URLS.get(text);
  if (url === undefined) {
    url = new URL(text);
    if (URLS.size < MAX_CACHED_URLS) URLS.set(text, url);
  }
  return url;
}

/**
 * Settles once: the first of answer, error, timeout and stop wins; the others find it settled.
 * A timeout or stop before undici started the request (still connecting, or queued) aborts it as
 * soon as it starts.
 */
function post(request: AttemptRequest, resolve: (answer: AttemptAnswer) => void): void {
  const url = parsedUrl(request.url);
  const signed = standardWebhookHeaders(
    { id: request.webhookId, timestampSeconds: request.timestampSeconds, body: request.body },
    request.secrets,
  );
  // undici adds host and content-length itself.
  // prettier-ignore
  const headers = [
    'webhook-id', signed['webhook-id'],
    'webhook-timestamp', signed['webhook-timestamp'],
    'webhook-signature', signed['webhook-signature'],
    'content-type', 'application/json',
    'user-agent', 'consig-receiver',
  ];
  if (request.traceHeaders !== undefined)
    for (const [name, value] of Object.entries(request.traceHeaders)) headers.push(name, value);
  let settled = false;
  let controller: Dispatcher.DispatchController | null = null;
  const settle = (answer: AttemptAnswer): void => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    request.signal.removeEventListener('abort', onAbort);
    resolve(answer);
  };
  // Settled before the request is aborted: whatever the abort then reports finds it settled.
  const giveUp = (kind: 'timeout' | 'stopped'): void => {
    settle(failure(request, kind, kind));
    controller?.abort(new Error(kind));
  };
  const onAbort = (): void => giveUp('stopped');
  const timer = setTimeout(() => giveUp('timeout'), request.timeoutMs);
  request.signal.addEventListener('abort', onAbort, { once: true });
  const pool = (request.pools ?? sharedPools).for(url);
  const excerpt = new Excerpt();
  pool.dispatch(
    { origin: url.origin, path: url.pathname + url.search, method: 'POST', headers, body: request.body },
    {
      onRequestStart(c) {
        controller = c;
        if (settled) c.abort(new Error('settled'));
      },
      onResponseStart(c, statusCode, answerHeaders) {
        excerpt.start(statusCode, answerHeaders['retry-after']);
      },
      onResponseData(c, chunk) {
        // The excerpt is full: the rest is not read (its socket is not reused).
        if (excerpt.add(chunk)) {
          settle(excerpt.answer());
          c.abort(new Error('excerpt read'));
        }
      },
      onResponseEnd() {
        settle(excerpt.answer());
      },
      onResponseError(c, err) {
        settle(failure(request, 'network', describe(err)));
      },
    },
  );
}

/** The answer as it arrives: status, `Retry-After` and the first {@link ANSWER_EXCERPT_BYTES}. */
class Excerpt {
  private status = 0;
  private retryAfter: string | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;

  start(status: number, retryAfter: string | string[] | undefined): void {
    this.status = status;
    this.retryAfter = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
  }

  /** Keeps a chunk; true once the excerpt is full. */
  add(chunk: Buffer): boolean {
    this.chunks.push(chunk);
    this.size += chunk.length;
    return this.size >= ANSWER_EXCERPT_BYTES;
  }

  answer(): AttemptAnswer {
    const bytes = Buffer.concat(this.chunks, this.size).subarray(0, ANSWER_EXCERPT_BYTES);
    return {
      result: { status: this.status },
      answer: bytes.length === 0 ? null : bytes.toString('utf8'),
      retryAfter: this.retryAfter,
      error: null,
      stopped: false,
    };
  }
}

function failure(
  request: AttemptRequest,
  kind: 'timeout' | 'stopped' | 'network',
  detail: string,
): AttemptAnswer {
  const timedOut = kind === 'timeout';
  return {
    result: { error: timedOut ? 'timeout' : 'network' },
    answer: null,
    retryAfter: undefined,
    error: timedOut ? `timeout: no answer within ${request.timeoutMs} ms` : `network: ${detail}`,
    stopped: kind === 'stopped',
  };
}

/** The system's or undici's code (ECONNREFUSED, UND_ERR_SOCKET, …) when there is one. */
function describe(err: unknown): string {
  const e = err as NodeJS.ErrnoException | null;
  return e?.code ?? e?.message ?? String(err);
}
