import type { ServiceClient } from '../client';
import type { Readiness } from '../domain/watermark';
import type { Clock } from '../clock';
import type { Config } from '../config';
import type { StorePort } from '../core/store-port';
import type { SubjectService } from '../core/subject-report';
import type { SharedAnswers } from '../domain/delivery-alarm';
import { HandlerRouter } from '../domain/event-router';
import type { NewEvent } from '../domain/event-status';
import type { PollScheduleOptions } from '../domain/registry';
import type { StoreQuery } from '../domain/sql/store-sql';
import type { Traces } from '../domain/tracing';
import type { SenderMetrics } from '../forwarding/sender';
import type { Logger } from '../logger';
import type { Metrics, MetricsOptions } from '../metrics';
import { EVENT_LOOP_BUSY_TIMEOUT_MS, setBusyTimeout } from '../sqlite/database';
import { modeNoticeMessage } from '../sqlite/file-mode';
import { openStore, type Store } from '../sqlite/store';
import type { StartOptions } from '../start-options';
import type { TracingSettings } from '../tracing';
import type { AnswerFirst } from './answer-first';
import type { ForwardSenderThread } from './sender-thread';

/*
 * The mode interface: what differs between SQLite mode (runtime/single/single-mode.ts) and cluster
 * mode (runtime/cluster/cluster-mode.ts) when the receiver is composed, named for neither. main.ts
 * chooses the mode once and asks it, stage by stage in startReceiver's order, for what differs: the
 * partner's handlers, the local file, the figures the metrics read, then the running parts, each
 * mode building only what it runs (SQLite mode: the pipeline, the poller, the sender's thread and
 * the processing lease on the file; cluster mode: the ClusterNode), with what follows a stored
 * delivery, what the HTTP server shows and the delivery alarm reads, and stop. The rest of main.ts
 * does not know the mode.
 */

/** The mode, chosen once; what differs before the local file is open. */
export interface ReceiverMode {
  /** configureHandlers' handlers. */
  partnerHandlers(): HandlerRouter | undefined;
  /** The local SQLite file: the log (SQLite mode), or the spool, locked first (cluster mode). */
  open(): LocalFile;
}

/** The local file, open, and what differs once it is. */
export interface LocalFile {
  readonly store: Store;
  /** Where the metrics read the forwarding gauges and (cluster mode) the relay's backlog. */
  readonly gauges: Pick<MetricsOptions, 'forwardingGauges' | 'relayBacklog'>;
  /** The running parts, built from what both modes share: what the mode runs, nothing more. */
  compose(shared: SharedParts): ModeParts;
  /** Closes the file's connections (the pipeline's and the partner's too) and gives the spool's lock back. */
  close(): void;
}

/** What both modes build and the mode's running parts use. */
export interface SharedParts {
  clock: Clock;
  metrics: Metrics;
  /** Answers first (issue 23): what background work waits on while answers are being made. */
  answers: AnswerFirst;
  /** The service's client for the registry's polls; null when SERVICE_BASE_URL is unset. */
  serviceClient: ServiceClient | null;
  /** The change feed's long-polls, woken after every commit that may have made messages. */
  feedWaiters: { notify(): void };
  /** The partner's handlers (configureHandlers), when it registered any. */
  partner: HandlerRouter | undefined;
  schedule: PollScheduleOptions;
  senderMetrics: SenderMetrics;
  /** Tracing (OTEL_TRACES_EXPORTER=otlp): the seams' spans; undefined when off. */
  traces: Traces | undefined;
  /** What the forwarding thread starts its own tracing with; null when off. */
  tracing: TracingSettings | null;
}

/** What runs, and what differs while it does. */
export interface ModeParts {
  /** The runtime, as the receiver's owner sees it (Receiver.runtime). */
  readonly runtime: Runtime;
  /** What follows a stored delivery (the writer's onStored, after its commit). */
  afterStore(id: number, event: NewEvent): void;
  /** Starts processing: the lease's contest, or the node's connection to PostgreSQL. */
  start(): void;
  /** Cluster mode: every replica's answers, for the delivery alarm (interface §6.1, rule 4). */
  readonly sharedAnswers: (() => Promise<SharedAnswers | null>) | undefined;
  /** What the HTTP server shows that differs: processing, readiness, the logs, the shared gauges. */
  readonly http: ServerParts;
  /** Makes the sender look at once, after a replay, a backfill or a resume (SQLite mode's log). */
  nudgeSender(): void;
  /** Stops processing, its running work finished or handed over within `timeoutMs`. */
  stop(timeoutMs: number): Promise<void>;
}

/**
 * A runtime as its owner sees it (tests, the demo), named for neither mode: SQLite mode's
 * processing under the file's lease, or a replica's ClusterNode.
 */
export interface Runtime {
  /**
   * `connecting` until processing can run (a replica: connected to PostgreSQL, on a schema it runs
   * on), then `running`; `stopped` once stopped. SQLite mode runs from its start.
   */
  readonly state: 'connecting' | 'running' | 'stopped';
  /** Whether this process processes events now: it holds the lease, or is a connected replica with workers. */
  readonly processing: boolean;
  /** Whether it may take traffic as far as order goes (a replica's relay beat); SQLite mode always may. */
  readiness(): Readiness;
  /** The forwarding sender's thread; null when this process sends nothing. */
  readonly sender: ForwardSenderThread | null;
  /** Makes processing look at once (SQLite mode: the pipeline's sweep; a replica: its relay's next batch). */
  nudge(): void;
  /** The job queues this process works (a replica's pg-boss queues; none in SQLite mode). */
  workerQueues(): string[];
  /** Resolves once the registry polls under way finish (SQLite mode's poller; a replica's are jobs). */
  pollsSettled(): Promise<void>;
}

/** What the HTTP server shows that differs by mode (main.ts hands it to createApp, http/app-deps.ts). */
export interface ServerParts {
  /** Whether this process processes events now; `/readyz` reports it. */
  isProcessing(): boolean;
  /** A replica's readiness, which `/readyz` waits for; SQLite mode has none. */
  readiness?: () => Readiness;
  /** The store the admin API, the console and `/metrics` read and write (core/store-port.ts): they ask it what differs. */
  storePort: StorePort<StoreQuery>;
  /** This replica's relay (its spool's id and backlog), which the console's overview shows. */
  relay?: { readonly id: string; backlog(): { count: number; oldestReceivedAt: string | null } };
  /** The webhook requests being answered (a replica's relay may not cover them yet). */
  inFlight?: {
    begin(receivedAt: string): { token: number; orderAt: string | null };
    end(token: number): void;
  };
  /** The in-process pipeline: a replay is picked up at once. */
  pipeline?: { sweep(): void };
  /** One person's data, everywhere this process reaches (subject-places.ts `subjectsOnServer`). */
  subjects: SubjectService;
}

/** The partner's handlers (configureHandlers). */
export function partnerRouter(options: StartOptions): HandlerRouter | undefined {
  const router = new HandlerRouter();
  options.configureHandlers?.(router);
  return router.empty ? undefined : router;
}

/**
 * The SQLite file, migrated when `migrate` (then `migrated` runs on it). The first connection the
 * receiver opens to it: a file or companion readable by others is tightened to 0600 here
 * (sqlite/file-mode.ts), told in one log line naming the path.
 */
export function openMigrated(
  config: Config,
  logger: Logger,
  migrate: boolean,
  migrated: (store: Store) => void,
): Store {
  const store = openStore(config.databasePath, {
    migrate,
    modeNotice: (n) => logger.warn({ path: n.path, mode: n.was }, modeNoticeMessage(n)),
    synchronous: config.sqlite.synchronous,
    busyTimeoutMs: config.sqlite.busyTimeoutMs,
  });
  migrated(store);
  // Migrated (waiting as long as it takes for a receiver starting beside it): from now on no
  // connection of this process holds the event loop while another process has the write lock.
  setBusyTimeout(store.db, EVENT_LOOP_BUSY_TIMEOUT_MS);
  return store;
}
