import { connect, type Socket } from 'node:net';

/**
 * HTTP/1.1 over a raw TCP socket, for what fetch and node:http will not send: bodies that stop
 * half-way, header lines trickled one by one, repeated or oversized headers, exact bytes on the wire.
 */

export interface RawResponse {
  status: number;
  /** Lower-case names; repeated headers joined with ', '. */
  headers: Record<string, string>;
  body: Buffer;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  json: any;
}

export interface Closed {
  /** `server`: the peer sent FIN or RST; `client`: this side called close(). */
  by: 'server' | 'client';
  error: string | null;
}

export interface RawConnection {
  readonly socket: Socket;
  /** Writes bytes; false (never a throw) once the socket is gone. */
  write(data: string | Uint8Array): Promise<boolean>;
  /** The first complete response, or null if the connection closed before one arrived. */
  readonly response: Promise<RawResponse | null>;
  readonly closed: Promise<Closed>;
  isClosed(): boolean;
  /** Every byte received so far. */
  received(): Buffer;
  /** Closes from this side (RST: the server sees the client vanish). */
  close(): void;
}

/** Parses one response (Content-Length framed, or none: up to the close) from the start of `buf`. */
function parseResponse(buf: Buffer, ended: boolean): RawResponse | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end === -1) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1]);
  if (!Number.isInteger(status)) throw new Error(`not an HTTP response: ${JSON.stringify(lines[0])}`);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  const start = end + 4;
  let body: Buffer;
  if (headers['content-length'] !== undefined) {
    const length = Number(headers['content-length']);
    if (buf.length < start + length) return null;
    body = buf.subarray(start, start + length);
  } else if (ended) {
    body = buf.subarray(start);
  } else {
    return null;
  }
  let json: unknown = undefined;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    // not JSON
  }
  return { status, headers, body, json };
}

/** Opens a TCP connection to the host and port of `url`. */
export function openRaw(url: string): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port) });
  socket.setNoDelay(true);
  const chunks: Buffer[] = [];
  let closedBy: Closed | null = null;
  let error: string | null = null;
  let resolveResponse: (r: RawResponse | null) => void = () => undefined;
  const response = new Promise<RawResponse | null>((resolve) => (resolveResponse = resolve));
  const closed = new Promise<Closed>((resolve) => {
    socket.on('close', () => {
      closedBy ??= { by: 'server', error };
      resolve(closedBy);
    });
  });
  const tryParse = (ended: boolean) => {
    try {
      const r = parseResponse(Buffer.concat(chunks), ended);
      if (r) resolveResponse(r);
      else if (ended) resolveResponse(null);
    } catch {
      if (ended) resolveResponse(null);
    }
  };
  socket.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    tryParse(false);
  });
  socket.on('error', (err: NodeJS.ErrnoException) => {
    error = err.code ?? err.message;
  });
  socket.on('close', () => tryParse(true));

  const conn: RawConnection = {
    socket,
    response,
    closed,
    isClosed: () => socket.destroyed || closedBy !== null,
    received: () => Buffer.concat(chunks),
    write(data) {
      if (socket.destroyed || !socket.writable) return Promise.resolve(false);
      return new Promise((resolve) => {
        socket.write(data, (err) => resolve(!err));
      });
    },
    close() {
      closedBy ??= { by: 'client', error: null };
      socket.resetAndDestroy();
    },
  };
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(conn));
    socket.once('error', reject);
  });
}

export interface RequestSpec {
  method?: string;
  path: string;
  /** Sent in this order, exactly; nothing is added but `Host` (unless given). */
  headers?: readonly (readonly [string, string])[];
  body?: Uint8Array | string;
}

/** The bytes of a request head (and body if given). Content-Length is added only for a body with none set. */
export function requestBytes(url: string, spec: RequestSpec): Buffer {
  const headers = [...(spec.headers ?? [])];
  const has = (name: string) => headers.some(([n]) => n.toLowerCase() === name);
  if (!has('host')) headers.unshift(['Host', new URL(url).host]);
  const body = spec.body === undefined ? undefined : Buffer.from(spec.body);
  if (body && !has('content-length') && !has('transfer-encoding'))
    headers.push(['Content-Length', String(body.length)]);
  const head = `${spec.method ?? 'POST'} ${spec.path} HTTP/1.1\r\n${headers
    .map(([n, v]) => `${n}: ${v}\r\n`)
    .join('')}\r\n`;
  return body ? Buffer.concat([Buffer.from(head, 'latin1'), body]) : Buffer.from(head, 'latin1');
}

/** One request on a fresh connection; resolves with the response (null if the server closed first). */
export async function rawRequest(
  url: string,
  spec: RequestSpec,
  timeoutMs = 15_000,
): Promise<RawResponse | null> {
  const conn = await openRaw(url);
  const timer = setTimeout(() => conn.close(), timeoutMs);
  try {
    await conn.write(requestBytes(url, spec));
    return await conn.response;
  } finally {
    clearTimeout(timer);
    conn.close();
  }
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves with `what` if it settles within `ms`, else with `fallback`. */
export async function within<T, F>(what: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<F>((resolve) => (timer = setTimeout(resolve, ms, fallback)));
  try {
    return await Promise.race([what, limit]);
  } finally {
    clearTimeout(timer);
  }
}
