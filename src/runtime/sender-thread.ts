import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { TracingSettings } from '../tracing/settings';
import type { CircuitState } from '../domain/forwarding/circuit';
import type { Destination } from '../domain/forwarding/destinations';
import type { BackgroundGate } from '../domain/answer-first';
import type { Logger } from '../logger';
import type { SenderMetrics } from '../forwarding/sender';
import type {
  FromWorker,
  Observation,
  SenderThreadStore,
  SenderWorkerData,
  ToWorker,
} from './thread-protocol';

/** What the composition root, the admin routes and the tests use of a sender. */
export interface SenderControl {
  start(): void;
  nudge(): void;
  stop(timeoutMs: number): Promise<boolean>;
  readonly inFlight: number;
  circuits(): Map<string, CircuitState>;
}

/**
 * The thread's young generation (V8's new space: two semi-spaces and their large objects). V8 sizes
 * it from the machine's memory, up to 16 MB a semi-space here; the sender's garbage is short-lived
 * (a request's objects die with its answer), so a small one collects as much. 12 MB took the
 * receiver's peak RSS while it drained a 20 000-message backlog from 190 to 164 MB, with no change
 * in CPU per message beyond this machine's noise (issue 23).
 */
const WORKER_YOUNG_GENERATION_MB = 12;

export interface SenderThreadOptions {
  /** The outbox: SQLite's file, or (cluster mode) the shared PostgreSQL. */
  store: SenderThreadStore;
  destinations: readonly Destination[];
  logger: Logger;
  metrics: SenderMetrics;
  /** @default 1000 */
  pollIntervalMs?: number | undefined;
  /** @default 16 */
  concurrency?: number | undefined;
  /**
   * Answers first (issue 23): the thread sends nothing while `gate.hold[0]` is 1, and writes the
   * attempts' records only once the gate is clear (they stay in flight meanwhile, never sent
   * twice).
   * @default none (never waits)
   */
  gate?: (BackgroundGate & { readonly hold: Int32Array }) | undefined;
  /** Cluster mode: this replica took (`held`) or lost a destination's lock. */
  onHeld?(destination: string, held: boolean): void;
  /**
   * Cluster mode: messages were committed (PostgreSQL's `NOTIFY`, heard by the thread's lock
   * connection), for the feed's long-polls. Given, the thread runs even with no destination.
   */
  onNotify?(): void;
  /**
   * Tracing: the settings the thread starts its own SDK with (thread-protocol.ts).
   * @default undefined (off)
   */
  tracing?: TracingSettings | null | undefined;
  /**
   * How long after an unexpected exit of the thread a new one starts.
   * @default 1000
   */
  restartDelayMs?: number;
}

/**
 * The forwarding sender in a worker thread (sender-worker.ts), seen from the main thread.
 *
 * Why a thread: signing and sending a message costs about 0.4 ms of CPU, and with forwarding on the
 * main thread also answers the service's webhooks and runs the pipeline; `npm run bench` measured
 * ingest with forwarding on at 0.43× off with everything on one thread. The sender calls no
 * partner code and shares nothing with the pipeline but the database file, so it moves whole.
 * Cluster mode runs its whole forwarder there too (runtime/cluster/forwarder.ts: the destinations' locks,
 * the `LISTEN`, a sender per destination held): on the main thread it held the starved bench row's
 * answers for 50–100 ms at a time, p99 530 ms against 42 ms in a thread (`npm run bench -- --only
 * starved`, issue 23).
 *
 * A thread that dies (it should not: the sender catches what it can) is logged and replaced after
 * `restartDelayMs` while sending is on; what it had in flight is still pending in the outbox, so
 * nothing is lost (at-least-once, the same `webhook-id`).
 */
export class ForwardSenderThread implements SenderControl {
  private worker: Worker | null = null;
  private started = false;
  private readonly nudges = new Int32Array(new SharedArrayBuffer(4));
  private restartTimer: NodeJS.Timeout | null = null;
  private mirroredInFlight = 0;
  private mirroredCircuits = new Map<string, CircuitState>();
  private held = new Set<string>();
  private stopped: ((finished: boolean) => void) | null = null;

  constructor(private readonly options: SenderThreadOptions) {}

  /** Starts the thread (once the processing lease is held). */
  start(): void {
    // Only a store that notifies its commits (PostgreSQL's LISTEN) is given onNotify.
    const listens = this.options.onNotify !== undefined;
    if ((this.options.destinations.length === 0 && !listens) || this.started) return;
    this.started = true;
    this.spawn();
  }

  /** Makes the thread look at every destination now (without a message: see SenderWorkerData.nudges). */
  nudge(): void {
    if (this.worker === null) return;
    Atomics.add(this.nudges, 0, 1);
    Atomics.notify(this.nudges, 0);
  }

  /** Deliveries sent and not yet recorded, as the thread last reported. */
  get inFlight(): number {
    return this.mirroredInFlight;
  }

  /** The thread while one runs, for observing it (its `threadId`, or ending it in a test). */
  get thread(): Worker | null {
    return this.worker;
  }

  /** Cluster mode: the destinations whose lock the thread holds, as it last reported, sorted. */
  holding(): string[] {
    return [...this.held].sort();
  }

  /** Each destination's circuit, as the thread last reported. */
  circuits(): Map<string, CircuitState> {
    return new Map(this.mirroredCircuits);
  }

  /**
   * Stops sending (the thread waits up to `timeoutMs` for the requests in flight and records their
   * answers), then ends the thread. True when everything in flight finished in time.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.started = false;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = null;
    const worker = this.worker;
    if (worker === null) return true;
    const answered = new Promise<boolean>((resolve) => {
      this.stopped = resolve;
    });
    // The thread's own stop is bounded by `timeoutMs` (then ~1 s to abort); past that, end it.
    const deadline = setTimeout(() => this.stopped?.(false), timeoutMs + 3000);
    this.send({ type: 'stop', timeoutMs });
    const finished = await answered;
    clearTimeout(deadline);
    this.stopped = null;
    this.worker = null;
    await worker.terminate();
    this.mirroredInFlight = 0;
    this.held.clear();
    return finished;
  }

  private spawn(): void {
    const data: SenderWorkerData = {
      store: this.options.store,
      destinations: this.options.destinations,
      logLevel: this.options.logger.level,
      pollIntervalMs: this.options.pollIntervalMs,
      concurrency: this.options.concurrency,
      nudges: this.nudges,
      hold: this.options.gate?.hold,
      tracing: this.options.tracing,
    };
    const worker = new Worker(workerFile(), {
      workerData: data,
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
    });
    this.worker = worker;
    worker.on('message', (message: FromWorker) => this.receive(message));
    worker.on('error', (err) =>
      this.options.logger.error({ err: err.message }, 'forwarding: sender thread failed'),
    );
    worker.on('exit', (code) => this.exited(worker, code));
    this.send({ type: 'start' });
  }

  private exited(worker: Worker, code: number): void {
    if (this.worker !== worker) return; // ended by stop()
    this.worker = null;
    this.mirroredInFlight = 0;
    // Its lock connection ended with it: another replica may take its destinations now.
    for (const destination of this.held) this.options.onHeld?.(destination, false);
    this.held.clear();
    this.stopped?.(false);
    if (!this.started) return;
    const delay = this.options.restartDelayMs ?? 1000;
    this.options.logger.error(
      { exit_code: code, restart_in_ms: delay },
      'forwarding: sender thread exited; starting a new one (unsent messages stay pending)',
    );
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.started) this.spawn();
    }, delay);
  }

  private send(message: ToWorker): void {
    this.worker?.postMessage(message);
  }

  private receive(message: FromWorker): void {
    switch (message.type) {
      case 'report':
        for (const o of message.observations) observe(this.options.metrics, o);
        this.mirroredInFlight = message.inFlight;
        this.mirroredCircuits = new Map(message.circuits);
        break;
      case 'held':
        if (message.held) this.held.add(message.destination);
        else this.held.delete(message.destination);
        this.options.onHeld?.(message.destination, message.held);
        break;
      case 'notify':
        this.options.onNotify?.();
        break;
      case 'log':
        relayLog(this.options.logger, message.line);
        break;
      case 'stopped':
        this.stopped?.(message.finished);
        break;
      case 'ready':
        break;
    }
  }
}

function observe(metrics: SenderMetrics, o: Observation): void {
  switch (o.kind) {
    case 'attempt':
      return metrics.attempt(o.destination, o.outcome, o.seconds);
    case 'delivered':
      return metrics.delivered(o.destination, o.seconds);
    case 'dead':
      return metrics.dead(o.destination);
    case 'circuit':
      return metrics.circuit(o.destination, o.state);
    case 'spans_dropped':
      return metrics.spansDropped?.(o.reason, o.spans);
  }
}

const PINO_LEVELS: Record<number, 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal'> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'fatal',
};

/** Writes a line of the thread's logger with the main logger (its redaction and destination). */
function relayLog(logger: Logger, line: string): void {
  try {
    const { level, msg, ...fields } = JSON.parse(line) as { level: number; msg?: string };
    logger[PINO_LEVELS[level] ?? 'info']({ ...fields, thread: 'forwarding' }, msg ?? '');
  } catch {
    logger.warn('forwarding: sender thread wrote a log line that is not JSON');
  }
}

/**
 * The compiled worker beside this file. Under ts-jest this file runs from its TypeScript source,
 * which a worker thread cannot load: the thread then runs the build (`npm test` builds first).
 */
function workerFile(): string {
  const beside = join(__dirname, 'sender-worker.js');
  if (existsSync(beside)) return beside;
  const built = join(__dirname, '..', '..', 'dist', 'src', 'runtime', 'sender-worker.js');
  if (existsSync(built)) return built;
  throw new Error(`forwarding: the sender's worker thread is not built (${built}); run \`npm run build\``);
}
