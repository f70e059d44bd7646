import * as http from 'node:http';
import * as https from 'node:https';
import { urlToHttpOptions } from 'node:url';
import type { AttemptResult } from '../domain/forwarding/retry';
import { standardWebhookHeaders } from '../domain/forwarding/standard-webhooks';

/**
 * One signed POST of a message to a destination, and what came back. Plain `node:http` with a
 * keep-alive agent per origin: global `fetch` (undici, web streams, `AbortSignal.any`) cost several
 * times the CPU per request.
 */

/** How much of an answer's body is kept with the attempt. */
export const ANSWER_EXCERPT_BYTES = 1024;

/** Sockets per origin: above the sender's concurrency (16 by default), so requests never queue here. */
const MAX_SOCKETS = 64;
/** An idle socket is closed before a server's usual keep-alive timeout (Node's: 5 s) closes it. */
const IDLE_SOCKET_MS = 4000;

/**
 * Keep-alive agents, one per destination origin, created on first use. A socket destroyed
 * mid-answer (timeout, stop, excerpt read) is dropped by its agent, never reused.
 */
export class AttemptAgents {
  private readonly agents = new Map<string, http.Agent>();

  for(url: URL): http.Agent {
    let agent = this.agents.get(url.origin);
    if (agent === undefined) {
      const options: http.AgentOptions = {
        keepAlive: true,
        maxSockets: MAX_SOCKETS,
        maxFreeSockets: MAX_SOCKETS,
        timeout: IDLE_SOCKET_MS,
      };
      agent = url.protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
      this.agents.set(url.origin, agent);
    }
    return agent;
  }

  /** Closes every socket (idle or not); the next request opens new ones. */
  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}

/** Used when a request names no agents of its own. */
const sharedAgents = new AttemptAgents();

/** Closes the sockets of the shared agents (requests made without `agents`). */
export function closeAgents(): void {
  sharedAgents.close();
}

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
  agents?: AttemptAgents;
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
 * excerpt) and network errors are results. Redirects are not followed (retry.ts says why; node:http
 * never follows them).
 */
export function sendAttempt(request: AttemptRequest): Promise<AttemptAnswer> {
  return new Promise<AttemptAnswer>((resolve) => {
    if (request.signal.aborted) return resolve(failure(request, 'stopped', 'aborted'));
    try {
      post(request, resolve);
    } catch (err) {
      // An unusable URL or header value: refused before anything was sent.
      resolve(failure(request, 'network', describe(err)));
    }
  });
}

interface ParsedUrl {
  url: URL;
  /** What `http.request` makes of the URL (host, port, path), with the method, computed once. */
  options: http.RequestOptions;
}

/** Destination URLs parsed once (a destination's URL is fixed; parsing it was ~5 % of a send). */
const URLS = new Map<string, ParsedUrl>();
const MAX_CACHED_URLS = 256;

function parsedUrl(text: string): ParsedUrl {
  let parsed = URLS.get(text);
  if (parsed === undefined) {
    const url = new URL(text);
    parsed = { url, options: { ...urlToHttpOptions(url), method: 'POST' } };
    if (URLS.size < MAX_CACHED_URLS) URLS.set(text, parsed);
  }
  return parsed;
}

/** Settles once: the first of answer, error, timeout and stop wins; the others find it settled. */
function post(request: AttemptRequest, resolve: (answer: AttemptAnswer) => void): void {
  const { url, options } = parsedUrl(request.url);
  const signed = standardWebhookHeaders(
    { id: request.webhookId, timestampSeconds: request.timestampSeconds, body: request.body },
    request.secrets,
  );
  // As a list: node:http then writes the head as given, instead of one setHeader (name and value
  // checks, a map) per header. Every value is ours (digits, base64, the parsed URL's host), so
  // nothing the checks would refuse can be in it; Host, which node:http adds only to an object of
  // headers, is added here.
  // prettier-ignore
  const headers = [
    'host', url.host,
    'webhook-id', signed['webhook-id'],
    'webhook-timestamp', signed['webhook-timestamp'],
    'webhook-signature', signed['webhook-signature'],
    'content-type', 'application/json',
    'user-agent', 'consig-receiver',
    'content-length', String(Buffer.byteLength(request.body, 'utf8')),
  ];
  let settled = false;
  const settle = (answer: AttemptAnswer): void => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    request.signal.removeEventListener('abort', onAbort);
    resolve(answer);
  };
  const fail = (err: unknown): void => settle(failure(request, 'network', describe(err)));
  // Settled before the socket is destroyed: whatever the destroy then emits finds it settled.
  const giveUp = (kind: 'timeout' | 'stopped'): void => {
    settle(failure(request, kind, kind));
    req.destroy(new Error(kind));
  };
  const onAbort = (): void => giveUp('stopped');
  const agent = (request.agents ?? sharedAgents).for(url);
  const transport = url.protocol === 'https:' ? https : http;
  const req = transport.request({ ...options, headers, agent }, (res) => readAnswer(res, settle, fail));
  const timer = setTimeout(() => giveUp('timeout'), request.timeoutMs);
  request.signal.addEventListener('abort', onAbort, { once: true });
  req.on('error', fail);
  // The body as a string: node:http joins it to the head (one chunk, no copy into a Buffer first).
  // With the list of headers, ~5–15 µs less CPU per attempt (of ~120) measured in issue 23.
  req.end(request.body, 'utf8');
}

/**
 * Reads the first {@link ANSWER_EXCERPT_BYTES} of the answer, then destroys it (the rest is not
 * read; its socket is not reused). The listeners stay: errors after that are swallowed.
 */
function readAnswer(
  res: http.IncomingMessage,
  settle: (answer: AttemptAnswer) => void,
  fail: (err: unknown) => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let done = false;
  const complete = (): void => {
    if (done) return;
    done = true;
    const bytes = Buffer.concat(chunks, size).subarray(0, ANSWER_EXCERPT_BYTES);
    const retryAfter = res.headers['retry-after'];
    settle({
      result: { status: res.statusCode ?? 0 },
      answer: bytes.length === 0 ? null : bytes.toString('utf8'),
      retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter,
      error: null,
      stopped: false,
    });
  };
  res.on('data', (chunk: Buffer) => {
    if (done) return;
    chunks.push(chunk);
    size += chunk.length;
    if (size >= ANSWER_EXCERPT_BYTES) {
      complete();
      if (!res.complete) res.destroy();
    }
  });
  res.on('end', complete);
  res.on('error', fail);
  // Closed before its end without an error (older behaviours): the answer was cut off.
  res.on('close', () => {
    if (!done && !res.complete) fail(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
  });
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

/** The system's code (ECONNREFUSED, ECONNRESET, …) when there is one. */
function describe(err: unknown): string {
  const e = err as NodeJS.ErrnoException | null;
  return e?.code ?? e?.message ?? String(err);
}
