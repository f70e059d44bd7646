import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/**
 * A lender's endpoint for forwarding tests: a real HTTP server on loopback that records every
 * request (headers, raw body, arrival time) and answers as the test programs it, request by
 * request — a status, a delay, a `Retry-After`, a socket closed without an answer — and that can
 * go down (stop listening, drop its connections) and come back up on the same port.
 */

/** One request as it arrived. */
export interface Received {
  /** Arrival order at this destination, from 0. */
  seq: number;
  /** `Date.now()` once the whole body had arrived. */
  at: number;
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The body exactly as received. */
  raw: Buffer;
  /** `webhook-id` ('' when absent). */
  webhookId: string;
  /** What the destination did: the status it wrote, `closed` (socket destroyed), or null until then. */
  answer: number | 'closed' | null;
  /** `Date.now()` when the answer was written (or the socket closed). */
  answeredAt: number | null;
  /** The client had gone (aborted: its timeout) before the answer could be written. */
  clientGone: boolean;
}

/** How to answer one request. */
export interface Behaviour {
  /** @default 200 */
  status?: number;
  /** Wait this long before answering (or closing). @default 0 */
  delayMs?: number;
  /** A `Retry-After` header value. */
  retryAfter?: string;
  /** The answer's body. @default 'ok' or 'error' by status */
  body?: string;
  /** Destroy the socket instead of answering. */
  close?: boolean;
}

/** Decides the answer to a request; `undefined` is a plain 200. */
export type Responder = (request: Received, destination: FakeDestination) => Behaviour | undefined;

export class FakeDestination {
  readonly requests: Received[] = [];
  /** Replaceable at any time; applies to requests arriving from then on. */
  respond: Responder;
  private server: Server;
  private readonly timers = new Set<NodeJS.Timeout>();
  private listening = false;

  private constructor(
    readonly port: number,
    server: Server,
    respond: Responder,
  ) {
    this.server = server;
    this.respond = respond;
    this.listening = true;
  }

  /** Starts listening on a free loopback port (or `port`). */
  static async start(respond: Responder = () => undefined, port = 0): Promise<FakeDestination> {
    let destination: FakeDestination | null = null;
    const server = createServer((req, res) => destination?.handle(req, res));
    await listen(server, port);
    destination = new FakeDestination((server.address() as AddressInfo).port, server, respond);
    return destination;
  }

  /** Where the receiver should send (any path is accepted). */
  get url(): string {
    return `http://127.0.0.1:${this.port}/hooks`;
  }

  /** Stops listening and drops every open connection: the port refuses connections until `up`. */
  async down(): Promise<void> {
    if (!this.listening) return;
    this.listening = false;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
  }

  /** Listens again on the same port. */
  async up(): Promise<void> {
    if (this.listening) return;
    this.server = createServer((req, res) => this.handle(req, res));
    await listen(this.server, this.port);
    this.listening = true;
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    await this.down();
  }

  /** Requests the destination answered with a 2xx (written to a client still there). */
  accepted(): Received[] {
    return this.requests.filter((r) => isSuccess(r.answer) && !r.clientGone);
  }

  /** Every request of each `webhook-id`, in arrival order. */
  byWebhookId(): Map<string, Received[]> {
    const map = new Map<string, Received[]>();
    for (const r of this.requests) map.set(r.webhookId, [...(map.get(r.webhookId) ?? []), r]);
    return map;
  }

  /** Whether the request carries a Standard Webhooks signature valid under `secret` (the reference library). */
  static verifies(request: Received, secret: string | Uint8Array): boolean {
    try {
      new Webhook(secret, typeof secret === 'string' ? undefined : { format: 'raw' }).verify(
        request.raw.toString('utf8'),
        flatHeaders(request.headers),
      );
      return true;
    } catch {
      return false;
    }
  }

  private handle(req: import('node:http').IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const received: Received = {
        seq: this.requests.length,
        at: Date.now(),
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        raw: Buffer.concat(chunks),
        webhookId: String(req.headers['webhook-id'] ?? ''),
        answer: null,
        answeredAt: null,
        clientGone: false,
      };
      this.requests.push(received);
      res.on('close', () => {
        if (!res.writableFinished) received.clientGone = true;
      });
      let behaviour: Behaviour;
      try {
        behaviour = this.respond(received, this) ?? {};
      } catch (err) {
        behaviour = { status: 599, body: String(err) };
      }
      this.later(behaviour.delayMs ?? 0, () => this.answer(received, res, behaviour));
    });
  }

  private later(ms: number, fn: () => void): void {
    if (ms <= 0) return fn();
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    this.timers.add(timer);
  }

  private answer(received: Received, res: ServerResponse, behaviour: Behaviour): void {
    received.answeredAt = Date.now();
    if (behaviour.close) {
      received.answer = 'closed';
      res.socket?.destroy();
      return;
    }
    const status = behaviour.status ?? 200;
    received.answer = status;
    if (res.destroyed) {
      received.clientGone = true;
      return;
    }
    const headers: Record<string, string> = { 'content-type': 'text/plain' };
    if (behaviour.retryAfter !== undefined) headers['retry-after'] = behaviour.retryAfter;
    res.writeHead(status, headers);
    res.end(behaviour.body ?? (isSuccess(status) ? 'ok' : 'error'));
  }
}

function isSuccess(answer: number | 'closed' | null): boolean {
  return typeof answer === 'number' && answer >= 200 && answer <= 299;
}

function listen(server: Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function flatHeaders(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers)) {
    if (value !== undefined) out[key] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** The body of a request as JSON (forwarded bodies always are). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- forwarded JSON is read loosely in tests
export function bodyOf(request: Received): any {
  return JSON.parse(request.raw.toString('utf8'));
}

/** A message as stored in `forward_messages`, the columns the order checks need. */
export interface StoredMessage {
  id: number;
  webhook_id: string;
  nu_proposta: number | null;
}

/**
 * Where per-proposal order was broken at this destination (contract §8), as readable lines; empty
 * when kept. For each proposal, in `forward_messages` order, every message must have been answered
 * with a 2xx at least once, and must first have arrived after the previous message's first 2xx —
 * hence the first receipts are in message order too. Holds across crashes: a message is sent only
 * once the one before it was recorded delivered, which needs a 2xx the destination wrote.
 */
export function orderViolations(d: FakeDestination, messages: readonly StoredMessage[]): string[] {
  const requests = d.byWebhookId();
  const lines = new Map<number, StoredMessage[]>();
  for (const m of messages) {
    if (m.nu_proposta !== null) lines.set(m.nu_proposta, [...(lines.get(m.nu_proposta) ?? []), m]);
  }
  const violations: string[] = [];
  for (const [nu, list] of lines) {
    let previousAccepted = -1;
    for (const m of list) {
      const received = requests.get(m.webhook_id) ?? [];
      const first = received[0]?.seq;
      const accepted = received.find((r) => isSuccess(r.answer) && !r.clientGone)?.seq;
      if (first === undefined || accepted === undefined) {
        violations.push(`proposal ${nu}: message ${m.id} never answered with a 2xx`);
        break;
      }
      if (first <= previousAccepted) {
        violations.push(`proposal ${nu}: message ${m.id} arrived (#${first}) before the previous one's 2xx`);
      }
      previousAccepted = accepted;
    }
  }
  return violations;
}
