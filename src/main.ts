import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ServiceClient, serviceClientFromConfig } from './client';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import type { PollScheduleOptions } from './domain/registry';
import type { SenderMetrics } from './forwarding/sender';
import { type DeliveryWatch, startDeliveryWatch } from './http/delivery-watch';
import { openDeliveryAlarm } from './sqlite/sqlite-delivery-alarm';
import type { AppDeps } from './http/app';
import { FeedWaiters } from './http/admin/feed-waiters';
import { createHttpServer } from './http/server';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import { AnswerFirst } from './runtime/answer-first';
import type { LocalFile, ModeParts, Runtime, ServerParts } from './runtime/receiver-mode';
import { sqliteMode } from './runtime/single/single-mode';
import { clusterMode } from './runtime/cluster/cluster-mode';
import type { StartOptions } from './start-options';
import { onStore, storeTarget } from './store-factory';
import { packageVersion } from './package-version';
import type { Traces } from './domain/tracing';
import { startTracing, type TracingHandle, type TracingSettings } from './tracing';
import { IngestWriter } from './sqlite/ingest-writer';
import type { NewEvent } from './domain/event-status';
import { SQLITE_DRIVER } from './sqlite/database';
import type { Store } from './sqlite/store';

export type { StartOptions } from './start-options';

/** The composition root: builds the store, the writer, the mode's processing and the HTTP server, and stops them. */
export interface Receiver {
  readonly server: Server;
  readonly url: string;
  readonly store: Store;
  readonly writer: IngestWriter;
  readonly metrics: Metrics;
  /**
   * The runtime, named for neither mode: SQLite mode's processing under the file's lease, or a
   * replica's relay and workers (DATABASE_URL): its state, readiness, sender, ….
   */
  readonly runtime: Runtime;
  /** Answers first (issue 23): background work waits while webhook answers are being made. */
  readonly answers: AnswerFirst;
  /** Stops accepting, finishes in-flight requests and their commits, closes the database. */
  close(): Promise<void>;
}

export async function startReceiver(config: Config, options: StartOptions): Promise<Receiver> {
  const { logger } = options;
  const clock = options.clock ?? systemClock;
  // The mode, chosen once with the store (contract §10); what differs by mode comes from it, stage by stage.
  const mode = onStore(storeTarget(config), {
    sqlite: (target) => sqliteMode(config, target, options),
    postgres: (target) => clusterMode(config, target, options),
  });
  const partner = mode.partnerHandlers();
  const file = mode.open();
  const { store } = file;
  const { metrics, answers } = buildMetrics(config, options, file, clock);
  const tracing = buildTracing(config, logger, metrics, clock);
  const traces = tracing?.handle.traces;
  const feedWaiters = new FeedWaiters(); // long-polls of the change feed, woken after every commit
  const schedule = pollSchedule(config);
  const serviceClient = buildServiceClient(config, options, metrics, traces);
  // The mode builds what it runs: processing on the file (SQLite mode), or on PostgreSQL.
  const running = file.compose({
    ...{ clock, metrics, answers, serviceClient, feedWaiters, partner, schedule, traces },
    senderMetrics: senderMetrics(metrics),
    tracing: tracing?.settings ?? null,
  });
  const writer = buildWriter(config, store, metrics, logger, clock, running.afterStore);
  running.start();
  // interface §6.1, rule 4: the run of failed answers, stored across restarts, and the silence check.
  const deliveryWatch = startDeliveryWatch(config, {
    ...{ metrics, logger, clock, shared: running.sharedAnswers },
    alarm: openDeliveryAlarm(config.databasePath),
  });

  const parts = { store, writer, metrics, logger, clock, serviceClient, deliveryWatch, feedWaiters, answers };
  const server = buildServer(config, {
    ...parts,
    ...running.http,
    traces,
    nudgeSender: () => running.nudgeSender(),
  });
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
    // What the batch processor still holds is sent, cut at SHUTDOWN_FLUSH_MS (2 s, src/tracing/sdk.ts).
    await tracing?.handle.shutdown();
    logger.info('consig-receiver stopped');
  });
  return { server, url, store, writer, metrics, runtime: running.runtime, answers, close };
}

/**
 * The metrics, their forwarding gauges read where the mode keeps them, and the answers-first gate
 * (issue 23: background work waits while a webhook answer is being made), which counts its
 * deferral in them.
 */
function buildMetrics(
  config: Config,
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
    destinations: config.forwarding.destinations.map((d) => d.name),
  });
  return { metrics, answers };
}

/**
 * Tracing when OTEL_TRACES_EXPORTER=otlp (docs/operating.md "Tracing"): the SDK, its warnings in the
 * log (rate-limited) and its dropped spans in the metrics. Null when off: nothing of it is loaded.
 */
function buildTracing(
  config: Config,
  logger: Logger,
  metrics: Metrics,
  clock: Clock,
): { settings: TracingSettings; handle: TracingHandle } | null {
  if (config.tracing === null) return null;
  const settings: TracingSettings = {
    ...config.tracing,
    serviceVersion: packageVersion(),
    replicaId: config.cluster?.replicaId ?? null,
  };
  const handle = startTracing(settings, {
    warn: (fields, message) => logger.warn(fields, message),
    dropped: (reason, spans) => metrics.traceSpansDropped.inc({ reason }, spans),
    monotonic: () => clock.monotonic(),
  });
  logger.info({ protocol: settings.protocol, service_name: settings.serviceName }, 'tracing on (OTLP)');
  return { settings, handle };
}

/** The service's client for the registry's polls (both modes); null when SERVICE_BASE_URL is unset. */
function buildServiceClient(
  config: Config,
  options: StartOptions,
  metrics: Metrics,
  traces: Traces | undefined,
): ServiceClient | null {
  const { logger } = options;
  const serviceClient =
    options.serviceClient === undefined
      ? serviceClientFromConfig(config, logger, {
          onTokenRefresh: () => metrics.tokenRefreshes.inc(),
          traces,
        })
      : options.serviceClient;
  if (serviceClient === null)
    logger.info('SERVICE_BASE_URL unset: registry poller off (registry results come by webhook only)');
  return serviceClient;
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
    spansDropped: (reason, spans) => metrics.traceSpansDropped.inc({ reason }, spans),
  };
}

/** The HTTP server: webhook routes, health, metrics, admin, console and the feed. */
function buildServer(
  config: Config,
  deps: Pick<AppDeps, 'store' | 'writer' | 'metrics' | 'logger' | 'clock'> &
    ServerParts & {
      // Answers first: the webhook handler reports each answer; the console shows the deferral.
      answers: AnswerFirst;
      serviceClient: ServiceClient | null;
      deliveryWatch: DeliveryWatch;
      traces: Traces | undefined;
      feedWaiters: FeedWaiters;
      nudgeSender(): void;
    },
): Server {
  const { feedWaiters, nudgeSender, ...rest } = deps;
  return createHttpServer({
    // With what differs by mode: processing, readiness, the logs and the shared gauges (runtime/receiver-mode.ts `ServerParts`).
    ...rest,
    config,
    registryGraceMs: config.registry.webhookGraceMs,
    forwarding: {
      destinations: config.forwarding.destinations,
      feedFullCpf: config.forwarding.feedFullCpf,
      feedEnabled: config.forwarding.feedEnabled,
      waiters: feedWaiters,
      nudge: nudgeSender,
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
