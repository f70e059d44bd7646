import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { DestinationStream } from 'pino';
import { systemClock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import type { ServiceClient } from '../../src/client';
import { createApp } from '../../src/http/app';
import { createHttpServer } from '../../src/http/server';
import { createLogger } from '../../src/logger';
import { createMetrics } from '../../src/metrics';
import { IngestWriter } from '../../src/sqlite/ingest-writer';
import { openStore, type Store } from '../../src/sqlite/store';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import { SECRET } from './payloads';
import { tempDir } from './tmp';

/** Captured JSON log lines of a real pino logger. */
export class LogSink extends Writable {
  readonly lines: Record<string, unknown>[] = [];
  raw = '';
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    const text = chunk.toString('utf8');
    this.raw += text;
    for (const line of text.split('\n')) if (line.trim()) this.lines.push(JSON.parse(line));
    done();
  }
}

export interface TestApp {
  server: Server;
  url: string;
  store: Store;
  writer: IngestWriter;
  logs: LogSink;
  dbPath: string;
  /** Size of each group-commit batch, in order. */
  batches: number[];
  close(): Promise<void>;
}

/** Which server answers: the one production runs, or the Express app alone. */
export type ServerPath = 'production' | 'express';

export interface TestAppOptions {
  /**
   * `production`: createHttpServer, the server src/main.ts runs (the webhook fast path before
   * Express, production's timeouts). `express`: `createServer(createApp(deps))`, Express alone.
   * @default 'production'
   */
  path?: ServerPath;
  /**
   * The service's API for `POST /admin/averbacoes`.
   * @default undefined (that route answers 503)
   */
  serviceClient?: Pick<ServiceClient, 'startAverbacao'> | null;
}

/**
 * The real HTTP server on a real temp SQLite file, listening on loopback, with no pipeline (stored
 * events stay as the request left them) and no poller.
 */
export async function startTestApp(
  env: Record<string, string> = {},
  options: TestAppOptions = {},
): Promise<TestApp> {
  const tmp = tempDir();
  const dbPath = join(tmp.dir, 'consig.db');
  const config = loadConfig(
    { WEBHOOK_SECRETS: SECRET, DATABASE_PATH: dbPath, SQLITE_BUSY_TIMEOUT_MS: '50', ...env },
    { requireSecrets: true },
  );
  const store = openStore(dbPath, {
    migrate: true,
    busyTimeoutMs: config.sqlite.busyTimeoutMs,
    synchronous: config.sqlite.synchronous,
  });
  const metrics = createMetrics({ defaultMetrics: false });
  const logs = new LogSink();
  const logger = createLogger('debug', logs as unknown as DestinationStream);
  const batches: number[] = [];
  const writer = new IngestWriter(store.db, store.events, store.deliveries, {
    maxBatch: config.groupCommitMaxBatch,
    onBatch: ({ size }) => {
      batches.push(size);
      metrics.commitBatchSize.observe(size);
    },
  });
  const deps = {
    config,
    store,
    storePort: sqliteStorePort(store),
    writer,
    metrics,
    logger,
    clock: systemClock,
    serviceClient: options.serviceClient,
  };
  const server = options.path === 'express' ? createServer(createApp(deps)) : createHttpServer(deps);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    store,
    writer,
    logs,
    dbPath,
    batches,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      writer.close();
      store.close();
      tmp.cleanup();
    },
  };
}
