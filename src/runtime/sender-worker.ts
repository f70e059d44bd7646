import { parentPort, workerData } from 'node:worker_threads';
import pino from 'pino';
import { systemClock } from '../clock';
import { connectionSettings, pgPool } from '../postgres/connection';
import { ClusterForwarder } from './cluster/forwarder';
import { senderStore } from '../core/sender-queries';
import { type BackgroundGate, gateCleared } from '../domain/answer-first';
import type { SenderStore } from '../domain/forwarding/sender-store';
import type { Destination } from '../domain/forwarding/destinations';
import { type Db, openDatabase } from '../sqlite/database';
import { isLockBusy } from '../domain/errors';
import { sqliteStoreSql } from '../sqlite/sqlite-statements';
import { activeSpanIds, mergeSpanIds } from '../tracing/log-ids';
import { startTracing } from '../tracing';
import { ForwardSender, type Recorder, type SenderMetrics } from '../forwarding/sender';
import type { SenderControl } from './sender-thread';
import { onStore, type PostgresTarget, type SqliteTarget } from '../store-factory';
import type { FromWorker, Observation, SenderWorkerData, ToWorker } from './thread-protocol';

/**
 * The forwarding sender's worker thread (started by sender-thread.ts). It runs the same
 * {@link ForwardSender} on a connection of its own, so that sending (signing, HTTP, recording
 * attempts) takes a core of its own instead of the event loop that answers the service's
 * webhooks. It runs no partner code: the sender only reads the outbox and writes delivery rows.
 * In cluster mode it runs the whole ClusterForwarder (runtime/cluster/forwarder.ts): its lock connection,
 * its `LISTEN` and a sender per destination held, on a pool of its own (issue 23: on the main
 * thread, the senders' turns and their garbage held webhook answers for 50–100 ms at a time on a
 * starved core, and the starved bench row's p99 missed its target in half the runs).
 *
 * Metrics and the sender's state go to the main thread in one report per turn of this thread's
 * event loop at most; log lines go as they are written.
 */

// A write that finds the file locked may wait here: this thread answers no webhook.
const WORKER_BUSY_TIMEOUT_MS = 1000;

const port = parentPort;
if (port === null) throw new Error('sender-worker.ts runs only as a worker thread');
const data = workerData as SenderWorkerData;

const post = (message: FromWorker): void => port.postMessage(message);

const logger = pino(
  {
    level: data.logLevel,
    base: null,
    timestamp: false,
    // Tracing: a line written in an attempt's span carries its ids (src/tracing/log-ids.ts).
    ...(data.tracing ? { mixin: activeSpanIds, mixinMergeStrategy: mergeSpanIds } : {}),
  },
  { write: (line: string) => post({ type: 'log', line }) },
);

/**
 * Tracing: this thread's own SDK and exporter (a thread has its own globals), its dropped spans
 * counted in the main thread's metric with the other observations. Only for a thread that has
 * destinations to send to: one that sends nothing makes no span, and the SDK loaded here cost the
 * traced bench row ~110 µs of CPU per delivery with no destination at all (`npm run bench -- --only
 * receiver,receiver-traced`: 276 against 181 µs/req without it, the receiver off 167).
 */
const tracing =
  data.tracing && data.destinations.length > 0
    ? startTracing(data.tracing, {
        warn: (fields, message) => logger.warn(fields, message),
        dropped: (reason, spans) => {
          observations.push({ kind: 'spans_dropped', reason, spans });
          queueReport();
        },
        monotonic: () => performance.now(),
      })
    : null;

/**
 * This connection's page cache. It reads the heads of the outbox's lines (a few index pages) and
 * each message's body once, when it is sent: a large cache only holds bodies that are not read
 * again. 4 MB instead of the default 32: the receiver's peak RSS at c=50 with forwarding on went from
 * 229–240 MB to 220 MB in `npm run bench` (issue 23), with no change in CPU per message.
 */
const WORKER_CACHE_KIB = 4096;

/** What this thread runs on its store: the sender(s), and how the store is closed after them. */
interface Sending {
  sender: SenderControl;
  close(): Promise<void>;
}

/**
 * SQLite mode: one sender for every destination. It reads the outbox and writes the attempts'
 * records on a connection of its own. Its commits do not wait for the disk (`NORMAL`): a record
 * lost with a power cut has its message sent again (delivery is at least once, contract §8), while
 * a commit that waited for fsync would hold the file's write lock, which the ingest writer on the
 * main thread may want, for milliseconds. Until issue 23 the records went to the main thread, which
 * wrote them with the pipeline's `FULL` commits: each batch's fsync held the event loop that
 * answers the service. The CPU per forwarded message is the same either way on a quiet machine (the
 * hop cost about what the writes here cost; docs/benchmark.md).
 */
function sqliteSending(store: SqliteTarget): Sending {
  const db = openDatabase(store.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: WORKER_BUSY_TIMEOUT_MS,
    cacheKib: WORKER_CACHE_KIB,
  });
  // One set of statements, prepared once, for the reads and the records.
  const outbox = senderStore(sqliteStoreSql(db));
  /**
   * Writes records once no webhook answer is being made (answers first): the write takes the
   * file's lock, which the ingest writer may want. Then reports, so that the metrics move with the
   * records.
   */
  const record: Recorder = async (records, circuits) => {
    await gateCleared(gate, () => stopping);
    await writeWhenFree(db, () => outbox.record(records, circuits));
    report();
  };
  return {
    sender: senderOn(outbox, data.destinations, record),
    close: async () => {
      db.close();
    },
  };
}

/**
 * Cluster mode: the ClusterForwarder, on a pool and a lock connection of this thread's own. Its
 * records are PostgreSQL transactions, which hold no lock the answers need: they go at once.
 */
function postgresSending(target: PostgresTarget): Sending {
  const store = target.cluster;
  const settings = connectionSettings(store.limits);
  const pool = pgPool({
    connectionString: store.databaseUrl,
    max: 3,
    application_name: `consig-receiver:${store.replicaId}:sender`,
    connectionTimeoutMillis: 5000,
    ...settings,
  });
  let notifying = false;
  const forwarder = new ClusterForwarder({
    pool,
    connectionString: store.databaseUrl,
    destinations: data.destinations,
    createSender: (destination, senderStore) => senderOn(senderStore, [destination]),
    logger,
    applicationName: `consig-receiver:${store.replicaId}:forwarder`,
    settings,
    onHeld: (destination, held) => post({ type: 'held', destination, held }),
    // A turn's commit notifies once; many in one turn of this thread make one message.
    onNotify: () => {
      if (notifying) return;
      notifying = true;
      setImmediate(() => {
        notifying = false;
        post({ type: 'notify' });
      });
    },
  });
  return { sender: forwarder, close: () => pool.end().catch(() => undefined) };
}

function senderOn(
  store: SenderStore,
  destinations: readonly Destination[],
  record?: Recorder,
): ForwardSender {
  return new ForwardSender(store, destinations, {
    gate,
    clock: systemClock,
    logger,
    metrics,
    pollIntervalMs: data.pollIntervalMs,
    concurrency: data.concurrency,
    onChange: queueReport,
    traces: tracing?.traces,
    ...(record === undefined ? {} : { record }),
  });
}

/** How often a record's write looks again at a file another connection is writing. */
const LOCK_POLL_MS = 0.2;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * Runs `write` (one transaction), polling every {@link LOCK_POLL_MS} while another connection
 * holds the file's write lock, for up to {@link WORKER_BUSY_TIMEOUT_MS}, then rejects with SQLite's
 * busy error (the sender keeps the records and tries again). SQLite's own busy handler sleeps 1, 2,
 * 5, 10, … ms between looks: a record that met the pipeline's commit (a millisecond or two with its
 * fsync) waited 3 or 8 ms, and held its proposal's next message that long. This thread answers no
 * webhook, so blocking it is free. `write` runs on the SQLite StoreSql, synchronously underneath: a
 * locked file rejects at its BEGIN IMMEDIATE, before any of its statements ran, and the event loop
 * does not turn before the write settles.
 */
async function writeWhenFree(db: Db, write: () => Promise<void>): Promise<void> {
  db.pragma('busy_timeout = 0');
  try {
    const deadline = performance.now() + WORKER_BUSY_TIMEOUT_MS;
    for (;;) {
      try {
        return await write();
      } catch (err) {
        if (!isLockBusy(err) || performance.now() >= deadline) throw err;
        Atomics.wait(sleeper, 0, 0, LOCK_POLL_MS);
      }
    }
  } finally {
    db.pragma(`busy_timeout = ${WORKER_BUSY_TIMEOUT_MS}`);
  }
}

/**
 * Reports go at most every {@link REPORT_INTERVAL_MS}: a message costs both threads a wake-up, and
 * one per answer was a third of the sender's CPU (issue 23's profile). Metrics and the mirrored
 * state lag by that much; the records themselves are not delayed.
 */
const REPORT_INTERVAL_MS = 100;

const observations: Observation[] = [];
let reportTimer: NodeJS.Timeout | null = null;
let lastState = '';

function queueReport(): void {
  if (reportTimer !== null) return;
  reportTimer = setTimeout(report, REPORT_INTERVAL_MS);
}

function report(): void {
  if (reportTimer !== null) clearTimeout(reportTimer);
  reportTimer = null;
  const circuits = [...sender.circuits()];
  const state = JSON.stringify([sender.inFlight, circuits]);
  if (observations.length === 0 && state === lastState) return;
  lastState = state;
  post({ type: 'report', observations: observations.splice(0), inFlight: sender.inFlight, circuits });
}

const metrics: SenderMetrics = {
  attempt: (destination, outcome, seconds) => {
    observations.push({ kind: 'attempt', destination, outcome, seconds });
    queueReport();
  },
  delivered: (destination, seconds) => {
    observations.push({ kind: 'delivered', destination, seconds });
    queueReport();
  },
  dead: (destination) => {
    observations.push({ kind: 'dead', destination });
    queueReport();
  },
  circuit: (destination, state) => {
    observations.push({ kind: 'circuit', destination, state });
    queueReport();
  },
};

/** `Atomics.waitAsync` (Node ≥ 16; typed from ES2024, newer than this project's lib). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(
      array: Int32Array,
      index: number,
      value: number,
    ): { async: false; value: string } | { async: true; value: Promise<string> };
  }
).waitAsync;

/** The main thread's hold flag as a gate (thread-protocol.ts, `hold`). */
function threadGate(hold: Int32Array | undefined): BackgroundGate | undefined {
  if (hold === undefined) return undefined;
  return {
    whenClear: () => {
      if (Atomics.load(hold, 0) === 0) return null;
      const wait = waitAsync(hold, 0, 1);
      return wait.async ? wait.value.then(() => undefined) : null;
    },
    underLoad: () => false,
    held: () => Atomics.load(hold, 0) === 1,
  };
}

const gate = threadGate(data.hold);
// The store the factory chose for the receiver (store-factory.ts), told to this thread as data.
const { sender, close } = onStore(data.store, { sqlite: sqliteSending, postgres: postgresSending });

port.on('message', (message: ToWorker) => {
  switch (message.type) {
    case 'start':
      sender.start();
      void watchNudges();
      break;
    case 'stop':
      stopping = true;
      void sender.stop(message.timeoutMs).then(async (finished) => {
        report();
        await close();
        await tracing?.shutdown();
        post({ type: 'stopped', finished });
        port.close();
      });
      break;
  }
});

let stopping = false;

/** Looks at every destination each time the main thread nudges (several nudges may make one look). */
async function watchNudges(): Promise<void> {
  const { nudges } = data;
  let seen = Atomics.load(nudges, 0);
  while (!stopping) {
    const wait = waitAsync(nudges, 0, seen);
    if (wait.async) await wait.value;
    seen = Atomics.load(nudges, 0);
    if (!stopping) sender.nudge();
  }
}

post({ type: 'ready' });
