import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { DestinationStream } from 'pino';
import { systemClock } from '../../src/clock';
import { type Config, loadConfig } from '../../src/config';
import { createApp } from '../../src/http/app';
import { createLogger } from '../../src/logger';
import { createMetrics, type Metrics } from '../../src/metrics';
import { IngestWriter } from '../../src/store/ingest-writer';
import { openStore, type Store } from '../../src/store/store';
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
  metrics: Metrics;
  logs: LogSink;
  config: Config;
  dbPath: string;
  batches: number[];
  close(): Promise<void>;
}

/** The real app on a real temp SQLite file, listening on loopback. */
export async function startTestApp(env: Record<string, string> = {}): Promise<TestApp> {
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
  const app = createApp({ config, store, writer, metrics, logger, clock: systemClock });
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    store,
    writer,
    metrics,
    logs,
    config,
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
