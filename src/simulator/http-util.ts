import type { IncomingMessage, ServerResponse } from 'node:http';

/** Small node:http helpers for the simulator: bounded body reading, lenient parsing, JSON replies. */

const MAX_BODY_BYTES = 1024 * 1024;

export interface Reply {
  status: number;
  json?: unknown;
  headers?: Record<string, string>;
  /** Runs once the answer is written (so that, e.g., `proposta.criada` never overtakes the 201). */
  after?: () => void;
}

export function reply(status: number, json?: unknown, headers?: Record<string, string>): Reply {
  return { status, json, ...(headers ? { headers } : {}) };
}

export function errorReply(
  status: number,
  error: string,
  message: string,
  extra: Record<string, unknown> = {},
): Reply {
  return reply(status, { error, message, ...extra });
}

export class BodyTooLarge extends Error {}

/** The whole body, or BodyTooLarge past `limit` bytes. */
export function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        reject(new BodyTooLarge(`body over ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!failed) resolve(Buffer.concat(chunks));
    });
    req.on('error', (err) => {
      if (!failed) reject(err);
      failed = true;
    });
  });
}

type Parsed = { ok: true; value: unknown } | { ok: false };

/** JSON, or form-urlencoded when the Content-Type says so; an empty body is `undefined`. */
export function parseBody(raw: Buffer, contentType: string | undefined): Parsed {
  const text = raw.toString('utf8');
  if (text.trim() === '') return { ok: true, value: undefined };
  if (contentType?.toLowerCase().includes('application/x-www-form-urlencoded')) {
    return { ok: true, value: Object.fromEntries(new URLSearchParams(text)) };
  }
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false };
  }
}

export function send(res: ServerResponse, r: Reply): void {
  const headers: Record<string, string> = { ...r.headers };
  let payload = '';
  if (r.json !== undefined) {
    payload = JSON.stringify(r.json);
    headers['content-type'] = 'application/json; charset=utf-8';
  }
  headers['content-length'] = String(Buffer.byteLength(payload));
  res.writeHead(r.status, headers);
  res.end(payload);
}

/** `/a/:id/b` against `/a/42/b` → `{ id: '42' }`, or null. */
export function matchPath(pattern: readonly string[], path: string): Record<string, string> | null {
  const parts = path.split('/');
  if (parts.length !== pattern.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i++) {
    const want = pattern[i] ?? '';
    const got = parts[i] ?? '';
    if (want.startsWith(':')) {
      if (got === '') return null;
      try {
        params[want.slice(1)] = decodeURIComponent(got);
      } catch {
        return null;
      }
    } else if (want !== got) return null;
  }
  return params;
}

/** A request as a route sees it (router.ts). */
export interface Context {
  req: IncomingMessage;
  params: Record<string, string>;
  query: URLSearchParams;
  /** The parsed body: JSON, or form fields; undefined when empty. */
  body: unknown;
}
