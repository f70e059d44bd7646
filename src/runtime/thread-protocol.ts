import type { CircuitState } from '../domain/forwarding/circuit';
import type { Destination } from '../domain/forwarding/destinations';
import type { AttemptOutcome } from '../domain/forwarding/retry';
import type { StoreTarget } from '../store-factory';
import type { TracingSettings } from '../tracing/settings';

/**
 * The messages between the receiver's main thread and the forwarding sender's worker thread
 * (sender-thread.ts ↔ sender-worker.ts). Everything in them is structured-cloneable data.
 */

/**
 * Where the thread's outbox is, and so what the thread runs (sender-worker.ts): the store the
 * factory chose (store-factory.ts). SQLite: one ForwardSender for every destination, on a
 * connection of the thread's own. PostgreSQL: the ClusterForwarder (runtime/cluster/forwarder.ts):
 * the destinations' locks and the `LISTEN` on a connection of the thread's own, a sender for each
 * destination held, on a pool of the thread's own.
 */
export type SenderThreadStore = StoreTarget;

/** What the worker is started with (`workerData`). */
export interface SenderWorkerData {
  store: SenderThreadStore;
  destinations: readonly Destination[];
  /** The main logger's level: the worker forwards only what would be written. */
  logLevel: string;
  /** @default 1000 */
  pollIntervalMs?: number | undefined;
  /** @default 16 */
  concurrency?: number | undefined;
  /**
   * Nudges without a message: the main thread adds 1 to `nudges[0]` and notifies, the thread
   * waits on it with `Atomics.waitAsync`. A pipeline commit nudges, thousands of times a second at
   * full load; a message each would cost both threads ~10 µs of copying and queueing.
   */
  nudges: Int32Array;
  /**
   * Answers first (issue 23): the main thread's AnswerFirst.hold, 1 while a webhook answer is being
   * made there. The thread sends nothing then (it competes for the same cores through the
   * kernel's scheduler, which knows nothing of answers); it waits on the flag with
   * `Atomics.waitAsync`. Absent: never waits.
   */
  hold?: Int32Array | undefined;
  /**
   * Tracing (issue 35): the thread starts an SDK of its own with these settings, and each attempt
   * is a CLIENT span whose `traceparent` its request carries. Absent: off.
   */
  tracing?: TracingSettings | null | undefined;
}

export type ToWorker =
  | { type: 'start' }
  /** Stop sending; the worker answers `stopped` and then closes its database. */
  | { type: 'stop'; timeoutMs: number };

/** One metric observation, as SenderMetrics receives it. */
export type Observation =
  | { kind: 'attempt'; destination: string; outcome: AttemptOutcome; seconds: number }
  | { kind: 'delivered'; destination: string; seconds: number }
  | { kind: 'dead'; destination: string }
  | { kind: 'circuit'; destination: string; state: CircuitState['state'] }
  /** Tracing: spans the thread's exporter dropped. */
  | { kind: 'spans_dropped'; reason: 'queue_full' | 'export_failed'; spans: number };

export type FromWorker =
  | { type: 'ready' }
  /** Observations since the last report, and the sender's state when it changed. */
  | {
      type: 'report';
      observations: Observation[];
      inFlight: number;
      circuits: [string, CircuitState][];
    }
  /** Cluster mode: this replica took (`held`) or lost a destination's lock. */
  | { type: 'held'; destination: string; held: boolean }
  /**
   * Cluster mode: messages were committed (PostgreSQL's `NOTIFY`), for the feed's long-polls on
   * the main thread. One per turn of the thread's event loop at most.
   */
  | { type: 'notify' }
  /** A log line of the worker's logger (pino JSON). */
  | { type: 'log'; line: string }
  | { type: 'stopped'; finished: boolean };
