import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serviceClientFromConfig, type ServiceClient } from './client';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import { createRequestListener } from './http/app';
import type { Logger } from './logger';
import { EVENTOS } from './domain/catalogue';
import { lifecycleHandler } from './handlers/lifecycle';
import { EventRouter } from './handlers/router';
import { createMetrics, type Metrics } from './metrics';
import { Pipeline, workKey } from './pipeline/pipeline';
import { RegistryPoller } from './registry/poller';
import { registryHandlers } from './handlers/registry';
import { type Db, openDatabase } from './store/database';
import { IngestWriter } from './store/ingest-writer';
import { pruneBodies, retentionCutoff } from './store/retention';
import { openStore, type Store } from './store/store';

/** The composition root: builds the store, the writer, the app and the HTTP server, and stops them. */
export interface Receiver {
  readonly server: Server;
  readonly url: string;
  readonly store: Store;
  readonly writer: IngestWriter;
  readonly metrics: Metrics;
  readonly pipeline: Pipeline;
  readonly router: EventRouter;
  readonly poller: RegistryPoller | null;
  /** Stops accepting, finishes in-flight requests and their commits, closes the database. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  clock?: Clock;
  /** Registers a partner's own handlers next to the life-cycle one (`router.on(…)`). */
  configureRouter?: (router: EventRouter, db: Db) => void;
  /** Handler retry backoff (tests shorten it). */
  handlerBackoff?: { baseMs: number; maxMs: number };
  sweepIntervalMs?: number;
  /** The service's API (status query for the poller, averbação start for the admin route); default: built from SERVICE_* (none when unset). */
  serviceClient?: ServiceClient | null;
  /** Poller tick (tests shorten it). Default 1000 ms. */
  pollTickMs?: number;
}

export async function startReceiver(config: Config, options: StartOptions): Promise<Receiver> {
  const { logger } = options;
  const clock = options.clock ?? systemClock;
  const store = openStore(config.databasePath, {
    migrate: true,
    synchronous: config.sqlite.synchronous,
    busyTimeoutMs: config.sqlite.busyTimeoutMs,
  });
  const metrics = createMetrics();

  // The pipeline has its own connection. synchronous=NORMAL is safe there: a pipeline commit lost
  // to a power cut rolls back the handler effects together with the `done` mark (one transaction),
  // so the event is simply processed again. Acknowledged deliveries keep the store's FULL.
  const pipelineDb = openDatabase(config.databasePath, {
    synchronous: 'NORMAL',
    busyTimeoutMs: config.sqlite.busyTimeoutMs,
  });
  const schedule = {
    graceMs: config.registry.webhookGraceMs,
    intervalMs: config.registry.pollIntervalMs,
    maxIntervalMs: config.registry.pollMaxIntervalMs,
    maxAgeMs: config.registry.pollMaxAgeMs,
  };
  const registry = registryHandlers(pipelineDb, schedule);
  const router = new EventRouter()
    .on(EVENTOS, lifecycleHandler(pipelineDb))
    .on(EVENTOS, registry.trackFromEvent)
    .on('registry', registry.result);
  options.configureRouter?.(router, pipelineDb);
  router.onError((err, event) => metrics.handlerFailures.inc({ evento: event.evento ?? event.kind }));
  const pipeline = new Pipeline(pipelineDb, router, {
    maxAttempts: config.handlerMaxAttempts,
    clock,
    logger,
    backoff: options.handlerBackoff,
    sweepIntervalMs: options.sweepIntervalMs,
    metrics: {
      processed: (evento, outcome) => metrics.eventsProcessed.inc({ evento, outcome }),
      depth: (n) => metrics.queueDepth.set(n),
    },
  });

  const writer = new IngestWriter(store.db, store.events, store.deliveries, {
    maxBatch: config.groupCommitMaxBatch,
    monotonic: clock.monotonic,
    onBatch: ({ size, durationMs, ok }) => {
      metrics.commitBatchSize.observe(size);
      metrics.commitSeconds.observe(durationMs / 1000);
      if (!ok) metrics.commitFailures.inc();
    },
    onAuditError: (err, dropped) =>
      logger.error(
        { err: err.message, dropped },
        'could not write deliveries audit rows; retrying with the next batch',
      ),
    // Handlers never run inside the request: the event is queued after its commit.
    onStored: (id, event) => {
      if (event.status === 'pending') {
        pipeline.enqueue(id, workKey({ id, nu_proposta: event.nuProposta, request_id: event.requestId }));
      }
    },
  });
  pipeline.start();

  const statusClient =
    options.serviceClient === undefined
      ? defaultStatusClient(config, logger, metrics)
      : options.serviceClient;
  const poller =
    statusClient === null
      ? null
      : new RegistryPoller(store.db, store.events, statusClient, {
          schedule,
          clock,
          logger,
          tickMs: options.pollTickMs,
          onPoll: (outcome) => metrics.polls.inc({ outcome }),
          onStored: (eventId, requestId) =>
            pipeline.enqueue(eventId, workKey({ id: eventId, nu_proposta: null, request_id: requestId })),
        });
  poller?.start();
  if (poller === null)
    logger.info('SERVICE_BASE_URL unset: registry poller off (registry results come by webhook only)');
  // Node checks headersTimeout and requestTimeout only every connectionsCheckingInterval (30 s by
  // default), which made them 10–40 s and 30–60 s; check every second so they mean what they say.
  const server = createServer(
    { connectionsCheckingInterval: 1_000 },
    createRequestListener({
      config,
      store,
      writer,
      metrics,
      logger,
      clock,
      pipeline,
      registryGraceMs: config.registry.webhookGraceMs,
      serviceClient: statusClient,
    }),
  );
  // Deliberate timeouts: the service waits 5 s for an answer (§6.1); a client that takes far longer
  // to send its headers or body is not the service, and must not hold a socket forever.
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  // Header bytes are bounded by Node's 16 KB anyway; past this count Node 20 drops the extra headers
  // and Node 22+ answers 431, so keep it well above anything a real sender uses.
  server.maxHeadersCount = 256;

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
      synchronous: config.sqlite.synchronous,
      secret_count: config.webhookSecrets.length,
      signature_header: config.signatureHeader,
      max_body_bytes: config.maxBodyBytes,
    },
    'consig-receiver listening',
  );

  // RETENTION_DAYS: prune at start, then hourly, in short transactions.
  const prune = () => {
    if (config.retentionDays === undefined) return;
    try {
      const now = clock.now();
      const { pruned } = pruneBodies(store.db, retentionCutoff(now, config.retentionDays), now);
      if (pruned > 0)
        logger.info(
          { pruned, retention_days: config.retentionDays },
          'retention: removed bodies of old finished events',
        );
    } catch (err) {
      logger.error({ err: (err as Error).message }, 'retention: prune failed; trying again in an hour');
    }
  };
  const pruneTimer = config.retentionDays === undefined ? null : setInterval(prune, 3600_000);
  pruneTimer?.unref();
  setImmediate(prune);

  let closing: Promise<void> | null = null;
  const close = () => {
    closing ??= (async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      // Keep-alive sockets that finish a request after this are closed as they go idle.
      const idle = setInterval(() => server.closeIdleConnections(), 100);
      const timeout = new Promise<'timeout'>((resolve) =>
        setTimeout(resolve, config.shutdownTimeoutMs, 'timeout').unref(),
      );
      const result = await Promise.race([closed, timeout]);
      clearInterval(idle);
      if (result === 'timeout') {
        logger.warn(
          { timeout_ms: config.shutdownTimeoutMs },
          'shutdown timeout: closing remaining connections',
        );
        server.closeAllConnections();
      }
      if (pruneTimer) clearInterval(pruneTimer);
      writer.close();
      await poller?.stop(config.shutdownTimeoutMs);
      const finished = await pipeline.stop(config.shutdownTimeoutMs);
      if (!finished)
        logger.warn('pipeline did not finish in time: unfinished events stay pending for the next start');
      pipelineDb.close();
      store.close();
      logger.info('consig-receiver stopped');
    })();
    return closing;
  };
  return { server, url, store, writer, metrics, pipeline, router, poller, close };
}

export { type Config, loadConfig } from './config';
export type { Handler, HandlerContext, HandlerEvent } from './handlers/router';
export { EventRouter } from './handlers/router';
export { createLogger } from './logger';

/** The status client built from SERVICE_* (null when SERVICE_BASE_URL is unset). */
function defaultStatusClient(config: Config, logger: Logger, metrics: Metrics): ServiceClient | null {
  return serviceClientFromConfig(config, logger, { onTokenRefresh: () => metrics.tokenRefreshes.inc() });
}
