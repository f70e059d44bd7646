import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A real HTTP fake of the consignado service on 127.0.0.1, for client tests without a mocked fetch.
 * Every request is recorded (method, path, query, headers, body); each route answers with a
 * behaviour programmed by the test, in sequence: the n-th request to a route gets the n-th
 * behaviour, and the last one repeats. Unrouted requests get 404.
 */

export interface RecordedRequest {
  method: string;
  /** Path without the query string, as received (still percent-encoded). */
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  body: string;
  /** The body parsed as JSON, or undefined. */
  json: unknown;
  /** Values of the `:name` segments of the route that matched. */
  params: Record<string, string>;
}

export interface Reply {
  status?: number;
  headers?: Record<string, string>;
  /** Sent as JSON; wins over `body`. */
  json?: unknown;
  body?: string;
  /** Wait this long before answering. */
  delayMs?: number;
}

/** `hang`: never answer (for timeouts). `reset`: destroy the connection without an answer. */
export type Outcome = Reply | 'hang' | 'reset';
export type Behaviour = Outcome | ((req: RecordedRequest, n: number) => Outcome | Promise<Outcome>);

export interface FakeService {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Programs `METHOD /path/:param`: the n-th request gets `behaviours[n]`, the last one repeats. */
  on(method: string, pattern: string, ...behaviours: Behaviour[]): void;
  /** Requests with this method (or any, with '*') whose path starts with `prefix`. */
  requestsTo(method: string, prefix: string): RecordedRequest[];
  close(): Promise<void>;
}

interface Route {
  method: string;
  segments: string[];
  behaviours: Behaviour[];
  count: number;
}

function match(route: Route, method: string, path: string): Record<string, string> | null {
  if (route.method !== method) return null;
  const parts = path.split('/');
  if (parts.length !== route.segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < parts.length; i++) {
    const want = route.segments[i] ?? '';
    const got = parts[i] ?? '';
    if (want.startsWith(':')) params[want.slice(1)] = decodeURIComponent(got);
    else if (want !== got) return null;
  }
  return params;
}

function send(res: ServerResponse, reply: Reply): void {
  const headers: Record<string, string> = { ...reply.headers };
  let payload = reply.body ?? '';
  if (reply.json !== undefined) {
    payload = JSON.stringify(reply.json);
    headers['content-type'] ??= 'application/json';
  }
  res.writeHead(reply.status ?? 200, headers);
  res.end(payload);
}

export async function startFakeService(): Promise<FakeService> {
  const routes: Route[] = [];
  const requests: RecordedRequest[] = [];

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const target = new URL(req.url ?? '/', 'http://fake');
        const body = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(body) as unknown;
        } catch {
          json = undefined;
        }
        const method = req.method ?? 'GET';
        const recorded: RecordedRequest = {
          method,
          path: target.pathname,
          query: target.searchParams,
          headers: req.headers,
          body,
          json,
          params: {},
        };
        requests.push(recorded);

        let outcome: Outcome = { status: 404, json: { error: 'NOT_FOUND', message: 'no such route' } };
        for (const route of routes) {
          const params = match(route, method, target.pathname);
          if (params === null) continue;
          recorded.params = params;
          const n = route.count++;
          const behaviour = route.behaviours[Math.min(n, route.behaviours.length - 1)] ?? {};
          outcome = typeof behaviour === 'function' ? await behaviour(recorded, n) : behaviour;
          break;
        }
        if (outcome === 'hang') return;
        if (outcome === 'reset') {
          req.socket.destroy();
          return;
        }
        const reply = outcome;
        if (reply.delayMs !== undefined) await new Promise((r) => setTimeout(r, reply.delayMs));
        if (!res.destroyed) send(res, reply);
      })();
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    on(method, pattern, ...behaviours) {
      if (behaviours.length === 0) throw new Error('on(): at least one behaviour');
      routes.push({ method: method.toUpperCase(), segments: pattern.split('/'), behaviours, count: 0 });
    },
    requestsTo(method, prefix) {
      return requests.filter((r) => (method === '*' || r.method === method) && r.path.startsWith(prefix));
    },
    close() {
      // Hanging requests and keep-alive sockets would hold close() open.
      server.closeAllConnections();
      return new Promise((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}
