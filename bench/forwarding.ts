import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import Database from '../src/sqlite/sqlite-driver';
import { openStore } from '../src/sqlite/store';
import { FLOW } from '../rigs/deliveries';
import { cpuMicros, percentile, pinToCpus, until } from '../rigs/harness';
import {
  DestinationChild,
  type DestinationReport,
  type LatencySamples,
  newForwardSecret,
} from './destination';
import type { ForwardingHarness } from './protocol';

/**
 * Forwarding figures (issue 11), run by run.ts:
 *
 * - throughput: a backlog of stored `event.received` / `proposal.changed` messages for one
 *   destination, written by the real receiver's pipeline, then sent by the real receiver (`serve`)
 *   to a local node:http destination that answers 200 at once; messages/s from the first receipt
 *   to the last (target ≥ 2 000);
 * - latency: signed deliveries sent open-loop at a fixed rate (200/s) to the real receiver, which
 *   forwards them; for each one, the time from its 200 to the destination's receipt of its
 *   `event.received` (targets p50 ≤ 20 ms, p99 ≤ 200 ms). The sender and the destination run in
 *   one child process, so one monotonic clock (`performance.now()`) measures both ends;
 *
 * The destination and the latency figure's sender run in a child of their own (destination.ts).
 */

// ---------------------------------------------------------------------------------------------
// What run.ts lends this module

// ---------------------------------------------------------------------------------------------
// Throughput: a stored backlog sent by the real receiver

export interface ForwardThroughputResult {
  /** Pending deliveries for the destination when sending began. */
  messages: number;
  events: number;
  proposals: number;
  /** Writing the pending events; the receiver's pipeline turning them into the outbox (first to last message stored). */
  fillSeconds: number;
  outboxSeconds: number;
  /** First to last receipt at the destination. */
  sendSeconds: number;
  messagesPerSecond: number;
  /** Receiver CPU per message received after it was ready (µs; null off Linux). */
  cpuUsPerMessage: number | null;
  /**
   * The same over the second half of the backlog only: a process past its JIT warm-up (V8's
   * compiler threads took ~10 % of the whole figure in `perf`), as a long-running receiver is.
   * Reported beside the whole figure, which the target is checked against.
   */
  warmCpuUsPerMessage: number | null;
  /** The receiver ran on core 0 and the destination on the others (taskset). */
  pinned: boolean;
  destination: Omit<DestinationReport, 'arrivals'>;
  /** Per (order key), arrivals out of message-id order: must be 0. */
  orderViolations: number;
  /** The receiver's records afterwards. */
  delivered: number;
  pending: number;
  dead: number;
  attempts: number;
}

/**
 * Stores `events` pending events as the webhook route would: proposals interleaved (event i
 * belongs to proposal i mod P and is its ⌊i / P⌋-th step), as deliveries of many proposals in
 * flight arrive. Returns the number of proposals.
 */
function writePendingEvents(path: string, events: number): number {
  const proposals = Math.ceil(events / FLOW.length);
  const store = openStore(path, { migrate: true, synchronous: 'NORMAL' });
  try {
    const insert = store.db.prepare(
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes, status)
       VALUES (?, ?, 'event', ?, ?, 1, ?, ?, ?, 'pending')`,
    );
    store.db.transaction(() => {
      for (let i = 0; i < events; i++) {
        const nu = 2_000_000 + (i % proposals);
        const evento = FLOW[Math.floor(i / proposals)] as string;
        const id = `wh_fwd_${i}`;
        const body = JSON.stringify({
          evento,
          timestamp: '2026-11-21T10:00:00-03:00',
          dados: {
            nu_proposta: nu,
            nu_cpf: '52998224725',
            st_proposta: 'x',
            vl_emprestimo: 15000.5,
            no_conveniada: 'Empresa Exemplo Ltda',
          },
          metadata: { tentativa: 1, webhook_id: id },
        });
        insert.run(id, id, evento, nu, new Date().toISOString(), body, body.length);
      }
    })();
  } finally {
    store.close();
  }
  return proposals;
}

function count(path: string, sql: string): number {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  try {
    return (db.prepare(sql).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/**
 * Builds the backlog with the real receiver: pending events stored, then `serve` with the
 * destination paused (DESTINATIONS_FILE) until its pipeline has processed them all, so the outbox
 * holds exactly what production would have written. Returns the pending deliveries.
 */
async function buildBacklog(
  h: ForwardingHarness,
  dbPath: string,
  events: number,
): Promise<{ messages: number; proposals: number; fillSeconds: number; outboxSeconds: number }> {
  const t = performance.now();
  const proposals = writePendingEvents(dbPath, events);
  const fillSeconds = (performance.now() - t) / 1000;
  const file = join(h.dir, 'forward-paused.json');
  const destination = {
    name: 'default',
    url: 'http://127.0.0.1:9/',
    secret: newForwardSecret(),
    paused: true,
  };
  writeFileSync(file, JSON.stringify({ destinations: [destination] }));
  const receiver = await h.startReceiver('forward-backlog', { DESTINATIONS_FILE: file }, dbPath);
  try {
    const sql = "SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')";
    await until(
      'forwarding backlog',
      () => count(dbPath, sql) === 0,
      120_000,
      () => receiver.alive(),
    );
  } finally {
    await receiver.stop();
  }
  // First to last message stored: the pipeline's pace with the outbox handler, startup excluded.
  const outboxSeconds =
    count(
      dbPath,
      'SELECT (julianday(max(created_at)) - julianday(min(created_at))) * 86400000 AS n FROM forward_messages',
    ) / 1000;
  const messages = count(
    dbPath,
    "SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'default' AND status = 'pending'",
  );
  return { messages, proposals, fillSeconds, outboxSeconds };
}

/** Arrivals out of order: for each order key, message ids must arrive increasing. */
function orderViolations(dbPath: string, arrivals: readonly string[]): number {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare('SELECT id, webhook_id, order_key FROM forward_messages').all() as {
      id: number;
      webhook_id: string;
      order_key: string;
    }[];
    const byId = new Map(rows.map((r) => [r.webhook_id, r]));
    const lastId = new Map<string, number>();
    let violations = 0;
    for (const webhookId of arrivals) {
      const row = byId.get(webhookId);
      if (row === undefined) continue;
      const before = lastId.get(row.order_key);
      if (before !== undefined && before > row.id) violations += 1;
      lastId.set(row.order_key, Math.max(before ?? 0, row.id));
    }
    return violations;
  } finally {
    db.close();
  }
}

/** A stored backlog, built once and copied for each receiver that sends it (see {@link prepareForwardBacklog}). */
export interface ForwardBacklog {
  /** The database holding the backlog; never opened by a sender (each sends a copy). */
  template: string;
  messages: number;
  events: number;
  proposals: number;
  fillSeconds: number;
  outboxSeconds: number;
}

export async function prepareForwardBacklog(h: ForwardingHarness, messages: number): Promise<ForwardBacklog> {
  const template = join(h.dir, 'forward-backlog.db');
  const events = Math.ceil(messages / 2); // each event: event.received + proposal.changed
  const backlog = await buildBacklog(h, template, events);
  // One file: the WAL folded in, so a byte copy is the whole database.
  const db = new Database(template, { fileMustExist: true });
  try {
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
  return { template, events, ...backlog };
}

/**
 * Sends a copy of the backlog with `serve` of this build, or of another build's (`bin`, the
 * `--baseline`), to a fresh destination; the receiver's CPU from ready to the last message.
 */
/** Core 0 for the receiver, the others for the destination; null on one core or without taskset. */
function pinnedLayout(): { receiver: string; destination: string } | null {
  const n = availableParallelism();
  if (n < 2) return null;
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
  } catch {
    return null;
  }
  return { receiver: '0', destination: n === 2 ? '1' : `1-${n - 1}` };
}

/**
 * Waits (polling the destination every 20 ms) until it has received `count` messages; how many it
 * had then, or null when the backlog went by before the first look.
 */
async function halfway(destination: DestinationChild, count: number): Promise<number | null> {
  for (let first = true; ; first = false) {
    const { received } = await destination.report();
    if (received >= count) return first ? null : received;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export async function runForwardingThroughput(
  h: ForwardingHarness,
  backlog: ForwardBacklog,
  run: { name: string; bin?: string },
): Promise<ForwardThroughputResult> {
  const dbPath = join(h.dir, `forward-throughput-${run.name}.db`);
  copyFileSync(backlog.template, dbPath);
  const destination = await DestinationChild.start(h, {
    verifyEvery: 100,
    keepArrivals: true,
    trackEventReceived: false,
  });
  let report: DestinationReport;
  let cpuUsPerMessage: number | null = null;
  let warmCpuUsPerMessage: number | null = null;
  const layout = pinnedLayout();
  try {
    const receiver = await h.startReceiver(
      `forward-throughput-${run.name}`,
      { FORWARD_URL: destination.url, FORWARD_SECRET: destination.secret },
      dbPath,
      run.bin,
    );
    try {
      // The receiver (both its threads) on core 0, the destination on the other cores, so that the
      // two never take turns on one core in the middle of a request (the figure depended on who got
      // the CPU). Rounds still vary (171–238 µs in one run here): run several (--forward-rounds).
      if (layout !== null) {
        pinToCpus([receiver.pid], layout.receiver);
        pinToCpus([destination.pid], layout.destination);
      }
      const cpuReady = cpuMicros(receiver.pid);
      const atReady = (await destination.report()).received;
      // Anything slower than 100 messages/s is a failure, not a figure.
      const half = await halfway(destination, atReady + Math.floor(backlog.messages / 2));
      const cpuHalf = cpuMicros(receiver.pid);
      report = await destination.awaitUnique(backlog.messages, Math.max(30_000, backlog.messages * 10));
      const cpuDone = cpuMicros(receiver.pid);
      if (cpuReady !== null && cpuDone !== null && report.received > atReady)
        cpuUsPerMessage = (cpuDone - cpuReady) / (report.received - atReady);
      if (half !== null && cpuHalf !== null && cpuDone !== null && report.received > half)
        warmCpuUsPerMessage = (cpuDone - cpuHalf) / (report.received - half);
      // The last answers' records commit a moment after the destination saw them.
      const sql = "SELECT count(*) AS n FROM forward_deliveries WHERE status = 'pending'";
      await until(
        'forwarding records',
        () => count(dbPath, sql) === 0,
        5_000,
        () => receiver.alive(),
      ).catch(() => undefined);
    } finally {
      await receiver.stop();
    }
  } finally {
    await destination.stop();
  }
  const sendSeconds =
    report.firstAtMs === null || report.lastAtMs === null ? 0 : (report.lastAtMs - report.firstAtMs) / 1000;
  const { arrivals, ...destinationReport } = report;
  const status = (s: string) =>
    count(
      dbPath,
      `SELECT count(*) AS n FROM forward_deliveries WHERE destination = 'default' AND status = '${s}'`,
    );
  return {
    messages: backlog.messages,
    events: backlog.events,
    proposals: backlog.proposals,
    fillSeconds: backlog.fillSeconds,
    outboxSeconds: backlog.outboxSeconds,
    sendSeconds,
    messagesPerSecond: sendSeconds > 0 ? report.unique / sendSeconds : 0,
    cpuUsPerMessage,
    warmCpuUsPerMessage,
    pinned: layout !== null,
    destination: destinationReport,
    orderViolations: orderViolations(dbPath, arrivals),
    delivered: status('delivered'),
    pending: status('pending'),
    dead: status('dead'),
    attempts: count(dbPath, 'SELECT count(*) AS n FROM forward_attempts'),
  };
}

// ---------------------------------------------------------------------------------------------
// Latency: 200 → destination receipt, at a fixed delivery rate

export interface ForwardLatencyResult {
  rate: number;
  durationMs: number;
  /** Measured deliveries sent, answered 200, and whose event.received reached the destination. */
  sent: number;
  ok200: number;
  arrived: number;
  non200: number;
  socketErrors: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  minMs: number;
  /** The webhook's own answer time (send → 200), for context. */
  answerP50Ms: number;
  answerP99Ms: number;
  maxLagMs: number;
  /** Receiver CPU per delivery sent (ingest, pipeline, outbox, and sending its 2 messages), µs. */
  cpuUsPerDelivery: number | null;
  destination: Omit<DestinationReport, 'arrivals'>;
  /** Messages the run's 200s cause (2 each), and the receiver's records afterwards: delivered / all. */
  messagesExpected: number;
  delivered: number;
  deliveries: number;
}

export async function runForwardingLatency(
  h: ForwardingHarness,
  spec: { rate: number; warmupMs: number; durationMs: number },
): Promise<ForwardLatencyResult> {
  const destination = await DestinationChild.start(h, {
    verifyEvery: 1,
    keepArrivals: false,
    trackEventReceived: true,
  });
  let samples: LatencySamples;
  let dbPath: string;
  let cpuUsPerDelivery: number | null = null;
  try {
    const receiver = await h.startReceiver('forward-latency', {
      FORWARD_URL: destination.url,
      FORWARD_SECRET: destination.secret,
    });
    dbPath = receiver.dbPath;
    try {
      const cpuBefore = cpuMicros(receiver.pid);
      samples = await destination.latency({
        ...spec,
        port: receiver.port,
        webhookSecret: h.webhookSecret,
        runId: randomBytes(3).toString('hex'),
        settleMs: 15_000,
      });
      if (!receiver.alive()) throw new Error('forwarding latency: the receiver died during the run');
      const cpuAfter = cpuMicros(receiver.pid);
      const all = Math.round((spec.rate * (spec.warmupMs + spec.durationMs)) / 1000);
      if (cpuBefore !== null && cpuAfter !== null) cpuUsPerDelivery = (cpuAfter - cpuBefore) / all;
    } finally {
      await receiver.stop();
    }
  } finally {
    await destination.stop();
  }
  const latency = Float64Array.from(samples.latencyMs).sort();
  const answer = Float64Array.from(samples.answerMs).sort();
  const { arrivals: _arrivals, ...destinationReport } = samples.destination;
  return {
    rate: spec.rate,
    durationMs: spec.durationMs,
    sent: samples.sent,
    ok200: samples.ok200,
    arrived: latency.length,
    non200: Object.values(samples.non200).reduce((a, b) => a + b, 0),
    socketErrors: samples.socketErrors,
    p50Ms: percentile(latency, 0.5),
    p99Ms: percentile(latency, 0.99),
    maxMs: latency.length > 0 ? (latency[latency.length - 1] as number) : Number.NaN,
    minMs: latency.length > 0 ? (latency[0] as number) : Number.NaN,
    answerP50Ms: percentile(answer, 0.5),
    answerP99Ms: percentile(answer, 0.99),
    maxLagMs: samples.maxLagMs,
    cpuUsPerDelivery,
    destination: destinationReport,
    messagesExpected: samples.messagesExpected,
    delivered: count(dbPath, "SELECT count(*) AS n FROM forward_deliveries WHERE status = 'delivered'"),
    deliveries: count(dbPath, 'SELECT count(*) AS n FROM forward_deliveries'),
  };
}
