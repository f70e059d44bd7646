import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import { serviceClientFromConfig, type ServiceClient } from './client';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import { registerInOrder } from './domain/handler-order';
import { tokenFingerprints } from './domain/console';
import type { PollScheduleOptions } from './domain/registry';
import { ForwardSender, type SenderMetrics } from './forwarding/sender';
import { ForwardSenderThread, type SenderControl } from './forwarding/sender-thread';
import type { DestinationGauges } from './domain/forwarding/sender-store';
import { forwardingHandler } from './handlers/forwarding';
import { lifecycleHandler } from './handlers/lifecycle';
import { registryHandlers } from './handlers/registry';
import { ClusterEventRouter, fromClusterHandler, HandlerRouter } from './domain/event-router';
import { EventRouter } from './handlers/router';
import { type DeliveryWatch, startDeliveryWatch } from './http/delivery-watch';
import type { AppDeps } from './http/app';
import { FeedWaiters } from './http/admin/feed-waiters';
import { createHttpServer } from './http/server';
import { InFlightRequests } from './http/in-flight';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import type { DeferralPolicy } from './domain/answer-first';
import { AnswerFirst } from './pipeline/answer-first';
import { ProcessingLeadership } from './pipeline/leadership';
import { type PartnerHandlers, type Step, StepRouter } from './pipeline/partner-event';
import { Pipeline, workKey } from './pipeline/pipeline';
import { scheduleRetention } from './pipeline/retention-schedule';
import { RegistryPoller } from './registry/poller';
import { type Db, EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase, setBusyTimeout } from './store/database';
import { IngestWriter } from './store/ingest-writer';
import type { NewEvent } from './store/events';
import { openSpool, type Spool } from './store/spool';
import { lockSpool, type SpoolLock } from './store/spool-lock';
import { consoleSessionsRepo } from './store/console-sessions';
import { ClusterNode } from './cluster/node';
import { pgConsoleLog } from './cluster/pg-console-log';
import { SQLITE_DRIVER } from './store/sqlite-driver';
import { forwardDeliveries } from './store/forward-deliveries';
import { processingLease } from './store/processing-lease';
import { openStore, type Store } from './store/store';

/** The composition root: builds the store, the writer, the pipeline, the poller and the HTTP server, and stops them. */
export interface Receiver {
  readonly server: Server;
  readonly url: string;
  readonly store: Store;
  readonly writer: IngestWriter;
  readonly metrics: Metrics;
  readonly pipeline: Pipeline;
  readonly router: EventRouter;
  readonly poller: RegistryPoller | null;
  /** Sends the outbox's messages to the configured destinations (contract §8). */
  readonly sender: SenderControl;
  /** Whether this process holds the processing lease (several receivers may share one file). */
  readonly leadership: ProcessingLeadership;
  /** Cluster mode's relay and workers (DATABASE_URL); null on SQLite alone. */
  readonly cluster: ClusterNode | null;
  /** Answers first (issue 23): background work waits while webhook answers are being made. */
  readonly answers: AnswerFirst;
  /** Stops accepting, finishes in-flight requests and their commits, closes the database. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  /** @default the system clock */
  clock?: Clock;
  /**
   * A partner's own handlers, written once for both modes: `router.on(name, async (event, { sql,
   * now, logger }) => …)`, each awaited inside the event's transaction (SQLite mode: its own
   * transaction on the file; cluster mode: the event's savepoint of the kick), after the built-in
   * handlers and before forwarding, writing with `sql.query(text, [$1, $2…])` (docs/handlers.md).
   * @default none
   */
  configureHandlers?: (router: HandlerRouter) => void;
  /**
   * SQLite mode's synchronous handlers on the pipeline's connection. A receiver given these and no
   * `configureClusterRouter` refuses to start in cluster mode rather than skip them, and refuses
   * them beside `configureHandlers`.
   * @deprecated use `configureHandlers`, which runs in both modes; a warning says so at start.
   */
  configureRouter?: (router: EventRouter, db: Db) => void;
  /**
   * Cluster mode's asynchronous handlers, whose `sql.query` answers the rows alone.
   * @deprecated use `configureHandlers` (the same handlers, `sql.query` answering `{ rows }`), which
   * runs in both modes; a warning says so at start.
   */
  configureClusterRouter?: (router: ClusterEventRouter) => void;
  /** Handler retry backoff (tests shorten it). @default 1 s … 10 min */
  handlerBackoff?: { baseMs: number; maxMs: number };
  /** @default 1000 ms */
  sweepIntervalMs?: number;
  /**
   * The service's API (status query for the poller, averbação start for the admin route).
   * @default built from SERVICE_* (none when SERVICE_BASE_URL is unset)
   */
  serviceClient?: ServiceClient | null;
  /** Poller tick (tests shorten it). @default 1000 ms */
  pollTickMs?: number;
  /** How often the sender looks at each destination without a nudge (tests shorten it). @default 1000 ms */
  forwardPollMs?: number;
  /** How long background work may be held by the answers before it gets a slice anyway. @default DEFAULT_DEFERRAL */
  deferral?: DeferralPolicy;
}

/** What processes stored events: the router of handlers, the pipeline and the registry poller. */
interface Processing {
  router: EventRouter;
  pipeline: Pipeline;
  poller: RegistryPoller | null;
  serviceClient: ServiceClient | null;
  sender: SenderControl;
  /** Answers first (issue 23): what background work waits on while answers are being made. */
  answers: AnswerFirst;
  /** The connection of the events a partner's handler handles (SQLite mode with configureHandlers). */
  partnerDb: Db | null;
}

export async function startReceiver(config: Config, options: StartOptions): Promise<Receiver> {
  const { logger } = options;
  const clock = options.clock ?? systemClock;
  refuseSqliteOnlyHandlers(config, options);
  warnDeprecatedHandlers(options);
  const partner = partnerHandlers(config, options);
  const { spoolLock, store, pipelineDb, spool } = openLocal(config, logger);
  const { metrics, clusterForwarding, answers } = buildMetrics(config, options, { pipelineDb, spool, clock });
  const holder = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`; // in the processing lease
  const feedWaiters = new FeedWaiters(); // long-polls of the change feed, woken after every pipeline commit
  const processing = buildProcessing(config, options, {
    clock,
    metrics,
    store,
    pipelineDb,
    holder,
    answers,
    partner,
    onCommitted: () => feedWaiters.notify(),
  });
  const inFlight = spool === null ? undefined : new InFlightRequests();
  const cluster =
    spool &&
    buildCluster(config, options, { clock, metrics, processing, feedWaiters, inFlight, spool, partner });
  const writer = buildWriter(config, store, metrics, logger, clock, afterStore(processing.pipeline, cluster));
  const leadership = buildLeadership(config, { clock, logger, metrics, store, holder }, processing);
  // Cluster mode: processing runs on PostgreSQL (pg-boss), not on this file: no lease to take.
  if (cluster === null) leadership.start();
  else cluster.start();
  // interface §6.1, rule 4: the run of failed answers, stored across restarts, and the silence check;
  // in cluster mode, read from every replica's answers (the service counts failures at all of them).
  const shared = cluster ? () => cluster.sharedAnswers() : undefined;
  const deliveryWatch = startDeliveryWatch(config, { metrics, logger, clock, shared });

  const parts = {
    ...{ store, writer, metrics, logger, clock, processing, deliveryWatch, feedWaiters, leadership },
    ...{ cluster, spool, clusterForwarding, inFlight, answers, pipelineDb, spoolLock },
    partnerDb: processing.partnerDb,
  };
  const server = buildServer(config, parts);
  const release = releaser(parts);
  let url: string;
  try {
    url = await listen(server, config, logger);
  } catch (err) {
    // Not listening (e.g. the port is taken): give the lease back at once rather than make a
    // standby wait for it to expire, and close what was opened.
    feedWaiters.close();
    await release(1000);
    throw err;
  }

  const close = closeOnce(async () => {
    // Long-polls answer now (empty), so that they do not hold the shutdown for up to 30 s.
    feedWaiters.close();
    await closeServer(server, config.shutdownTimeoutMs, logger);
    await release(config.shutdownTimeoutMs);
    logger.info('consig-receiver stopped');
  });
  const { router, pipeline, poller, sender } = processing;
  return {
    server,
    url,
    store,
    writer,
    metrics,
    pipeline,
    router,
    poller,
    sender,
    leadership,
    cluster,
    answers,
    close,
  };
}

/**
 * The backlog the overload line and the console show in SQLite mode: events waiting for this
 * process's pipeline, messages waiting to be sent (index-only counts, read once per window).
 */
function sqliteBacklog(pipelineDb: Db, config: Config, pipeline: Pipeline): Record<string, number> {
  const names = config.forwarding.destinations.map((d) => d.name);
  const gauges = names.length === 0 ? [] : forwardDeliveries(pipelineDb).gauges(names);
  return { events: pipeline.depth, forward_pending: gauges.reduce((n, g) => n + g.pending, 0) };
}

/**
 * The metrics, their forwarding gauges read from the file or (cluster mode) from PostgreSQL, and
 * the answers-first gate (issue 23: background work waits while a webhook answer is being made),
 * which counts its deferral in them.
 */
function buildMetrics(
  config: Config,
  options: StartOptions,
  deps: { pipelineDb: Db; spool: Spool | null; clock: Clock },
): { metrics: Metrics; clusterForwarding: { gauges: DestinationGauges[] }; answers: AnswerFirst } {
  const { spool, clock } = deps;
  const answers = new AnswerFirst({
    monotonic: () => clock.monotonic(),
    logger: options.logger,
    policy: options.deferral,
    onDeferred: (seconds) => metrics.backgroundDeferredSeconds.inc(seconds),
  });
  answers.start();
  const forwardGauges = forwardDeliveries(deps.pipelineDb);
  const destinationNames = config.forwarding.destinations.map((d) => d.name);
  const clusterForwarding: { gauges: DestinationGauges[] } = { gauges: [] };
  const metrics = createMetrics({
    // Cluster mode: as the last /metrics read them from PostgreSQL (the spool has no outbox).
    forwardingGauges: () =>
      spool === null ? forwardGauges.gauges(destinationNames) : clusterForwarding.gauges,
    nowMs: () => clock.now().getTime(),
    relayBacklog: spool === null ? undefined : () => spool.backlog(),
    deferring: () => answers.snapshot().deferring,
  });
  return { metrics, clusterForwarding, answers };
}

/**
 * Processing runs only while this process holds the lease (interface §6.1 makes a lost webhook
 * costly; two processors on one file record each other's events as late): the pipeline recovers
 * everything pending in the file, the poller and retention start; losing the lease stops them.
 */
function buildLeadership(
  config: Config,
  deps: { clock: Clock; logger: Logger; metrics: Metrics; store: Store; holder: string },
  processing: Processing,
): ProcessingLeadership {
  const { clock, logger, metrics, store, holder } = deps;
  let retention: { stop(): void } | null = null;
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
      if (config.retentionDays !== undefined)
        retention = scheduleRetention(store.db, config.retentionDays, clock, logger);
    },
    onLost: async () => {
      metrics.processingHolder.set(0);
      retention?.stop();
      retention = null;
      await processing.poller?.stop(config.shutdownTimeoutMs);
      await processing.sender.stop(config.shutdownTimeoutMs);
      const finished = await processing.pipeline.stop(config.shutdownTimeoutMs);
      if (!finished)
        logger.warn('pipeline did not finish in time: unfinished events stay pending for the holder');
    },
    onStopped: () => leaseDb.close(),
  });
}

/** The handlers (life cycle, registry results, the partner's), the pipeline and the poller. */
function buildProcessing(
  config: Config,
  options: StartOptions,
  deps: {
    clock: Clock;
    metrics: Metrics;
    store: Store;
    pipelineDb: Db;
    holder: string;
    answers: AnswerFirst;
    /** The partner's handlers (configureHandlers), when it registered any. */
    partner: HandlerRouter | undefined;
    /** After each pipeline commit, besides nudging the sender. */
    onCommitted: () => void;
  },
): Processing {
  const { clock, metrics, store, pipelineDb, holder } = deps;
  const { logger } = options;
  const schedule = pollSchedule(config);
  const router = registerInOrder(new EventRouter(), {
    ...builtInHandlers(config, pipelineDb, schedule),
    partner: (r) => options.configureRouter?.(r, pipelineDb),
  });
  const partners = sqlitePartners(config, deps.partner, schedule);
  router.onError((_err, event) => metrics.handlerFailures.inc({ evento: event.evento ?? event.kind }));
  const lease = processingLease(pipelineDb);
  const sender = buildSender(config, options, { metrics, pipelineDb, answers: deps.answers });
  const pipeline = new Pipeline(pipelineDb, router, {
    onCommitted: () => {
      sender.nudge();
      deps.onCommitted();
    },
    maxAttempts: config.handlerMaxAttempts,
    gate: deps.answers,
    fence: (now) => lease.isHeldBy(holder, now.toISOString()),
    clock,
    logger,
    backoff: options.handlerBackoff,
    sweepIntervalMs: options.sweepIntervalMs,
    partners,
    metrics: {
      processed: (evento, outcome) => metrics.eventsProcessed.inc({ evento, outcome }),
      depth: (n) => metrics.queueDepth.set(n),
    },
  });
  const serviceClient =
    options.serviceClient === undefined
      ? serviceClientFromConfig(config, logger, { onTokenRefresh: () => metrics.tokenRefreshes.inc() })
      : options.serviceClient;
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
            pipeline.enqueue(eventId, workKey({ id: eventId, nu_proposta: null, request_id: requestId })),
        });
  if (serviceClient === null)
    logger.info('SERVICE_BASE_URL unset: registry poller off (registry results come by webhook only)');
  deps.answers.backlogFrom(() => sqliteBacklog(pipelineDb, config, pipeline));
  return {
    ...{ router, pipeline, poller, serviceClient, sender },
    answers: deps.answers,
    partnerDb: partners?.db ?? null,
  };
}

/** The built-in handlers on `db`, each the stage of domain/handler-order.ts it is. */
function builtInHandlers(config: Config, db: Db, schedule: PollScheduleOptions) {
  const registry = registryHandlers(db, schedule);
  return {
    lifecycle: lifecycleHandler(db),
    registry_tracking: registry.trackFromEvent,
    registry_results: registry.result,
    forwarding: forwardingHandler(db, config.forwarding.destinations, {
      feedEnabled: config.forwarding.feedEnabled,
    }),
  };
}

/**
 * SQLite mode with a partner's handlers (configureHandlers): the connection their events run on
 * and every handler of those events on it, in order (pipeline/partner-event.ts).
 */
function sqlitePartners(
  config: Config,
  partner: HandlerRouter | undefined,
  schedule: PollScheduleOptions,
): PartnerHandlers | undefined {
  if (config.cluster !== null || partner === undefined) return undefined;
  const db = openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  const steps = registerInOrder<Step, StepRouter>(new StepRouter(), {
    ...builtInHandlers(config, db, schedule),
    partner: (r) => r.adopt(partner, (h): Step => h),
  });
  return { partner, steps, db };
}

/**
 * The forwarding sender, in a worker thread: sending takes a core of its own instead of the event
 * loop that answers the service (see sender-thread.ts). The thread reads the outbox on its own
 * connection; what it records is written here, on the pipeline's connection, between turns.
 */
function buildSender(
  config: Config,
  options: StartOptions,
  deps: { metrics: Metrics; pipelineDb: Db; answers: AnswerFirst },
): SenderControl {
  const deliveries = forwardDeliveries(deps.pipelineDb);
  return new ForwardSenderThread({
    databasePath: config.databasePath,
    destinations: config.forwarding.destinations,
    logger: options.logger,
    pollIntervalMs: options.forwardPollMs,
    record: (records, circuits) => deliveries.record(records, circuits),
    metrics: senderMetrics(deps.metrics),
    gate: deps.answers,
  });
}

/** The sender's reports as metrics (both modes). */
function senderMetrics(metrics: Metrics): SenderMetrics {
  const circuitValue = { closed: 0, half_open: 1, open: 2 } as const;
  return {
    attempt: (destination, outcome, seconds) => {
      metrics.forwardAttempts.inc({ destination, outcome });
      metrics.forwardAttemptSeconds.observe({ destination }, seconds);
    },
    delivered: (destination, seconds) => metrics.forwardDeliverySeconds.observe({ destination }, seconds),
    dead: (destination) => metrics.forwardDeadTotal.inc({ destination }),
    circuit: (destination, state) => metrics.forwardCircuit.set({ destination }, circuitValue[state]),
  };
}

/** The HTTP server: webhook routes, health, metrics, admin, console and the feed. */
function buildServer(
  config: Config,
  deps: Pick<AppDeps, 'store' | 'writer' | 'metrics' | 'logger' | 'clock' | 'inFlight'> & {
    processing: Processing;
    deliveryWatch: DeliveryWatch;
    feedWaiters: FeedWaiters;
    /** Cluster mode: where /metrics leaves the forwarding figures it read from PostgreSQL. */
    clusterForwarding: { gauges: DestinationGauges[] };
    leadership: ProcessingLeadership;
    cluster: ClusterNode | null;
    spool: Spool | null;
  },
): Server {
  const { processing, feedWaiters, leadership, cluster, spool, clusterForwarding, ...rest } = deps;
  return createHttpServer({
    ...rest,
    // Answers first: the webhook handler reports each answer; the console shows the deferral.
    answers: processing.answers,
    isProcessing: () => (cluster === null ? leadership.isHolder : cluster.processing),
    readiness: cluster === null ? undefined : () => cluster.readiness(),
    clusterLog: cluster?.adminLog,
    // The console on PostgreSQL's log; its overview shows this replica's relay.
    clusterConsole:
      cluster === null || spool === null ? undefined : { log: pgConsoleLog(cluster.adminLog), relay: spool },
    sharedGauges:
      cluster === null
        ? undefined
        : (cutoffs) => {
            // A replica processes once connected with its kick workers: an ingest-only one
            // (CLUSTER_CONCURRENCY=0) reports 0, so ConsigNoProcessingHolder sees a cluster without workers.
            rest.metrics.clusterConnected.set(cluster.connected ? 1 : 0);
            rest.metrics.processingHolder.set(cluster.processing ? 1 : 0);
            return cluster.sharedGauges(cutoffs).then((figures) => {
              if (figures?.forwarding) clusterForwarding.gauges = figures.forwarding;
              return figures;
            });
          },
    config,
    pipeline: processing.pipeline,
    registryGraceMs: config.registry.webhookGraceMs,
    serviceClient: processing.serviceClient,
    forwarding: {
      destinations: config.forwarding.destinations,
      feedFullCpf: config.forwarding.feedFullCpf,
      feedEnabled: config.forwarding.feedEnabled,
      waiters: feedWaiters,
      nudge: () => processing.sender.nudge(),
    },
  });
}

/** Stops what startReceiver started, in order, once the server no longer takes requests. */
function releaser(parts: {
  writer: IngestWriter;
  answers: AnswerFirst;
  deliveryWatch: DeliveryWatch;
  cluster: ClusterNode | null;
  leadership: ProcessingLeadership;
  pipelineDb: Db;
  partnerDb: Db | null;
  store: Store;
  spoolLock: SpoolLock | null;
}): (timeoutMs: number) => Promise<void> {
  return async (timeoutMs) => {
    parts.writer.close();
    parts.answers.stop();
    parts.deliveryWatch.stop();
    // Cluster mode: the relay finishes its batch, the workers their kicks (the rest is taken over).
    await parts.cluster?.stop(timeoutMs);
    // Stops processing (waiting for the running turn), then hands the lease to a standby.
    await parts.leadership.stop();
    parts.pipelineDb.close();
    parts.partnerDb?.close();
    parts.store.close();
    parts.spoolLock?.release();
  };
}

/** The local SQLite file (in cluster mode: the spool, locked first) and its connections. */
function openLocal(
  config: Config,
  logger: Logger,
): { spoolLock: SpoolLock | null; store: Store; pipelineDb: Db; spool: Spool | null } {
  // Cluster mode: one spool, one replica; a second one on the same file stops here (spool-lock.ts).
  const spoolLock =
    config.cluster === null || config.databasePath === ':memory:' ? null : lockSpool(config.databasePath);
  const { store, pipelineDb } = openFilesOrRelease(config, logger, spoolLock);
  const spool = config.cluster === null ? null : openSpool(store.db);
  return { spoolLock, store, pipelineDb, spool };
}

/** openFiles, giving the spool's lock back when the file cannot be used (a test's process goes on). */
function openFilesOrRelease(
  config: Config,
  logger: Logger,
  spoolLock: SpoolLock | null,
): { store: Store; pipelineDb: Db } {
  try {
    return openFiles(config, logger);
  } catch (err) {
    spoolLock?.release();
    throw err;
  }
}

/** The SQLite file, migrated, and the pipeline's own connection to it. */
function openFiles(config: Config, logger: Logger): { store: Store; pipelineDb: Db } {
  const store = openStore(config.databasePath, {
    migrate: true,
    synchronous: config.sqlite.synchronous,
    busyTimeoutMs: config.sqlite.busyTimeoutMs,
  });
  // SQLite mode's console sessions are in this file (cluster mode's: ClusterNode, on PostgreSQL).
  if (config.cluster === null) endRotatedSessions(config, store, logger);
  // Migrated (waiting as long as it takes for a receiver starting beside it): from now on no
  // connection of this process holds the event loop while another process has the write lock.
  setBusyTimeout(store.db, EVENT_LOOP_BUSY_TIMEOUT_MS);
  // The pipeline has its own connection. synchronous=NORMAL is safe there: a pipeline commit lost
  // to a power cut rolls back the handler effects together with the `done` mark (one transaction),
  // so the event is simply processed again. Acknowledged deliveries keep the store's FULL.
  const pipelineDb = openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  return { store, pipelineDb };
}

/**
 * Console sessions opened by a token that is no longer configured for their role (rotated or
 * removed) end at start, before anything listens: their next request signs them out anyway
 * (http/console/auth.ts), this removes them from the log at once.
 */
function endRotatedSessions(config: Config, store: Store, logger: Logger): void {
  const ended = consoleSessionsRepo(store.db).endOthers(
    tokenFingerprints({ admin: config.adminToken, viewer: config.viewerToken }),
  );
  if (ended > 0) logger.info({ ended }, 'console: sessions of rotated or removed tokens ended');
}

/** What follows a stored delivery: the pipeline queues it, or (cluster mode) the relay is woken. */
function afterStore(pipeline: Pipeline, cluster: ClusterNode | null): (id: number, event: NewEvent) => void {
  return (id, event) => {
    if (cluster !== null) cluster.nudge();
    else if (event.status === 'pending')
      pipeline.enqueue(id, workKey({ id, nu_proposta: event.nuProposta, request_id: event.requestId }));
  };
}

/**
 * Cluster mode (contract §10): this replica acknowledges from its SQLite file (the spool) as
 * always; the ClusterNode relays the spool to PostgreSQL and runs processing there.
 */
/**
 * A partner's handlers must not be skipped in silence: SQLite-mode ones cannot run in cluster mode,
 * nor beside configureHandlers' (an event of both would need them on two connections).
 */
function refuseSqliteOnlyHandlers(config: Config, options: StartOptions): void {
  if (options.configureRouter && options.configureHandlers)
    throw new Error(
      'configureRouter (deprecated) and configureHandlers together: register every handler with configureHandlers (docs/handlers.md)',
    );
  if (config.cluster !== null && options.configureRouter && !options.configureClusterRouter)
    throw new Error(
      'configureRouter registers handlers for SQLite mode only, and DATABASE_URL is set (cluster mode): register them with configureHandlers, which runs in both modes, or configureClusterRouter (docs/handlers.md)',
    );
}

/** One warning at start per deprecated option, naming the one that replaces it. */
function warnDeprecatedHandlers(options: StartOptions): void {
  for (const name of ['configureRouter', 'configureClusterRouter'] as const)
    if (options[name])
      options.logger.warn(
        { option: name, use: 'configureHandlers' },
        `${name} is deprecated: register handlers with configureHandlers, which runs them unchanged in both modes (docs/handlers.md)`,
      );
}

/**
 * The partner's handlers (configureHandlers), when it registered any; in cluster mode the
 * deprecated configureClusterRouter's too, after them.
 */
function partnerHandlers(config: Config, options: StartOptions): HandlerRouter | undefined {
  const router = new HandlerRouter();
  options.configureHandlers?.(router);
  if (config.cluster !== null && options.configureClusterRouter) {
    const old = new ClusterEventRouter();
    options.configureClusterRouter(old);
    router.adopt(old, fromClusterHandler);
  }
  return router.empty ? undefined : router;
}

function buildCluster(
  config: Config,
  options: StartOptions,
  deps: {
    clock: Clock;
    metrics: Metrics;
    spool: Spool;
    processing: Processing;
    feedWaiters: FeedWaiters;
    inFlight: InFlightRequests | undefined;
    partner: HandlerRouter | undefined;
  },
): ClusterNode {
  const { clock, metrics } = deps;
  const cluster = config.cluster!;
  // The overload line's backlog: what this replica's spool holds for the relay.
  deps.processing.answers.backlogFrom(() => ({ spool: deps.spool.backlog().count }));
  return new ClusterNode({
    ...cluster,
    maxAttempts: config.handlerMaxAttempts,
    backoff: options.handlerBackoff ?? { baseMs: 1000, maxMs: 600_000 },
    schedule: pollSchedule(config),
    spool: deps.spool,
    oldestInFlight: () => deps.inFlight?.oldest() ?? null,
    gate: deps.processing.answers,
    statusClient: deps.processing.serviceClient,
    handlers: deps.partner,
    // RETENTION_DAYS: PostgreSQL once an hour cluster-wide, and this replica's spool of relayed rows.
    retention:
      config.retentionDays === undefined ? undefined : { days: config.retentionDays, spool: deps.spool },
    outbox: { destinations: config.forwarding.destinations, feedEnabled: config.forwarding.feedEnabled },
    consoleTokens: tokenFingerprints({ admin: config.adminToken, viewer: config.viewerToken }),
    forwarding: {
      destinations: config.forwarding.destinations,
      // One sender per destination this replica holds, on the main thread (forwarder.ts).
      createSender: (destination, store) =>
        new ForwardSender(store, [destination], {
          clock,
          logger: options.logger,
          metrics: senderMetrics(metrics),
          pollIntervalMs: options.forwardPollMs,
          gate: deps.processing.answers,
        }),
      // A destination another replica now sends: its circuit is that replica's to report.
      onHeld: (destination, held) => {
        if (!held) metrics.forwardCircuit.set({ destination }, 0);
      },
      onNotify: () => deps.feedWaiters.notify(),
    },
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
        metrics.watermarkLag.set(
          at === null ? 0 : Math.max(0, (clock.now().getTime() - at.getTime()) / 1000),
        );
        metrics.watermarkWaiting.set(beat.watermark.waiting.length);
        metrics.clockOffset.set(beat.clockOffsetMs / 1000);
      },
      late: (rows) => metrics.relayedLate.inc(rows),
    },
  });
}

/** The group-commit writer of deliveries; each stored pending event is queued after its commit. */
function buildWriter(
  config: Config,
  store: Store,
  metrics: Metrics,
  logger: Logger,
  clock: Clock,
  onStored: (id: number, event: NewEvent) => void,
): IngestWriter {
  return new IngestWriter(store.db, store.events, store.deliveries, {
    maxBatch: config.groupCommitMaxBatch,
    lockWaitMs: config.sqlite.busyTimeoutMs,
    monotonic: clock.monotonic,
    onBatch: ({ size, durationMs, ok }) => {
      metrics.commitBatchSize.observe(size);
      metrics.commitSeconds.observe(durationMs / 1000);
      if (!ok) metrics.commitFailures.inc();
    },
    onAuditError: (err, dropped, { deferred, droppedTotal }) =>
      logger.error(
        { err: err.message, deferred, dropped, dropped_total: droppedTotal },
        dropped > 0
          ? 'could not write deliveries audit rows; some were dropped (see dropped, dropped_total)'
          : 'could not write deliveries audit rows; retrying with the next batch',
      ),
    onAuditDropped: (n) => metrics.auditRowsDropped.inc(n),
    // Handlers never run inside the request: the event is queued (or relayed) after its commit.
    onStored,
  });
}

function pollSchedule(config: Config): PollScheduleOptions {
  return {
    graceMs: config.registry.webhookGraceMs,
    intervalMs: config.registry.pollIntervalMs,
    maxIntervalMs: config.registry.pollMaxIntervalMs,
    maxAgeMs: config.registry.pollMaxAgeMs,
  };
}

/** Listens on PORT/HOST; resolves with a URL a client on this machine can use. */
async function listen(server: Server, config: Config, logger: Logger): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (err) => logger.error({ err: err.message }, 'http server error'));
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host}:${address.port}`;
  logger.info(
    {
      url,
      database: config.databasePath,
      sqlite_driver: SQLITE_DRIVER,
      synchronous: config.sqlite.synchronous,
      secret_count: config.webhookSecrets.length,
      signature_header: config.signatureHeader,
      max_body_bytes: config.maxBodyBytes,
    },
    'consig-receiver listening',
  );
  return url;
}

/** Stops accepting and waits for in-flight requests, closing what is still open after `timeoutMs`. */
async function closeServer(server: Server, timeoutMs: number, logger: Logger): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  // Keep-alive sockets that finish a request after this are closed as they go idle.
  const idle = setInterval(() => server.closeIdleConnections(), 100);
  const timeout = new Promise<'timeout'>((resolve) => setTimeout(resolve, timeoutMs, 'timeout').unref());
  const result = await Promise.race([closed, timeout]);
  clearInterval(idle);
  if (result === 'timeout') {
    logger.warn({ timeout_ms: timeoutMs }, 'shutdown timeout: closing remaining connections');
    server.closeAllConnections();
  }
}

/** `close()` may be called by several signals; the shutdown runs once and every caller awaits it. */
function closeOnce(shutdown: () => Promise<void>): () => Promise<void> {
  let closing: Promise<void> | null = null;
  return () => (closing ??= shutdown());
}
