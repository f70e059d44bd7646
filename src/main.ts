import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Clock, systemClock } from './clock';
import type { Config } from './config';
import { createApp } from './http/app';
import type { Logger } from './logger';
import { createMetrics, type Metrics } from './metrics';
import { IngestWriter } from './store/ingest-writer';
import { openStore, type Store } from './store/store';

/** The composition root: builds the store, the writer, the app and the HTTP server, and stops them. */
export interface Receiver {
  readonly server: Server;
  readonly url: string;
  readonly store: Store;
  readonly writer: IngestWriter;
  readonly metrics: Metrics;
  /** Stops accepting, finishes in-flight requests and their commits, closes the database. */
  close(): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  clock?: Clock;
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
  });
  const app = createApp({ config, store, writer, metrics, logger, clock });
  const server = createServer(app);
  // Deliberate timeouts: the service waits 5 s for an answer (§6.1); a client that takes far longer
  // to send its headers or body is not the service, and must not hold a socket forever.
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  server.keepAliveTimeout = 5_000;
  server.maxHeadersCount = 100;

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
      writer.close();
      store.close();
      logger.info('consig-receiver stopped');
    })();
    return closing;
  };
  return { server, url, store, writer, metrics, close };
}
