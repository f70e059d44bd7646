import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { ServiceClient } from '../client';
import type { Clock } from '../clock';
import type { ClusterConfig, Config } from '../config';
import { consoleFingerprints } from '../domain/console';
import { END_OTHER_SESSIONS, endOtherSessionsParams } from '../domain/sql/console-session-statements';
import { HandlerRouter } from '../domain/event-router';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import type { Traces } from '../domain/tracing';
import type { TracingSettings } from '../tracing';
import type { PollScheduleOptions } from '../domain/registry';
import type { SenderMetrics } from '../forwarding/sender';
import { ForwardSenderThread, type SenderControl } from './sender-thread';
import type { AppDeps } from '../http/app-deps';
import type { FeedWaiters } from '../http/admin/feed-waiters';
import type { DeliveryWatchOptions } from '../http/delivery-watch';
import { InFlightRequests } from './cluster/in-flight';
import type { Logger } from '../logger';
import type { Metrics, MetricsOptions } from '../metrics';
import type { AnswerFirst } from './answer-first';
import { ProcessingLeadership } from './single/leadership';
import { type PartnerHandlers, Pipeline } from './single/pipeline';
import { workKeyOf } from '../domain/work-key';
import { storePass, RETENTION_FAILED, scheduleRetention, spoolPass } from './retention-schedule';
import { RegistryPoller } from './single/poller';
import type { StartOptions } from '../start-options';
import { ClusterNode } from './cluster/node';
import { OrderClock, type OrderReading } from './cluster/order-clock';
import { storeGauges } from '../core/gauges';
import { destinationGaugesQuery } from '../core/sender-queries';
import { sqliteDialect } from '../domain/sql/dialect';
import { type Db, EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase, setBusyTimeout } from '../sqlite/database';
import { prepareShared } from '../sqlite/sqlite-prepare';
import type { NewEvent } from '../domain/event-status';
import { processingLease } from '../sqlite/processing-lease';
import { sqliteStoreSql } from '../sqlite/sqlite-statements';
import { sqliteStorePort } from '../sqlite/sqlite-port';
import { adminStore } from '../core/store-port';
import {
  applyErasuresToSpool,
  reapplyJournal,
  scheduleSubjectIndex,
  SPOOL_ERASURES_EVERY_MS,
  subjectsOnServer,
} from '../subject-places';
import { openSpool, type Spool } from '../sqlite/spool';
import { modeNoticeMessage } from '../sqlite/file-mode';
import { lockSpool, type SpoolLock } from '../sqlite/spool-lock';
import { openStore, type Store } from '../sqlite/store';

/*
 * What differs between SQLite mode and cluster mode (contract §10) when the receiver is composed,
 * each piece in one home. main.ts chooses the mode once ({@link sqliteMode} or {@link clusterMode})
 * and asks it, stage by stage in startReceiver's order, for what differs: the partner's handlers,
 * the local file, the figures the metrics read, then the running parts, each mode building only
 * what it runs (SQLite mode: the handlers, the pipeline, the poller, the sender's thread and the
 * processing lease on the file; cluster mode: the ClusterNode), with what follows a stored
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

/**
 * SQLite mode's processing, on the file: the pipeline, the registry poller and the forwarding
 * sender, run while this process holds the processing lease.
 */
export interface SqliteProcessing {
  readonly pipeline: Pipeline;
  readonly poller: RegistryPoller | null;
  /** Sends the outbox's messages to the configured destinations (contract §8), in a thread. */
  readonly sender: SenderControl;
  /** Whether this process holds the processing lease (several receivers may share one file). */
  readonly leadership: ProcessingLeadership;
}

/** What both modes build and the mode's running parts use. */
export interface SharedParts {
  clock: Clock;
  metrics: Metrics;
  /** Answers first (issue 23): what background work waits on while answers are being made. */
  answers: AnswerFirst;
  /** The service's client for the registry's polls; null when SERVICE_BASE_URL is unset. */
  serviceClient: ServiceClient | null;
  feedWaiters: FeedWaiters;
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
  /** Cluster mode's relay and workers (Receiver.cluster); null on SQLite alone. */
  readonly cluster: ClusterNode | null;
  /** SQLite mode's processing on the file (Receiver.sqlite); null in cluster mode. */
  readonly sqlite: SqliteProcessing | null;
  /** What follows a stored delivery (the writer's onStored, after its commit). */
  afterStore(id: number, event: NewEvent): void;
  /** Starts processing: the lease's contest, or the node's connection to PostgreSQL. */
  start(): void;
  /** Cluster mode: every replica's answers, for the delivery alarm (interface §6.1, rule 4). */
  readonly sharedAnswers: DeliveryWatchOptions['shared'];
  /** What the HTTP server shows that differs: processing, readiness, the logs, the shared gauges. */
  readonly http: Pick<
    AppDeps,
    | 'isProcessing'
    | 'readiness'
    | 'storePort'
    | 'relay'
    | 'sharedGauges'
    | 'inFlight'
    | 'pipeline'
    | 'subjects'
  >;
  /** Makes the sender look at once, after a replay, a backfill or a resume (SQLite mode's log). */
  nudgeSender(): void;
  /** Stops processing, its running work finished or handed over within `timeoutMs`. */
  stop(timeoutMs: number): Promise<void>;
}

/** SQLite mode: the file is the log, and processing runs on it while this process holds the lease. */
export function sqliteMode(config: Config, options: StartOptions): ReceiverMode {
  return {
    partnerHandlers: () => partnerRouter(options),
    open: () => openSqlite(config, options),
  };
}

function openSqlite(config: Config, options: StartOptions): LocalFile {
  const store = openMigrated(config, options.logger, (s) => endRotatedSessions(config, s, options.logger));
  const pipelineDb = openPipelineDb(config);
  const forwardGauges = sqliteForwardGauges(pipelineDb, config);
  let partnerDb: Db | null = null;
  const file: SqliteFile = {
    store,
    pipelineDb,
    forwardGauges,
    partners: (partner) => {
      const partners = sqlitePartners(config, partner);
      partnerDb = partners?.db ?? null;
      return partners;
    },
  };
  return {
    store,
    gauges: { forwardingGauges: forwardGauges },
    compose: (shared) => composeSqlite(config, options, file, shared),
    close: () => {
      pipelineDb.close();
      partnerDb?.close();
      store.close();
    },
  };
}

/** SQLite mode's file: the store, the pipeline's connection, and the partner's once opened. */
interface SqliteFile {
  store: Store;
  pipelineDb: Db;
  /** The configured destinations' gauges, read on the pipeline's connection. */
  forwardGauges(): DestinationGauges[];
  /** The partner's events' connection, opened when there are partner handlers (closed with the file). */
  partners(partner: HandlerRouter | undefined): PartnerHandlers | undefined;
}

/** SQLite mode's running parts: processing on the file, started and stopped by the lease. */
function composeSqlite(
  config: Config,
  options: StartOptions,
  file: SqliteFile,
  shared: SharedParts,
): ModeParts {
  const holder = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`; // in the processing lease
  const processing = buildProcessing(config, options, file, { ...shared, holder });
  const leadership = buildLeadership(config, options.logger, file.store, { ...shared, holder, processing });
  // The store the admin API and the console use: a replay makes the pipeline look at once, a
  // write to the forwarding tables wakes the sender's thread.
  const storePort = sqliteStorePort(file.store, {
    sweep: () => processing.pipeline.sweep(),
    nudge: () => processing.sender.nudge(),
  });
  return {
    cluster: null,
    sqlite: { ...processing, leadership },
    afterStore: (id, event) => {
      if (event.status === 'pending')
        processing.pipeline.enqueue(
          id,
          workKeyOf({ id, nu_proposta: event.nuProposta, request_id: event.requestId }),
        );
    },
    start: () => leadership.start(),
    sharedAnswers: undefined,
    http: {
      isProcessing: () => leadership.isHolder,
      pipeline: processing.pipeline,
      storePort,
      // One person's data (issue 45): the file, its backups and the erasure journal beside it.
      subjects: subjectsOnServer(config, storePort, null),
    },
    nudgeSender: () => processing.sender.nudge(),
    // Stops processing (waiting for the running turn), then hands the lease to a standby.
    stop: () => leadership.stop(),
  };
}

/** The handlers (life cycle, registry results, the partner's), the pipeline, the sender and the poller. */
function buildProcessing(
  config: Config,
  options: StartOptions,
  file: SqliteFile,
  shared: SharedParts & { holder: string },
): Omit<SqliteProcessing, 'leadership'> {
  const { clock, metrics, answers, schedule, holder } = shared;
  const { store, pipelineDb } = file;
  const { logger } = options;
  const { traces } = shared;
  // Every stage is the event step's (core/event-step.ts): the built-ins, the partner's handlers
  // (configureHandlers, file.partners) and the outbox.
  const partners = file.partners(shared.partner);
  const lease = processingLease(pipelineDb);
  const sender = buildSender(config, options, {
    answers,
    metrics: shared.senderMetrics,
    tracing: shared.tracing,
  });
  const pipeline = new Pipeline(pipelineDb, {
    onError: (_err, event) => metrics.handlerFailures.inc({ evento: event.evento ?? event.kind }),
    onCommitted: () => {
      sender.nudge();
      // Long-polls of the change feed, woken after every pipeline commit.
      shared.feedWaiters.notify();
    },
    maxAttempts: config.handlerMaxAttempts,
    gate: answers,
    fence: (now) => lease.isHeldBy(holder, now.toISOString()),
    clock,
    logger,
    backoff: options.handlerBackoff,
    sweepIntervalMs: options.sweepIntervalMs,
    partners,
    stages: { schedule, outbox: config.forwarding },
    traces,
    metrics: {
      processed: (evento, outcome) => metrics.eventsProcessed.inc({ evento, outcome }),
      depth: (n) => metrics.queueDepth.set(n),
    },
  });
  const { serviceClient } = shared;
  const poller =
    serviceClient === null
      ? null
      : new RegistryPoller(store.db, store.events, serviceClient, {
          schedule,
          clock,
          logger,
          tickMs: options.pollTickMs,
          onPoll: (outcome) => metrics.polls.inc({ outcome }),
          onStored: (eventId, requestId) =>
            pipeline.enqueue(eventId, workKeyOf({ id: eventId, nu_proposta: null, request_id: requestId })),
        });
  answers.backlogFrom(() => sqliteBacklog(file.forwardGauges, pipeline));
  return { pipeline, poller, sender };
}

/**
 * The forwarding sender, in a worker thread: sending takes a core of its own instead of the event
 * loop that answers the service (see sender-thread.ts). The thread reads the outbox and writes its
 * attempts' records on a connection of its own, when no answer is being made.
 */
function buildSender(
  config: Config,
  options: StartOptions,
  deps: { metrics: SenderMetrics; answers: AnswerFirst; tracing: TracingSettings | null },
): SenderControl {
  return new ForwardSenderThread({
    store: { kind: 'sqlite', databasePath: config.databasePath },
    destinations: config.forwarding.destinations,
    logger: options.logger,
    pollIntervalMs: options.forwardPollMs,
    metrics: deps.metrics,
    gate: deps.answers,
    tracing: deps.tracing,
  });
}

/**
 * Cluster mode (contract §10): this replica acknowledges from its SQLite file (the spool) as
 * always; the ClusterNode relays the spool to PostgreSQL and runs processing there.
 */
export function clusterMode(config: Config, cluster: ClusterConfig, options: StartOptions): ReceiverMode {
  return {
    partnerHandlers: () => partnerRouter(options),
    open: () => openCluster(config, cluster, options),
  };
}

function openCluster(config: Config, cluster: ClusterConfig, options: StartOptions): LocalFile {
  // One spool, one replica; a second one on the same file stops here (spool-lock.ts).
  const spoolLock = config.databasePath === ':memory:' ? null : lockSpool(config.databasePath);
  const store = openMigratedOrRelease(config, options.logger, spoolLock);
  const spool = openSpool(store.db);
  // As the last /metrics read them from PostgreSQL (the spool has no outbox).
  const forwarding: { gauges: DestinationGauges[] } = { gauges: [] };
  return {
    store,
    gauges: { forwardingGauges: () => forwarding.gauges, relayBacklog: () => spool.backlog() },
    compose: (shared) => composeCluster(config, cluster, options, { store, spool, forwarding, shared }),
    close: () => {
      store.close();
      spoolLock?.release();
    },
  };
}

function composeCluster(
  config: Config,
  cluster: ClusterConfig,
  options: StartOptions,
  deps: { store: Store; spool: Spool; forwarding: { gauges: DestinationGauges[] }; shared: SharedParts },
): ModeParts {
  const { store, spool, forwarding, shared } = deps;
  const { metrics } = shared;
  // The overload line's backlog: what this replica's spool holds for the relay.
  shared.answers.backlogFrom(() => ({ spool: spool.backlog().count }));
  // Issue 36: what this replica acknowledges is ordered on PostgreSQL's clock as it estimates it.
  const orderClock = new OrderClock(shared.clock);
  const inFlight = new InFlightRequests(() => orderClock.stamp());
  const node = buildCluster(config, cluster, options, { ...shared, spool, inFlight, orderClock });
  // RETENTION_DAYS on this replica's spool: local, so from start whether PostgreSQL answers or not.
  let spoolRetention: { stop(): void } | null = null;
  const days = config.retentionDays;
  const erasures = spoolErasures(node, store, options.logger);
  let subjectIndex: { stop(): void } | null = null;
  return {
    cluster: node,
    sqlite: null,
    afterStore: () => node.nudge(),
    start: () => {
      node.start();
      erasures.start();
      subjectIndex ??= scheduleSubjectIndex(
        adminStore(node.storePort).subjects,
        options.logger,
        () => node.connected,
      );
      if (days !== undefined)
        spoolRetention ??= scheduleRetention(spoolPass(spool), {
          days,
          clock: shared.clock,
          logger: options.logger,
          fields: { replica: cluster.replicaId },
          failure: RETENTION_FAILED.spool,
        });
    },
    // The delivery alarm reads every replica's answers (the service counts failures at all of them).
    sharedAnswers: () => node.sharedAnswers(),
    http: {
      isProcessing: () => node.processing,
      readiness: () => node.readiness(),
      // The admin API and the console on PostgreSQL; the console's overview shows this replica's relay.
      storePort: node.storePort,
      // One person's data (issue 45): PostgreSQL's log, and this replica's spool.
      subjects: subjectsOnServer(config, node.storePort, sqliteStorePort(store)),
      relay: spool,
      sharedGauges: (cutoffs) => {
        // A replica processes once connected with its kick workers: an ingest-only one
        // (CLUSTER_CONCURRENCY=0) reports 0, so ConsigNoProcessingHolder sees a cluster without workers.
        metrics.clusterConnected.set(node.connected ? 1 : 0);
        metrics.schemaCompatible.set(node.schemaCompatible ? 1 : 0);
        metrics.processingHolder.set(node.processing ? 1 : 0);
        return node
          .sharedGauges((q) => storeGauges(q, cutoffs))
          .then((figures) => {
            if (figures?.forwarding) forwarding.gauges = figures.forwarding;
            return figures;
          });
      },
      inFlight,
    },
    // The log the admin API and the console change is PostgreSQL's: its forwarder hears the NOTIFY.
    nudgeSender: () => undefined,
    // The relay finishes its batch, the workers their kicks (the rest is taken over).
    stop: (timeoutMs) => {
      spoolRetention?.stop();
      erasures.stop();
      subjectIndex?.stop();
      return node.stop(timeoutMs);
    },
  };
}

/**
 * Erasures made anywhere reach this replica's spool (issue 45, subject-places.ts
 * `applyErasuresToSpool`): every {@link SPOOL_ERASURES_EVERY_MS} while connected, never two at once.
 */
function spoolErasures(node: ClusterNode, store: Store, logger: Logger) {
  const log = adminStore(node.storePort).subjects;
  const spool = adminStore(sqliteStorePort(store)).subjects;
  let running = false;
  let timer: NodeJS.Timeout | null = null;
  const run = async () => {
    if (running || !node.connected) return;
    running = true;
    try {
      await applyErasuresToSpool(log, spool, logger);
    } catch (err) {
      logger.warn(
        { err: (err as Error).message },
        'privacy: could not apply the erasures to the spool; trying again',
      );
    } finally {
      running = false;
    }
  };
  return {
    start: () => {
      timer ??= setInterval(() => void run(), SPOOL_ERASURES_EVERY_MS).unref();
    },
    stop: () => {
      if (timer !== null) clearInterval(timer);
      timer = null;
    },
  };
}

/** The partner's handlers (configureHandlers). */
function partnerRouter(options: StartOptions): HandlerRouter | undefined {
  const router = new HandlerRouter();
  options.configureHandlers?.(router);
  return router.empty ? undefined : router;
}

/** openMigrated, giving the spool's lock back when the file cannot be used (a test's process goes on). */
function openMigratedOrRelease(config: Config, logger: Logger, spoolLock: SpoolLock | null): Store {
  try {
    return openMigrated(config, logger, () => {});
  } catch (err) {
    spoolLock?.release();
    throw err;
  }
}

/**
 * The SQLite file, migrated (then `migrated` runs on it). The first connection the receiver opens
 * to it: a file or companion readable by others is tightened to 0600 here (store/file-mode.ts),
 * told in one log line naming the path.
 */
function openMigrated(config: Config, logger: Logger, migrated: (store: Store) => void): Store {
  const store = openStore(config.databasePath, {
    // MIGRATE_ON_START=false (issue 46): a SQLite log behind is refused, naming what it lacks. A
    // replica's spool is its own (no other process or version opens it): always migrated, so a new
    // volume needs no step of its own.
    migrate: config.migrateOnStart || config.cluster !== null,
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

/**
 * SQLite mode's pipeline has its own connection. synchronous=NORMAL is safe there: a pipeline
 * commit lost to a power cut rolls back the handler effects together with the `done` mark (one
 * transaction), so the event is simply processed again. Acknowledged deliveries keep the store's FULL.
 */
function openPipelineDb(config: Config): Db {
  return openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
}

/**
 * SQLite mode's console sessions are in its file (cluster mode's: ClusterNode, on PostgreSQL).
 * Those opened by a token that is no longer configured for their role (rotated or removed) end at
 * start, before anything listens: their next request signs them out anyway (http/console/console-auth.ts),
 * this removes them from the log at once.
 */
function endRotatedSessions(config: Config, store: Store, logger: Logger): void {
  const fps = consoleFingerprints(config);
  // Synchronous, as the store is opened: the console's own statement (domain/sql/console-session-statements.ts).
  const ended = prepareShared(store.db, END_OTHER_SESSIONS).run(endOtherSessionsParams(fps));
  if (ended > 0) logger.info({ ended }, 'console: sessions of rotated or removed tokens ended');
}

/**
 * The backlog the overload line and the console show in SQLite mode: events waiting for this
 * process's pipeline, messages waiting to be sent (index-only counts, read once per window).
 */
function sqliteBacklog(forwardGauges: () => DestinationGauges[], pipeline: Pipeline): Record<string, number> {
  return { events: pipeline.depth, forward_pending: forwardGauges().reduce((n, g) => n + g.pending, 0) };
}

/**
 * The configured destinations' gauges on `db`, read synchronously (`/metrics`, the overload line):
 * the statement written once for both stores (core/sender-queries.ts), prepared here once.
 */
function sqliteForwardGauges(db: Db, config: Config): () => DestinationGauges[] {
  const names = config.forwarding.destinations.map((d) => d.name);
  if (names.length === 0) return () => [];
  const { text, params } = destinationGaugesQuery(sqliteDialect, names);
  const statement = prepareShared<DestinationGauges>(db, text);
  return () => statement.all(params);
}

/** The partner's handlers, and the connection their events run on. */
function sqlitePartners(config: Config, partner: HandlerRouter | undefined): PartnerHandlers | undefined {
  if (partner === undefined) return undefined;
  const db = openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  return { partner, db };
}

/**
 * Processing runs only while this process holds the lease (interface §6.1 makes a lost webhook
 * costly; two processors on one file record each other's events as late): the pipeline recovers
 * everything pending in the file, the poller and retention start; losing the lease stops them.
 */
function buildLeadership(
  config: Config,
  logger: Logger,
  store: Store,
  shared: SharedParts & { holder: string; processing: Omit<SqliteProcessing, 'leadership'> },
): ProcessingLeadership {
  const { clock, metrics, holder, processing } = shared;
  let retention: { stop(): void } | null = null;
  let subjectIndex: { stop(): void } | null = null;
  const subjects = adminStore(sqliteStorePort(store)).subjects;
  // Its own connection: a renewal that finds the file locked fails at once and is tried at the
  // next tick (the lease stays fresh until it expires).
  const leaseDb = openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  return new ProcessingLeadership(processingLease(leaseDb), {
    holder,
    ttlMs: config.processingLeaseMs,
    clock,
    logger,
    onGained: () => {
      metrics.processingHolder.set(1);
      processing.pipeline.start();
      processing.poller?.start();
      processing.sender.start();
      // A restored copy of the log erases again whom the journal beside it says were erased.
      subjectIndex = scheduleSubjectIndex(subjects, logger);
      void reapplyJournal(config.databasePath, subjects, logger).catch((err: unknown) =>
        logger.error({ err: (err as Error).message }, 'privacy: could not re-apply the erasure journal'),
      );
      if (config.retentionDays !== undefined)
        retention = scheduleRetention(storePass(sqliteStoreSql(store.db)), {
          days: config.retentionDays,
          clock,
          logger,
          failure: RETENTION_FAILED.log,
        });
    },
    onLost: async () => {
      metrics.processingHolder.set(0);
      retention?.stop();
      retention = null;
      subjectIndex?.stop();
      subjectIndex = null;
      await processing.poller?.stop(config.shutdownTimeoutMs);
      await processing.sender.stop(config.shutdownTimeoutMs);
      const finished = await processing.pipeline.stop(config.shutdownTimeoutMs);
      if (!finished)
        logger.warn('pipeline did not finish in time: unfinished events stay pending for the holder');
    },
    onStopped: () => leaseDb.close(),
  });
}

/**
 * Cluster mode's sending, in a thread of its own as in SQLite mode: the destinations' locks, the
 * `LISTEN` for new messages and a sender for each destination this replica holds
 * (cluster/forwarder.ts). An ingest-only replica (CLUSTER_CONCURRENCY=0) takes no destination; the
 * thread still listens, for the feed's long-polls, when the feed is on.
 */
function clusterSender(
  config: Config,
  cluster: ClusterConfig,
  options: StartOptions,
  deps: SharedParts,
): ForwardSenderThread | undefined {
  const { destinations, feedEnabled } = config.forwarding;
  if (destinations.length === 0 && !feedEnabled) return undefined;
  const { metrics } = deps;
  return new ForwardSenderThread({
    store: {
      kind: 'postgres',
      databaseUrl: cluster.databaseUrl,
      replicaId: cluster.replicaId,
      limits: cluster.limits,
    },
    destinations: cluster.concurrency === 0 ? [] : destinations,
    logger: options.logger,
    pollIntervalMs: options.forwardPollMs,
    metrics: deps.senderMetrics,
    gate: deps.answers,
    tracing: deps.tracing,
    // A destination another replica now sends: its circuit is that replica's to report.
    onHeld: (destination, held) => {
      if (!held) metrics.forwardCircuit.set({ destination }, 0);
    },
    onNotify: feedEnabled ? () => deps.feedWaiters.notify() : undefined,
  });
}

/** The ClusterNode: the relay of the spool to PostgreSQL, the workers, retention and forwarding there. */
function buildCluster(
  config: Config,
  cluster: ClusterConfig,
  options: StartOptions,
  deps: SharedParts & { spool: Spool; inFlight: InFlightRequests; orderClock: OrderClock },
): ClusterNode {
  const { clock, metrics } = deps;
  return new ClusterNode({
    ...cluster,
    maxAttempts: config.handlerMaxAttempts,
    backoff: options.handlerBackoff ?? { baseMs: 1000, maxMs: 600_000 },
    schedule: deps.schedule,
    spool: deps.spool,
    oldestInFlight: () => deps.inFlight.oldest(),
    orderClock: deps.orderClock,
    gate: deps.answers,
    statusClient: deps.serviceClient,
    handlers: deps.partner,
    traces: deps.traces,
    // RETENTION_DAYS on PostgreSQL, once an hour cluster-wide (the spool's is composeCluster's).
    retention: config.retentionDays === undefined ? undefined : { days: config.retentionDays },
    outbox: { destinations: config.forwarding.destinations, feedEnabled: config.forwarding.feedEnabled },
    consoleTokens: consoleFingerprints(config),
    migrateOnStart: config.migrateOnStart,
    sender: clusterSender(config, cluster, options, deps),
    logger: options.logger,
    now: () => clock.now(),
    metrics: {
      relayed: (_rows, delays) => {
        for (const d of delays) metrics.relayDelay.observe(d);
      },
      spoolReplaced: () => metrics.relaySpoolReplaced.set(1),
      relayError: () => metrics.relayErrors.inc(),
      processed: (evento, outcome) => metrics.eventsProcessed.inc({ evento, outcome }),
      handlerFailure: (evento) => metrics.handlerFailures.inc({ evento }),
      poll: (outcome) => metrics.polls.inc({ outcome }),
      beat: (beat) => {
        const at = beat.watermark.at;
        const now = deps.orderClock.now() ?? clock.now();
        metrics.watermarkLag.set(at === null ? 0 : Math.max(0, (now.getTime() - at.getTime()) / 1000));
        metrics.watermarkWaiting.set(beat.watermark.waiting.length);
        metrics.clockOffset.set(beat.clockOffsetMs / 1000);
        if (beat.reading !== null) clockReadingMetrics(metrics, beat.reading);
      },
      late: (rows) => metrics.relayedLate.inc(rows),
      gap: (_gap, resend) => {
        metrics.relayGaps.inc();
        metrics.relayResent.inc(resend);
      },
    },
  });
}

/** A heartbeat's reading of PostgreSQL's clock, into the metrics (issue 36, cluster/order-clock.ts). */
function clockReadingMetrics(metrics: Metrics, r: OrderReading): void {
  metrics.clockUncertainty.set(r.uncertaintyMs / 1000);
  if (r.wallStepMs !== null) metrics.clockSteps.inc({ clock: 'wall' });
  if (r.orderStepMs !== null) {
    metrics.clockSteps.inc({ clock: 'order' });
    metrics.clockStepDeliveries.inc(r.stampedOnStep);
  }
}
