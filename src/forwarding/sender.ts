import { setMaxListeners } from 'node:events';
import type { Clock } from '../clock';
import { settlesWithin } from '../clock';
import { type BackgroundGate, gateCleared } from '../domain/answer-first';
import {
  CLOSED,
  type CircuitOptions,
  type CircuitState,
  circuitAfter,
  circuitProbing,
  DEFAULT_CIRCUIT,
  mayAttempt,
} from '../domain/forwarding/circuit';
import type { Destination } from '../domain/forwarding/destinations';
import { bodyFor } from '../domain/forwarding/messages';
import { fullBucket, takeToken, type TokenBucket } from '../domain/forwarding/rate-limit';
import {
  type AttemptOutcome,
  classifyAttempt,
  nextAttemptDelayMs,
  parseRetryAfter,
} from '../domain/forwarding/retry';
import type {
  AttemptRecord,
  CircuitWrite,
  DueDelivery,
  DueHead,
  SenderStore,
} from '../domain/forwarding/sender-store';
import type { Logger } from '../logger';
import type { OutgoingTrace, TraceAttributes, Traces } from '../domain/tracing';
import { isLockBusy } from '../domain/errors';
import { type AttemptAnswer, AttemptPools, sendAttempt } from './http-attempt';

/**
 * The forwarding sender (contract §8): moves the outbox's pending deliveries to their destinations.
 * Runs only where one process sends each destination: in SQLite mode the process holding the
 * processing lease, like the pipeline (on a worker thread, sender-thread.ts); in cluster mode the
 * replica holding the destination's PostgreSQL lock (runtime/cluster/forwarder.ts). The outbox is a
 * {@link SenderStore}: core/sender-queries.ts, on SQLite or on PostgreSQL.
 *
 * - Per destination, up to `concurrency` requests in flight, never two of one order key (proposal):
 *   a message waits until every earlier message of its proposal for that destination is delivered
 *   or dead. A message being retried holds back only its own proposal at its own destination.
 * - Each attempt's outcome, the delivery's next state and the circuit's changes are written in
 *   batches: one transaction once {@link FLUSH_BATCH} records wait, or {@link FLUSH_DELAY_MS} after
 *   the first of them. A delivery stays "in flight" here until that write committed,
 *   so it is never sent twice by this process; a crash before the write sends it again after the
 *   restart with the same `webhook-id` and the same bytes (at-least-once).
 * - Retries follow the destination's policy; a `Retry-After` on a 429 or 503 also holds the whole
 *   destination until then. The circuit breaker stops sending to a destination that keeps failing
 *   and lets one probe through now and then.
 * - Reads are asynchronous (PostgreSQL answers over the network): each destination has at most one
 *   pump (read the outbox, send what may go) at a time; a pump asked for while one runs runs again
 *   once it is done. What the pump read can be older than an answer recorded meanwhile, so a
 *   delivery recorded during a pump is never sent by that pump (see `Worker.settled`).
 */

export interface SenderMetrics {
  /** One attempt finished, by outcome, with its duration. */
  attempt(destination: string, outcome: AttemptOutcome, seconds: number): void;
  /** A message reached the destination, `seconds` after it was stored. */
  delivered(destination: string, seconds: number): void;
  /** A delivery went to the dead letter. */
  dead(destination: string): void;
  circuit(destination: string, state: CircuitState['state']): void;
  /** Tracing: spans the forwarding thread's exporter dropped. @default none */
  spansDropped?(reason: 'queue_full' | 'export_failed', spans: number): void;
}

export interface SenderOptions {
  clock: Clock;
  logger: Logger;
  metrics?: SenderMetrics;
  /** @default Math.random */
  random?: () => number;
  /**
   * Requests in flight per destination (of different proposals).
   * @default 16
   */
  concurrency?: number;
  /**
   * How often a destination is looked at without being nudged: due retries, replays and pauses
   * made by another process.
   * @default 1000
   */
  pollIntervalMs?: number;
  /** @default DEFAULT_CIRCUIT */
  circuit?: CircuitOptions;
  /**
   * Called when {@link ForwardSender.inFlight} may have changed (a send, a recorded batch), for a
   * host that mirrors the sender's state elsewhere (the worker thread reports it to the main one).
   * @default none
   */
  onChange?: () => void;
  /**
   * Writes a batch of attempt records and circuit changes in one transaction. The worker thread
   * passes one that has the main thread write them, so that one thread writes to the file.
   * @default the sender's store (`store.record`)
   */
  record?: Recorder;
  /**
   * Answers first (issue 23): each pump waits while a webhook answer is being made (in the same
   * process: on the main thread's AnswerFirst, or on the worker thread through its shared flag).
   * Waiting sends nothing and drops nothing: the deliveries stay pending in the outbox.
   * @default none (never waits)
   */
  gate?: BackgroundGate;
  /**
   * Tracing (issue 35): each attempt is a CLIENT span, a child of the processing that stored its
   * message, and its request carries that span's `traceparent`.
   * @default undefined (off)
   */
  traces?: Traces | undefined;
}

/** Writes attempt records and circuit changes (all or nothing); rejects with the database's error. */
export type Recorder = (records: AttemptRecord[], circuits: CircuitWrite[]) => Promise<void>;

interface Worker {
  destination: Destination;
  /** Delivery id → order key, from the send until its record committed. */
  inFlight: Map<number, string>;
  keys: Set<string>;
  circuit: CircuitState;
  bucket: TokenBucket | null;
  /** A Retry-After on a 429/503 holds the destination until then (ms since the epoch). */
  holdUntilMs: number;
  timer: NodeJS.Timeout | null;
  pumpQueued: boolean;
  /** The pump running now (one per destination at a time), or null. */
  pumping: Promise<void> | null;
  /** A pump was asked for while one ran: that one looks again before it ends. */
  pumpAgain: boolean;
  /**
   * Deliveries recorded while the running pump read the outbox. What it read of them may predate
   * the record (a retry still due, say), so it leaves them to the next pump, which reads after it.
   */
  settled: Set<number>;
}

/** What a destination may take now: wait, nothing until an answer comes back, or `slots` more. */
type Gate = { kind: 'wait'; ms: number } | { kind: 'busy' } | { kind: 'open'; slots: number; probe: boolean };

/** How long a write that found the file locked waits before it is tried again. */
const LOCKED_RETRY_MS = 20;
/** Paused flags are re-read at most this often (a pause by another process is seen within it). */
const PAUSE_REFRESH_MS = 250;
/** Attempt records written at once, at the latest… */
const FLUSH_BATCH = 32;
/** …this long after the first of them was queued. */
const FLUSH_DELAY_MS = 2;
/** Masked bodies kept (per message), so retries and other destinations do not mask again. */
const MASKED_BODIES = 1024;
/** How long stop() waits for the last batch of records to be written (a store that went away). */
const FINAL_WRITE_MS = 5000;

/** One signal for every request in flight (up to `concurrency` per destination listen to it). */
function newAbortController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

export class ForwardSender {
  private readonly workers = new Map<string, Worker>();
  private readonly records: { record: AttemptRecord; worker: Worker; deliveryId: number }[] = [];
  private readonly circuitWrites = new Map<string, CircuitWrite>();
  private readonly sending = new Set<Promise<void>>();
  private abort = newAbortController();
  private stopping = true;
  /** The next batch's write ({@link FLUSH_DELAY_MS}). */
  private batchTimer: NodeJS.Timeout | null = null;
  /** A failed write's retry: every record waiting goes with it. */
  private flushTimer: NodeJS.Timeout | null = null;
  private pools = new AttemptPools();
  private readonly maskedBodies = new Map<number, string>();
  private paused = new Set<string>();
  private pausedReadAt = -Infinity;
  /** The last read of the paused flags (shared by the destinations pumping at once). */
  private pausedRead: Promise<void> = Promise.resolve();
  private pausedPumps = 0;
  /** The circuits read back by start(): no pump sends before they are in. */
  private ready: Promise<void> = Promise.resolve();
  private readonly random: () => number;
  private readonly recorder: Recorder;
  /** The batch being written: one write at a time; records answered meanwhile wait for it. */
  private writing: Promise<void> | null = null;

  constructor(
    private readonly store: SenderStore,
    destinations: readonly Destination[],
    private readonly options: SenderOptions,
  ) {
    this.random = options.random ?? Math.random;
    // async: a write that throws rejects instead of throwing out of flush().
    this.recorder = options.record ?? (async (records, circuits) => store.record(records, circuits));
    for (const destination of destinations) {
      this.workers.set(destination.name, {
        destination,
        inFlight: new Map(),
        keys: new Set(),
        circuit: CLOSED,
        bucket: null,
        holdUntilMs: 0,
        timer: null,
        pumpQueued: false,
        pumping: null,
        pumpAgain: false,
        settled: new Set(),
      });
    }
  }

  /** Starts sending: the circuits are read back as they were left, every destination is looked at. */
  start(): void {
    if (this.workers.size === 0) return;
    this.stopping = false;
    this.abort = newAbortController();
    this.ready = this.loadCircuits();
    this.nudge();
  }

  /**
   * Looks at a destination that found it paused, and so sent nothing: what shows a test that a
   * pause was looked at, with no sleep.
   */
  get pausedLooks(): number {
    return this.pausedPumps;
  }

  /** Looks at every destination now (new messages were committed, or an operator replayed some). */
  nudge(): void {
    this.pausedReadAt = -Infinity;
    for (const worker of this.workers.values()) this.queuePump(worker);
  }

  /** Deliveries sent and not yet recorded. */
  get inFlight(): number {
    let n = 0;
    for (const worker of this.workers.values()) n += worker.inFlight.size;
    return n;
  }

  /** The circuit of each destination, for metrics and the admin API. */
  circuits(): Map<string, CircuitState> {
    return new Map([...this.workers].map(([name, w]) => [name, w.circuit]));
  }

  /**
   * Stops sending and waits (bounded) for the requests in flight; those still running then are
   * aborted and stay pending for the next holder. Whatever was answered is recorded.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    if (this.stopping) return true;
    this.stopping = true;
    const { clock } = this.options;
    const deadline = clock.monotonic() + timeoutMs;
    const pumps: Promise<void>[] = [];
    for (const worker of this.workers.values()) {
      if (worker.timer) clearTimeout(worker.timer);
      worker.timer = null;
      if (worker.pumping) pumps.push(worker.pumping);
    }
    // A pump reading the outbox sends nothing once it sees `stopping`; it only has to come back.
    await settlesWithin(Promise.all(pumps), timeoutMs);
    const finished = await settlesWithin(
      Promise.all([...this.sending]),
      Math.max(0, deadline - clock.monotonic()),
    );
    this.abort.abort();
    await settlesWithin(Promise.all([...this.sending]), 1000);
    if (this.flushTimer) clearTimeout(this.flushTimer);
    if (this.batchTimer) clearTimeout(this.batchTimer);
    this.flushTimer = null;
    this.batchTimer = null;
    // Bounded: a store that went away (PostgreSQL restarting) must not hold the shutdown. What is
    // not recorded stays pending and is sent again by the next holder, with the same webhook-id.
    await settlesWithin(this.writing ?? Promise.resolve(), FINAL_WRITE_MS);
    await settlesWithin(this.flush(), FINAL_WRITE_MS);
    for (const worker of this.workers.values()) {
      worker.inFlight.clear();
      worker.keys.clear();
      worker.settled.clear();
    }
    this.records.length = 0;
    this.pools.close();
    this.pools = new AttemptPools();
    return finished;
  }

  /** Reads the circuits back as they were left. Never rejects: unread, they start closed. */
  private async loadCircuits(): Promise<void> {
    const options = this.options.circuit ?? DEFAULT_CIRCUIT;
    const nowMs = this.options.clock.now().getTime();
    try {
      for (const row of await this.store.destinations()) {
        const worker = this.workers.get(row.name);
        if (!worker || row.circuit === null) continue;
        const state = JSON.parse(row.circuit) as CircuitState;
        // Half open as read back: the probe was sent by a holder that is gone, and its answer will
        // never come. Probe again now rather than wait out `probeTimeoutMs`.
        worker.circuit =
          state.state === 'half_open' ? { ...state, probeSince: nowMs - options.probeTimeoutMs } : state;
      }
    } catch (err) {
      this.options.logger.warn({ ...errorFields(err) }, 'forwarding: circuits not read; starting closed');
    }
    for (const [name, worker] of this.workers) this.options.metrics?.circuit(name, worker.circuit.state);
  }

  private queuePump(worker: Worker): void {
    if (this.stopping) return;
    if (worker.pumping !== null) {
      worker.pumpAgain = true;
      return;
    }
    if (worker.pumpQueued) return;
    worker.pumpQueued = true;
    setImmediate(() => {
      worker.pumpQueued = false;
      this.pump(worker);
    });
  }

  /** Looks again at `delayMs` from now (unless something sooner was already planned). */
  private lookAgainIn(worker: Worker, delayMs: number): void {
    if (this.stopping) return;
    if (worker.timer) clearTimeout(worker.timer);
    worker.timer = setTimeout(
      () => {
        worker.timer = null;
        this.pump(worker);
      },
      Math.max(0, Math.min(delayMs, this.options.pollIntervalMs ?? 1000)),
    );
    worker.timer.unref();
  }

  /** Sends what the destination may take now: one pump per destination at a time. */
  private pump(worker: Worker): void {
    if (this.stopping) return;
    if (worker.pumping !== null) {
      worker.pumpAgain = true;
      return;
    }
    worker.pumping = this.pumpLoop(worker);
  }

  /** Never rejects: a failed read is logged (unless the file was only locked) and tried again. */
  private async pumpLoop(worker: Worker): Promise<void> {
    try {
      await this.ready;
      do {
        worker.pumpAgain = false;
        worker.settled.clear();
        try {
          await this.pumpOnce(worker);
        } catch (err) {
          const busy = isLockBusy(err);
          if (!busy && !this.stopping) {
            this.options.logger.error(
              { ...errorFields(err), destination: worker.destination.name },
              'forwarding: could not read the outbox; trying again',
            );
          }
          this.lookAgainIn(worker, busy ? LOCKED_RETRY_MS * 5 : 1000);
        }
      } while (worker.pumpAgain && !this.stopping);
    } finally {
      // In the same turn as the last check of pumpAgain: a pump asked for after it starts anew.
      worker.pumping = null;
    }
  }

  /** Waits for the gate (answers first); false when the sender stopped meanwhile. */
  private async gateClear(): Promise<boolean> {
    await gateCleared(this.options.gate, () => this.stopping);
    return !this.stopping;
  }

  private async pumpOnce(worker: Worker): Promise<void> {
    if (!(await this.gateClear())) return;
    const nowMs = this.options.clock.now().getTime();
    const concurrency = this.options.concurrency ?? 16;
    if (await this.isPaused(worker, nowMs)) {
      this.pausedPumps += 1;
      return this.lookAgainIn(worker, this.options.pollIntervalMs ?? 1000);
    }
    if (this.stopping) return;
    const gate = this.gate(worker, nowMs);
    if (gate.kind === 'wait') return this.lookAgainIn(worker, gate.ms);
    if (gate.kind === 'busy') return; // the answers in flight look again
    const now = new Date(nowMs).toISOString();
    const heads = await this.store.due(worker.destination.name, now, gate.slots + worker.inFlight.size);
    const ids = heads.filter((head) => this.mayTake(worker, head)).map((head) => head.id);
    const rows = ids.length === 0 ? [] : await this.store.dueDeliveries(ids);
    if (rows.length > 0 && !(await this.gateClear())) return;
    if (this.stopping || !this.sendRows(worker, rows)) return;
    // With a slot free, a retry coming due must not wait for the answers in flight (a slow one
    // would hold every other proposal's retries until it came back). Only heads due later than
    // `now` count: one due now and not sent is in flight, and its answer looks again.
    if (worker.inFlight.size < concurrency) {
      const at = await this.store.nextDueAt(worker.destination.name, now);
      this.lookAgainIn(
        worker,
        at === null
          ? (this.options.pollIntervalMs ?? 1000)
          : Date.parse(at) - this.options.clock.now().getTime(),
      );
    }
  }

  /** Whether a head the pump read may be sent: not in flight, its line free, not recorded since. */
  private mayTake(worker: Worker, head: DueHead): boolean {
    return !worker.inFlight.has(head.id) && !worker.keys.has(head.order_key) && !worker.settled.has(head.id);
  }

  /**
   * Whether the destination may take more now: a Retry-After hold, an open circuit, a probe in flight
   * or every slot taken say no. Synchronous, so that the pump asks again just before it sends.
   */
  private gate(worker: Worker, nowMs: number): Gate {
    if (nowMs < worker.holdUntilMs) return { kind: 'wait', ms: worker.holdUntilMs - nowMs };
    const gate = mayAttempt(worker.circuit, nowMs, this.options.circuit ?? DEFAULT_CIRCUIT);
    if (!gate.allowed) return { kind: 'wait', ms: gate.retryAtMs - nowMs };
    if (gate.probe && worker.inFlight.size > 0) return { kind: 'busy' }; // the probe's answer decides
    const slots = gate.probe ? 1 : (this.options.concurrency ?? 16) - worker.inFlight.size;
    return slots <= 0 ? { kind: 'busy' } : { kind: 'open', slots, probe: gate.probe };
  }

  /**
   * Sends what may go of the deliveries read, the gate asked again now (answers came back while the
   * pump read). False when the pump must not look further: it waits (a timer is set) or is full.
   */
  private sendRows(worker: Worker, rows: readonly DueDelivery[]): boolean {
    const nowMs = this.options.clock.now().getTime();
    const gate = this.gate(worker, nowMs);
    if (gate.kind === 'wait') this.lookAgainIn(worker, gate.ms);
    if (gate.kind !== 'open') return false;
    let sent = 0;
    for (const row of rows) {
      if (sent >= gate.slots) break;
      // An answer began meanwhile (answers first): the rest waits for the next pump, at the gate.
      if (sent > 0 && this.options.gate?.held() === true) {
        worker.pumpAgain = true;
        return false;
      }
      if (!this.mayTake(worker, row)) continue;
      const wait = this.rateLimitWait(worker, nowMs);
      if (wait !== null) {
        this.lookAgainIn(worker, wait);
        return false;
      }
      if (gate.probe) this.setCircuit(worker, circuitProbing(worker.circuit, nowMs), nowMs);
      this.send(worker, row);
      sent += 1;
    }
    return true;
  }

  /** null: a token was taken; otherwise how long until one is there. */
  private rateLimitWait(worker: Worker, nowMs: number): number | null {
    const rate = worker.destination.rateLimitPerSecond;
    if (rate === null) return null;
    const taken = takeToken(worker.bucket ?? fullBucket(rate, nowMs), rate, nowMs);
    worker.bucket = taken.bucket;
    return taken.taken ? null : taken.waitMs;
  }

  private async isPaused(worker: Worker, nowMs: number): Promise<boolean> {
    if (worker.destination.paused) return true;
    if (nowMs - this.pausedReadAt >= PAUSE_REFRESH_MS) {
      this.pausedReadAt = nowMs;
      this.pausedRead = this.readPaused();
    }
    await this.pausedRead;
    return this.paused.has(worker.destination.name);
  }

  private async readPaused(): Promise<void> {
    try {
      const rows = await this.store.destinations();
      this.paused = new Set(rows.filter((d) => d.paused === 1).map((d) => d.name));
    } catch (err) {
      this.pausedReadAt = -Infinity; // read again by the next pump
      throw err;
    }
  }

  private send(worker: Worker, row: DueDelivery): void {
    worker.inFlight.set(row.id, row.order_key);
    worker.keys.add(row.order_key);
    const { destination } = worker;
    const started = this.options.clock.now();
    const startedMono = this.options.clock.monotonic();
    const trace = this.options.traces?.outgoing(
      `POST ${destination.name}`,
      attemptAttributes(row),
      row.trace_context,
    );
    const attempt = sendAttempt({
      url: destination.url,
      webhookId: row.webhook_id,
      body: this.bodyFor(row, destination.fullCpf),
      secrets: destination.secrets,
      timestampSeconds: Math.floor(started.getTime() / 1000),
      timeoutMs: destination.timeoutMs,
      signal: this.abort.signal,
      pools: this.pools,
      traceHeaders: trace?.headers,
    }).then((answer) => {
      const ms = this.options.clock.monotonic() - startedMono;
      if (trace === undefined) return this.finished(worker, row, answer, started, ms);
      const outcome = answer.stopped ? 'stopped' : classifyAttempt(answer.result);
      const status = 'status' in answer.result ? answer.result.status : null;
      trace.end(outcome, status, outcome !== 'delivered');
      this.finished(worker, row, answer, started, ms, trace);
    });
    this.sending.add(attempt);
    void attempt.finally(() => this.sending.delete(attempt));
    this.options.onChange?.();
  }

  /** The bytes a destination gets: the stored body, its CPFs masked unless `fullCpf`. */
  private bodyFor(row: DueDelivery, fullCpf: boolean): string {
    if (fullCpf) return row.body;
    let masked = this.maskedBodies.get(row.message_id);
    if (masked === undefined) {
      masked = bodyFor(row.body, false);
      if (this.maskedBodies.size >= MASKED_BODIES) {
        const oldest = this.maskedBodies.keys().next();
        if (oldest.done !== true) this.maskedBodies.delete(oldest.value);
      }
      this.maskedBodies.set(row.message_id, masked);
    }
    return masked;
  }

  /** An attempt came back: decide the delivery's next state and queue its record. */
  private finished(
    worker: Worker,
    row: DueDelivery,
    answer: AttemptAnswer,
    started: Date,
    ms: number,
    trace?: OutgoingTrace,
  ): void {
    if (answer.stopped) return; // not an attempt: it stays pending for the next holder
    const { destination } = worker;
    const now = this.options.clock.now();
    const nowMs = now.getTime();
    const outcome = classifyAttempt(answer.result);
    const attempt = row.attempts + 1;
    const status = 'status' in answer.result ? answer.result.status : null;
    const retryAfterMs = parseRetryAfter(answer.retryAfter, nowMs);
    if ((status === 429 || status === 503) && retryAfterMs !== null) {
      worker.holdUntilMs = Math.max(worker.holdUntilMs, nowMs + retryAfterMs);
    }
    const delay =
      outcome === 'temporary'
        ? nextAttemptDelayMs(attempt, destination.retry, this.random, retryAfterMs)
        : null;
    const next: AttemptRecord['next'] =
      outcome === 'delivered'
        ? { status: 'delivered' }
        : delay === null
          ? { status: 'dead' }
          : { status: 'pending', nextAttemptAt: new Date(nowMs + delay).toISOString() };
    const record: AttemptRecord = {
      deliveryId: row.id,
      attempt,
      startedAt: started.toISOString(),
      durationMs: Math.round(ms * 10) / 10,
      httpStatus: status,
      error: answer.error,
      outcome,
      answer: answer.answer,
      next,
      at: now.toISOString(),
    };
    this.records.push({ record, worker, deliveryId: row.id });
    this.setCircuit(
      worker,
      circuitAfter(worker.circuit, outcome, nowMs, this.options.circuit ?? DEFAULT_CIRCUIT),
      nowMs,
    );
    // Its log lines (a failed attempt, a dead message) carry the attempt's span; only they.
    if (trace === undefined) this.report(destination.name, record, row, ms, nowMs);
    else trace.run(() => this.report(destination.name, record, row, ms, nowMs));
    this.queueFlush();
  }

  private report(name: string, record: AttemptRecord, row: DueDelivery, ms: number, nowMs: number): void {
    const metrics = this.options.metrics;
    metrics?.attempt(name, record.outcome, ms / 1000);
    if (record.next.status === 'delivered') {
      metrics?.delivered(name, Math.max(0, nowMs - Date.parse(row.message_created_at)) / 1000);
      return;
    }
    const log = {
      destination: name,
      delivery_id: row.id,
      webhook_id: row.webhook_id,
      attempt: record.attempt,
      http_status: record.httpStatus,
      err: record.error,
    };
    if (record.next.status === 'dead') {
      metrics?.dead(name);
      this.options.logger.error(log, 'forwarding: message is dead (replayable with `forwards replay`)');
    } else {
      this.options.logger.warn(
        { ...log, retry_at: record.next.nextAttemptAt },
        'forwarding: attempt failed; will retry',
      );
    }
  }

  private setCircuit(worker: Worker, next: CircuitState, nowMs: number): void {
    const before = worker.circuit;
    worker.circuit = next;
    if (before.state === next.state && before.state !== 'half_open') {
      if (before.state === 'closed') return; // failure counts live in memory only
    }
    const name = worker.destination.name;
    this.circuitWrites.set(name, {
      name,
      circuit: next.state === 'closed' ? null : JSON.stringify(next),
      at: new Date(nowMs).toISOString(),
    });
    if (before.state !== next.state) {
      this.options.metrics?.circuit(name, next.state);
      const log = { destination: name, circuit: next.state, failures: next.failures };
      if (next.state === 'open')
        this.options.logger.warn(log, 'forwarding: circuit open (destination failing)');
      else if (next.state === 'closed')
        this.options.logger.info(log, 'forwarding: circuit closed (destination back)');
    }
  }

  /**
   * Writes the records now when a batch is full or nothing else is on the wire (no answer to wait
   * for: the lines stay held until the write, so waiting would only idle), else soon; a failed
   * write's retry takes them all.
   */
  private queueFlush(): void {
    if (this.flushTimer !== null || this.writing !== null) return;
    if (this.records.length >= FLUSH_BATCH || this.records.length >= this.inFlight) {
      if (this.batchTimer) clearTimeout(this.batchTimer);
      this.batchTimer = null;
      void this.flush();
      return;
    }
    if (this.batchTimer !== null) return;
    this.batchTimer = setTimeout(() => {
      this.batchTimer = null;
      void this.flush();
    }, FLUSH_DELAY_MS);
  }

  /**
   * Writes the answered attempts in one transaction, then frees their lines and looks for more.
   * Never rejects: a failed write keeps the records (still in flight, so not sent again) for a retry.
   */
  private async flush(): Promise<void> {
    if (this.writing !== null || (this.records.length === 0 && this.circuitWrites.size === 0)) return;
    const batch = this.records.splice(0, this.records.length);
    const circuits = [...this.circuitWrites.values()];
    this.circuitWrites.clear();
    let failed = false;
    this.writing = this.recorder(
      batch.map((b) => b.record),
      circuits,
    ).then(
      () => this.recorded(batch),
      (err: unknown) => {
        failed = true;
        this.notRecorded(batch, circuits, err);
      },
    );
    try {
      await this.writing;
    } finally {
      this.writing = null;
    }
    // A failed write is tried again by its timer, or by stop()'s last write: never at once, or a store
    // that refuses at once (PostgreSQL restarting) has a stopping sender spin on it.
    if (this.records.length > 0 && !failed) this.queueFlush();
  }

  private recorded(batch: readonly { worker: Worker; deliveryId: number }[]): void {
    const touched = new Set<Worker>();
    for (const { worker, deliveryId } of batch) {
      const key = worker.inFlight.get(deliveryId);
      worker.inFlight.delete(deliveryId);
      if (key !== undefined) worker.keys.delete(key);
      if (worker.pumping !== null) worker.settled.add(deliveryId);
      touched.add(worker);
    }
    this.options.onChange?.();
    for (const worker of touched) this.queuePump(worker);
  }

  private notRecorded(batch: typeof this.records, circuits: CircuitWrite[], err: unknown): void {
    this.records.unshift(...batch);
    for (const c of circuits) if (!this.circuitWrites.has(c.name)) this.circuitWrites.set(c.name, c);
    if (!isLockBusy(err)) {
      this.options.logger.error(
        errorFields(err),
        this.stopping
          ? 'forwarding: could not record attempts while stopping; they stay pending and are sent again'
          : 'forwarding: could not record attempts; retrying',
      );
    }
    if (!this.stopping && this.flushTimer === null) {
      this.flushTimer = setTimeout(
        () => {
          this.flushTimer = null;
          void this.flush();
        },
        isLockBusy(err) ? LOCKED_RETRY_MS : 1000,
      );
      this.flushTimer.unref();
    }
  }
}

/**
 * What is logged of a store's error: its message and code (SQLite's `SQLITE_BUSY`, PostgreSQL's
 * SQLSTATE). Never the error object: node-postgres errors carry the query's details.
 */
function errorFields(err: unknown): { err: string; code?: string } {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? { err: message, code } : { err: message };
}

/** What an attempt's span says (no body: it holds a CPF). */
function attemptAttributes(row: DueDelivery): TraceAttributes {
  return {
    'http.request.method': 'POST',
    'consig.destination': row.destination,
    'consig.webhook_id': row.webhook_id,
    'consig.message_type': row.type,
    'consig.delivery_id': row.id,
    'consig.attempt': row.attempts + 1,
  };
}
