import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { hostname } from 'node:os';
import type { AddressInfo } from 'node:net';
import { serviceClientFromConfig } from './client';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import { registerInOrder } from './domain/handler-order';
import type { PollScheduleOptions } from './domain/registry';
import type { SenderMetrics } from './forwarding/sender';
import { ForwardSenderThread, type SenderControl } from './forwarding/sender-thread';
import { forwardingHandler } from './handlers/forwarding';
import { lifecycleHandler } from './handlers/lifecycle';
import { registryHandlers } from './handlers/registry';
import type { HandlerRouter } from './domain/event-router';
import { EventRouter } from './handlers/router';
import { type DeliveryWatch, startDeliveryWatch } from './http/delivery-watch';
import type { AppDeps } from './http/app';
import { FeedWaiters } from './http/admin/feed-waiters';
import { createHttpServer } from './http/server';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import { AnswerFirst } from './pipeline/answer-first';
import type { ProcessingLeadership } from './pipeline/leadership';
import { Pipeline, workKey } from './pipeline/pipeline';
import { RegistryPoller } from './registry/poller';
import { clusterMode, type LocalFile, type ModeParts, type Processing, sqliteMode } from './receiver-mode';
import type { StartOptions } from './start-options';
import type { ClusterNode } from './cluster/node';
import type { Db } from './store/database';
import { IngestWriter } from './store/ingest-writer';
import type { NewEvent } from './store/events';
import { SQLITE_DRIVER } from './store/sqlite-driver';
import { forwardDeliveries } from './store/forward-deliveries';
import { processingLease } from './store/processing-lease';
import type { Store } from './store/store';

export type { StartOptions } from './start-options';

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

export async function startReceiver(config: Config, options: StartOptions): Promise<Receiver> {
  const { logger } = options;
  const clock = options.clock ?? systemClock;
  refuseMixedHandlers(options);
  // The one place the mode is chosen (contract §10); what differs by mode comes from it, stage by stage.
  const mode =
    config.cluster === null ? sqliteMode(config, options) : clusterMode(config, config.cluster, options);
  warnDeprecatedHandlers(options);
  const partner = mode.partnerHandlers();
  const file = mode.open();
  const { store } = file;
  const { metrics, answers } = buildMetrics(options, file, clock);
  const holder = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`; // in the processing lease
  const feedWaiters = new FeedWaiters(); // long-polls of the change feed, woken after every pipeline commit
  const schedule = pollSchedule(config);
  const processing = buildProcessing(config, options, {
    ...{ clock, metrics, file, holder, answers, partner, schedule },
    onCommitted: () => feedWaiters.notify(),
  });
  const running = file.compose({
    ...{ clock, metrics, processing, feedWaiters, partner, holder, schedule },
    senderMetrics: senderMetrics(metrics),
  });
  const writer = buildWriter(config, store, metrics, logger, clock, running.afterStore);
  running.start();
  // interface §6.1, rule 4: the run of failed answers, stored across restarts, and the silence check.
  const deliveryWatch = startDeliveryWatch(config, { metrics, logger, clock, shared: running.sharedAnswers });

  const parts = { store, writer, metrics, logger, clock, processing, deliveryWatch, feedWaiters, answers };
  const server = buildServer(config, { ...parts, ...running.http });
  const release = releaser({ ...parts, running, file });
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
  const { leadership, cluster } = running;
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
 * The metrics, their forwarding gauges read where the mode keeps them, and the answers-first gate
 * (issue 23: background work waits while a webhook answer is being made), which counts its
 * deferral in them.
 */
function buildMetrics(
  options: StartOptions,
  file: LocalFile,
  clock: Clock,
): { metrics: Metrics; answers: AnswerFirst } {
  const answers = new AnswerFirst({
    monotonic: () => clock.monotonic(),
    logger: options.logger,
    policy: options.deferral,
    onDeferred: (seconds) => metrics.backgroundDeferredSeconds.inc(seconds),
  });
  answers.start();
  const metrics = createMetrics({
    ...file.gauges,
    nowMs: () => clock.now().getTime(),
    deferring: () => answers.snapshot().deferring,
  });
  return { metrics, answers };
}

/** The handlers (life cycle, registry results, the partner's), the pipeline and the poller. */
function buildProcessing(
  config: Config,
  options: StartOptions,
  deps: {
    clock: Clock;
    metrics: Metrics;
    file: LocalFile;
    holder: string;
    answers: AnswerFirst;
    /** The partner's handlers (configureHandlers), when it registered any. */
    partner: HandlerRouter | undefined;
    schedule: PollScheduleOptions;
    /** After each pipeline commit, besides nudging the sender. */
    onCommitted: () => void;
  },
): Processing {
  const { clock, metrics, holder, schedule } = deps;
  const { store, pipelineDb } = deps.file;
  const { logger } = options;
  const router = registerInOrder(new EventRouter(), {
    ...builtInHandlers(config, pipelineDb, schedule),
    partner: (r) => options.configureRouter?.(r, pipelineDb),
  });
  const partners = deps.file.partners(deps.partner, (db) => builtInHandlers(config, db, schedule));
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
  deps.answers.backlogFrom(() => deps.file.backlog(pipeline));
  return { router, pipeline, poller, serviceClient, sender, answers: deps.answers };
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
  deps: Pick<AppDeps, 'store' | 'writer' | 'metrics' | 'logger' | 'clock'> &
    ModeParts['http'] & {
      processing: Processing;
      deliveryWatch: DeliveryWatch;
      feedWaiters: FeedWaiters;
    },
): Server {
  const { processing, feedWaiters, ...rest } = deps;
  return createHttpServer({
    // With what differs by mode: processing, readiness, the logs and the shared gauges (receiver-mode.ts).
    ...rest,
    // Answers first: the webhook handler reports each answer; the console shows the deferral.
    answers: processing.answers,
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
  running: ModeParts;
  file: LocalFile;
}): (timeoutMs: number) => Promise<void> {
  return async (timeoutMs) => {
    parts.writer.close();
    parts.answers.stop();
    parts.deliveryWatch.stop();
    // Processing finishes its running work (or hands it over), then the file closes.
    await parts.running.stop(timeoutMs);
    parts.file.close();
  };
}

/**
 * A partner's handlers must not be skipped in silence: SQLite-mode ones cannot run beside
 * configureHandlers' (an event of both would need them on two connections), nor in cluster mode
 * (clusterMode refuses them).
 */
function refuseMixedHandlers(options: StartOptions): void {
  if (options.configureRouter && options.configureHandlers)
    throw new Error(
      'configureRouter (deprecated) and configureHandlers together: register every handler with configureHandlers (docs/handlers.md)',
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
