import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { FLOW, interleavedDelivery, sendOpenLoop } from '../rigs/deliveries';
import type { ForwardingHarness } from './protocol';

/**
 * The forwarding destination (forwarding.ts, starved.ts, the ingest row of run.ts): this file run as
 * a child (`fork(destination.js)`), so it has a core of its own and none of the directing process's
 * work in its event loop; a node:http server answering 200 at once, counting and verifying (with
 * the standardwebhooks library) what arrives; and the latency figure's open-loop sender, so that
 * one monotonic clock measures both ends. DestinationChild is the parent's side.
 */

// ---------------------------------------------------------------------------------------------
// Parent ↔ destination child

export interface DestinationOptions {
  /** Verifies one message in `verifyEvery` with the `standardwebhooks` library (0: none). */
  verifyEvery: number;
  /** Keep every `webhook-id` in arrival order (for the order check). */
  keepArrivals: boolean;
  /** Parse each body and note when each `event.received` of a delivery arrived (latency). */
  trackEventReceived: boolean;
}

export interface DestinationReport {
  /** Requests answered. */
  received: number;
  /** Distinct `webhook-id`s among them. */
  unique: number;
  /** Requests without the Standard Webhooks headers. */
  missingHeaders: number;
  /** Signatures checked with the `standardwebhooks` library, and how many of them failed. */
  verified: number;
  badSignatures: number;
  errorSamples: string[];
  /** `performance.now()` of the first and last receipt (ms); null before any. */
  firstAtMs: number | null;
  lastAtMs: number | null;
  /** Body `type` → count (latency mode only). */
  types: Record<string, number>;
  /** Every `webhook-id` in arrival order, when kept. */
  arrivals: string[];
}

/** The open-loop sender of the latency figure, run inside the destination child. */
export interface LatencySpec {
  port: number;
  webhookSecret: string;
  /** Deliveries per second. */
  rate: number;
  warmupMs: number;
  durationMs: number;
  /** Makes webhook ids and proposal numbers unique to this run. */
  runId: string;
  /** How long to wait for the last `event.received` after the last 200. */
  settleMs: number;
}

export interface LatencySamples {
  /** Measured deliveries (after the warm-up): sent / answered 200 / their event.received arrived. */
  sent: number;
  ok200: number;
  non200: Record<string, number>;
  socketErrors: number;
  /** 200 → receipt of the delivery's `event.received`, ms, ascending. */
  latencyMs: number[];
  /** Send → 200, ms, ascending (the webhook's own answer time, for context). */
  answerMs: number[];
  /** How late the open-loop schedule sent its worst request (ms): the sender kept its rate if small. */
  maxLagMs: number;
  /** Messages the 200s of the whole run (warm-up included) cause. */
  messagesExpected: number;
  destination: DestinationReport;
}

export type ChildCommand =
  | { type: 'start'; secret: string; options: DestinationOptions }
  | { type: 'report'; arrivals: boolean }
  | { type: 'await'; unique: number; timeoutMs: number }
  | { type: 'latency'; spec: LatencySpec };

export type ChildMessage =
  | { type: 'listening'; port: number }
  | { type: 'report'; report: DestinationReport }
  | { type: 'latency'; samples: LatencySamples }
  | { type: 'error'; message: string };

/** `whsec_` + 24 random bytes: the Standard Webhooks secret form, so the library verifies as is. */
export function newForwardSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** The destination child as the parent sees it. */
export class DestinationChild {
  private constructor(
    private readonly child: ChildProcess,
    private readonly stopChild: (child: ChildProcess) => Promise<void>,
    /** `FORWARD_URL` for the receiver. */
    readonly url: string,
    /** `FORWARD_SECRET` for the receiver. */
    readonly secret: string,
  ) {}

  /** Its process id, to pin it (taskset). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  static async start(
    h: Pick<ForwardingHarness, 'track' | 'stopChild'>,
    options: DestinationOptions,
  ): Promise<DestinationChild> {
    const child = h.track(
      fork(join(__dirname, 'destination.js'), ['destination'], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
    const secret = newForwardSecret();
    try {
      const m = await ask(child, { type: 'start', secret, options }, 'listening', 10_000);
      return new DestinationChild(child, h.stopChild, `http://127.0.0.1:${m.port}/hooks`, secret);
    } catch (err) {
      await h.stopChild(child);
      throw err;
    }
  }

  /** What arrived so far. */
  async report(arrivals = false): Promise<DestinationReport> {
    return (await ask(this.child, { type: 'report', arrivals }, 'report', 30_000)).report;
  }

  /** Waits until `unique` distinct messages arrived (or `timeoutMs` passed), then reports (with arrivals). */
  async awaitUnique(unique: number, timeoutMs: number): Promise<DestinationReport> {
    const m = await ask(this.child, { type: 'await', unique, timeoutMs }, 'report', timeoutMs + 30_000);
    return m.report;
  }

  /** Runs the open-loop sender against the receiver on `spec.port`. */
  async latency(spec: LatencySpec): Promise<LatencySamples> {
    const limit = spec.warmupMs + spec.durationMs + spec.settleMs + 60_000;
    return (await ask(this.child, { type: 'latency', spec }, 'latency', limit)).samples;
  }

  stop(): Promise<void> {
    return this.stopChild(this.child);
  }
}

/** Sends one command and waits for the answer of type `want` (the child answers one at a time). */
function ask<T extends ChildMessage['type']>(
  child: ChildProcess,
  command: ChildCommand,
  want: T,
  timeoutMs: number,
): Promise<Extract<ChildMessage, { type: T }>> {
  return new Promise((done, fail) => {
    const finish = (err: Error | null, m?: Extract<ChildMessage, { type: T }>) => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (err !== null) fail(err);
      else done(m as Extract<ChildMessage, { type: T }>);
    };
    const onMessage = (m: ChildMessage) => {
      if (m.type === want) finish(null, m as Extract<ChildMessage, { type: T }>);
      else if (m.type === 'error') finish(new Error(`forwarding destination: ${m.message}`));
    };
    const onExit = (code: number | null) =>
      finish(new Error(`forwarding destination exited (${code}) before answering ${command.type}`));
    const timer = setTimeout(
      () => finish(new Error(`forwarding destination: no answer to ${command.type} in ${timeoutMs} ms`)),
      timeoutMs,
    );
    child.on('message', onMessage);
    child.once('exit', onExit);
    child.send(command);
  });
}

// ---------------------------------------------------------------------------------------------
// The child: destination server, and the latency figure's sender

class Destination {
  readonly report: DestinationReport = {
    received: 0,
    unique: 0,
    missingHeaders: 0,
    verified: 0,
    badSignatures: 0,
    errorSamples: [],
    firstAtMs: null,
    lastAtMs: null,
    types: {},
    arrivals: [],
  };
  private readonly seen = new Set<string>();
  private readonly verifier: Webhook;
  /** Delivery `metadata.webhook_id` → when its `event.received` arrived (latency mode). */
  readonly eventReceivedAt = new Map<string, number>();
  private waiter: { unique: number; done: () => void } | null = null;

  constructor(
    secret: string,
    private readonly options: DestinationOptions,
  ) {
    this.verifier = new Webhook(secret);
  }

  /** Resolves when `unique` distinct messages arrived (at once if they did already). */
  waitUnique(unique: number): Promise<void> {
    if (this.report.unique >= unique) return Promise.resolve();
    return new Promise((done) => {
      this.waiter = { unique, done };
    });
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = performance.now();
      res.writeHead(200, { 'content-length': '0' }).end();
      this.received(req, Buffer.concat(chunks).toString('utf8'), at);
    });
  }

  private received(req: IncomingMessage, body: string, at: number): void {
    const r = this.report;
    r.received += 1;
    r.firstAtMs ??= at;
    r.lastAtMs = at;
    const id = req.headers['webhook-id'];
    if (typeof id !== 'string' || req.headers['webhook-signature'] === undefined) {
      r.missingHeaders += 1;
      return;
    }
    if (!this.seen.has(id)) {
      this.seen.add(id);
      r.unique += 1;
    }
    if (this.options.keepArrivals) r.arrivals.push(id);
    if (this.options.verifyEvery > 0 && r.received % this.options.verifyEvery === 0) this.verify(req, body);
    if (this.options.trackEventReceived) this.noteType(body, at);
    if (this.waiter !== null && r.unique >= this.waiter.unique) {
      this.waiter.done();
      this.waiter = null;
    }
  }

  private verify(req: IncomingMessage, body: string): void {
    try {
      this.verifier.verify(body, req.headers as Record<string, string>);
      this.report.verified += 1;
    } catch (err) {
      this.report.verified += 1;
      this.report.badSignatures += 1;
      if (this.report.errorSamples.length < 5) this.report.errorSamples.push((err as Error).message);
    }
  }

  private noteType(body: string, at: number): void {
    const message = JSON.parse(body) as {
      type: string;
      data: { payload?: { metadata?: { webhook_id?: string } } };
    };
    this.report.types[message.type] = (this.report.types[message.type] ?? 0) + 1;
    const deliveryId = message.data.payload?.metadata?.webhook_id;
    if (
      message.type === 'event.received' &&
      deliveryId !== undefined &&
      !this.eventReceivedAt.has(deliveryId)
    )
      this.eventReceivedAt.set(deliveryId, at);
  }
}

/** The latency figure's deliveries: 4 steps per proposal, 50 proposals at a time interleaved. */
const latencyDelivery = (spec: LatencySpec, i: number) =>
  interleavedDelivery(i, {
    flow: FLOW.slice(0, 4),
    atOnce: 50,
    nuBase: 3_000_000,
    idPrefix: `wh_lat_${spec.runId}_`,
    secret: spec.webhookSecret,
  });

async function runLatency(spec: LatencySpec, destination: Destination): Promise<LatencySamples> {
  const warm = Math.round((spec.rate * spec.warmupMs) / 1000);
  const total = warm + Math.round((spec.rate * spec.durationMs) / 1000);
  const items = Array.from({ length: total }, (_, i) => latencyDelivery(spec, i));
  const okAt = new Float64Array(total).fill(Number.NaN);
  const non200: Record<string, number> = {};
  let socketErrors = 0;
  const answerMs: number[] = [];
  let all200 = 0;
  const maxLagMs = await sendOpenLoop(
    { ports: [spec.port], rate: spec.rate },
    items,
    (i, status, sentAt, answeredAt) => {
      if (status === 200) all200 += 1;
      if (i < warm) return;
      if (status === 200) {
        okAt[i] = answeredAt;
        answerMs.push(answeredAt - sentAt);
      } else if (status === 0) socketErrors += 1;
      else non200[status] = (non200[status] ?? 0) + 1;
    },
  );
  // Wait (bounded) for the stragglers: every message of every 200, warm-up included (each delivery
  // of the flow causes event.received and proposal.changed), so the receiver's records can be
  // compared with what arrived.
  const deadline = performance.now() + spec.settleMs;
  const arrivedAll = () =>
    destination.report.unique >= 2 * all200 &&
    items.every((it, i) => Number.isNaN(okAt[i] as number) || destination.eventReceivedAt.has(it.id));
  while (!arrivedAll() && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const latencyMs: number[] = [];
  for (let i = warm; i < total; i++) {
    const at = destination.eventReceivedAt.get((items[i] as { id: string }).id);
    if (!Number.isNaN(okAt[i] as number) && at !== undefined) latencyMs.push(at - (okAt[i] as number));
  }
  return {
    sent: total - warm,
    ok200: answerMs.length,
    non200,
    socketErrors,
    latencyMs: latencyMs.sort((a, b) => a - b),
    answerMs: answerMs.sort((a, b) => a - b),
    maxLagMs,
    messagesExpected: 2 * all200,
    destination: { ...destination.report, arrivals: [] },
  };
}

function childMain(): void {
  let destination: Destination | null = null;
  const reply = (m: ChildMessage) => process.send?.(m);
  const fail = (err: unknown) =>
    reply({ type: 'error', message: err instanceof Error ? err.message : String(err) });
  process.on('message', (command: ChildCommand) => {
    if (command.type === 'start') {
      const d = new Destination(command.secret, command.options);
      destination = d;
      const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => d.handle(req, res));
      server.listen(0, '127.0.0.1', () =>
        reply({ type: 'listening', port: (server.address() as AddressInfo).port }),
      );
      return;
    }
    const d = destination;
    if (d === null) return fail(`${command.type} before start`);
    if (command.type === 'report') {
      reply({ type: 'report', report: { ...d.report, arrivals: command.arrivals ? d.report.arrivals : [] } });
    } else if (command.type === 'await') {
      const timer = new Promise<void>((r) => setTimeout(r, command.timeoutMs).unref());
      void Promise.race([d.waitUnique(command.unique), timer]).then(() =>
        reply({ type: 'report', report: d.report }),
      );
    } else {
      runLatency(command.spec, d).then((samples) => reply({ type: 'latency', samples }), fail);
    }
  });
  // The directing process went away: nothing left to do.
  process.on('disconnect', () => process.exit(0));
}

if (require.main === module && process.argv[2] === 'destination') childMain();
