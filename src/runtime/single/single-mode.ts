import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../../config';
import { adminStore } from '../../core/store-port';
import { destinationGaugesQuery } from '../../core/sender-queries';
import { consoleFingerprints } from '../../domain/console';
import type { HandlerRouter } from '../../domain/event-router';
import type { DestinationGauges } from '../../domain/forwarding/sender-store';
import { sqliteDialect } from '../../domain/sql/dialect';
import { END_OTHER_SESSIONS, endOtherSessionsParams } from '../../domain/sql/console-session-statements';
import { workKeyOf } from '../../domain/work-key';
import type { SenderMetrics } from '../../forwarding/sender';
import type { Logger } from '../../logger';
import { type Db, EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase } from '../../sqlite/database';
import { processingLease } from '../../sqlite/processing-lease';
import { sqliteStorePort } from '../../sqlite/sqlite-port';
import { prepareShared } from '../../sqlite/sqlite-prepare';
import { sqliteStoreSql } from '../../sqlite/sqlite-statements';
import type { Store } from '../../sqlite/store';
import type { StartOptions } from '../../start-options';
import type { SqliteTarget } from '../../store-factory';
import { reapplyJournal, scheduleSubjectIndex, subjectsOnServer } from '../../subject-places';
import type { TracingSettings } from '../../tracing';
import type { AnswerFirst } from '../answer-first';
import {
  type LocalFile,
  type ModeParts,
  openMigrated,
  partnerRouter,
  type ReceiverMode,
  type Runtime,
  type SharedParts,
} from '../receiver-mode';
import { RETENTION_FAILED, scheduleRetention, storePass } from '../retention-schedule';
import { ForwardSenderThread } from '../sender-thread';
import { ProcessingLeadership } from './leadership';
import { type PartnerHandlers, Pipeline } from './pipeline';
import { RegistryPoller } from './poller';

/*
 * SQLite mode (runtime/receiver-mode.ts's interface): the file is the log, and this process
 * processes it while it holds the processing lease: the pipeline, the registry poller and the
 * forwarding sender's thread, started and stopped by the lease (leadership.ts).
 */

/**
 * SQLite mode's processing, on the file: the pipeline, the registry poller and the forwarding
 * sender, run while this process holds the processing lease.
 */
interface SqliteProcessing {
  readonly pipeline: Pipeline;
  readonly poller: RegistryPoller | null;
  /** Sends the outbox's messages to the configured destinations (contract §8), in a thread. */
  readonly sender: ForwardSenderThread;
  /** Whether this process holds the processing lease (several receivers may share one file). */
  readonly leadership: ProcessingLeadership;
}

/** SQLite mode: the file is the log, and processing runs on it while this process holds the lease. */
export function sqliteMode(config: Config, target: SqliteTarget, options: StartOptions): ReceiverMode {
  return {
    partnerHandlers: () => partnerRouter(options),
    open: () => openSqlite(config, target, options),
  };
}

function openSqlite(config: Config, target: SqliteTarget, options: StartOptions): LocalFile {
  const store = openMigrated(config, options.logger, config.migrateOnStart, (s) =>
    endRotatedSessions(config, s, options.logger),
  );
  const pipelineDb = openPipelineDb(config);
  const forwardGauges = sqliteForwardGauges(pipelineDb, config);
  let partnerDb: Db | null = null;
  const file: SqliteFile = {
    target,
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
  /** The file, as the store factory named it (the sender's thread opens it too). */
  target: SqliteTarget;
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
  let stopped = false;
  return {
    runtime: sqliteRuntime({ ...processing, leadership }, () => stopped),
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
      subjects: subjectsOnServer(storePort, null),
    },
    nudgeSender: () => processing.sender.nudge(),
    // Stops processing (waiting for the running turn), then hands the lease to a standby.
    stop: () => {
      stopped = true;
      return leadership.stop();
    },
  };
}

/** SQLite mode's processing as Receiver.runtime shows it. */
function sqliteRuntime(p: SqliteProcessing, stopped: () => boolean): Runtime {
  return {
    get state() {
      return stopped() ? 'stopped' : 'running';
    },
    get processing() {
      return p.leadership.isHolder;
    },
    readiness: () => ({ ready: true, ordered: true }),
    sender: p.sender,
    nudge: () => p.pipeline.sweep(),
    workerQueues: () => [],
    pollsSettled: async () => {
      await p.poller?.onIdle();
    },
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
  const sender = buildSender(config, options, file.target, {
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
  target: SqliteTarget,
  deps: { metrics: SenderMetrics; answers: AnswerFirst; tracing: TracingSettings | null },
): ForwardSenderThread {
  return new ForwardSenderThread({
    store: target,
    destinations: config.forwarding.destinations,
    logger: options.logger,
    pollIntervalMs: options.forwardPollMs,
    metrics: deps.metrics,
    gate: deps.answers,
    tracing: deps.tracing,
  });
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
