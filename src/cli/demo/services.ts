import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, rmSync, type WriteStream } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { type ServiceClient, serviceClientFromConfig } from '../../client';
import { type Config, loadConfig } from '../../config';
import { EVENTOS } from '../../domain/catalogue';
import { createLogger, type Logger } from '../../logger';
import { type Simulator, startSimulator } from '../../simulator';

/** What the demo runs: the service simulator, and a receiver configured against it. */

export interface DemoFiles {
  /** The receiver's SQLite database, emptied before the demo. */
  dbPath: string;
  /** Where the receiver and the simulator log (stdout is the demo's own). */
  logPath: string;
  logFile: WriteStream;
  /** The receiver's DESTINATIONS_FILE: the demo's lender consumers (contract §8). */
  destinationsPath: string;
}

/** A new, empty database next to a new log file and the destinations file's place. */
export function freshFiles(database: string): DemoFiles {
  const dbPath = resolve(database);
  // Owner only, as the receiver creates its data directory (sqlite/file-mode.ts).
  mkdirSync(dirname(dbPath), { recursive: true, mode: 0o700 });
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${dbPath}${suffix}`, { force: true });
  const logPath = join(dirname(dbPath), 'demo-receiver.log');
  const destinationsPath = join(dirname(dbPath), 'demo-destinations.json');
  rmSync(destinationsPath, { force: true });
  return { dbPath, logPath, logFile: createWriteStream(logPath), destinationsPath };
}

/** Secrets made up for one run: the demo is its own partner and its own service. */
export interface DemoCredentials {
  webhookSecret: string;
  clientId: string;
  clientSecret: string;
  apiKey: string;
}

export function demoCredentials(): DemoCredentials {
  return {
    webhookSecret: randomBytes(24).toString('hex'),
    clientId: 'demo-partner',
    clientSecret: randomBytes(16).toString('hex'),
    apiKey: 'demo-api-key',
  };
}

/** Quick enough to watch, with 30 % of deliveries sent twice so that deduplication shows. */
export function startDemoSimulator(logFile: WriteStream, credentials: DemoCredentials): Promise<Simulator> {
  return startSimulator({
    logger: createLogger('warn', logFile),
    clientId: credentials.clientId,
    clientSecret: credentials.clientSecret,
    apiKey: credentials.apiKey,
    analysisDelayMs: 150,
    registry: { processingAfterMs: 300, completeAfterMs: 800 },
    chaos: { duplicateRate: 0.3 },
  });
}

/**
 * The receiver's configuration: the service is the simulator, reached with OAuth2 and an api key;
 * forwarding goes to the destinations of `destinationsPath` (the demo's lenders). Built from these
 * values only, never the environment: the demo needs no configuration and ignores any.
 */
export function demoConfig(
  files: Pick<DemoFiles, 'dbPath' | 'destinationsPath'>,
  simulator: Simulator,
  credentials: DemoCredentials,
): Config {
  return loadConfig(
    {
      DATABASE_PATH: files.dbPath,
      DESTINATIONS_FILE: files.destinationsPath,
      WEBHOOK_SECRETS: credentials.webhookSecret,
      PORT: '0',
      HOST: '127.0.0.1',
      SERVICE_BASE_URL: simulator.url,
      SERVICE_TOKEN_URL: simulator.tokenUrl,
      SERVICE_CLIENT_ID: credentials.clientId,
      SERVICE_CLIENT_SECRET: credentials.clientSecret,
      SERVICE_API_KEY: credentials.apiKey,
      // Demo-sized schedule: the webhook gets 1.5 s before the poller asks.
      REGISTRY_WEBHOOK_GRACE_MS: '1500',
      REGISTRY_POLL_INTERVAL_MS: '300',
      REGISTRY_POLL_MAX_INTERVAL_MS: '1000',
      SHUTDOWN_TIMEOUT_MS: '3000',
    },
    { requireSecrets: true },
  );
}

/** The demo's partner side: the same client the receiver's commands use. */
export function demoClient(config: Config, logger: Logger): ServiceClient {
  const client = serviceClientFromConfig(config, logger);
  if (client === null) throw new Error('demo: the configuration names no service');
  return client;
}

/** interface §4.5: the receiver's callback, for every event of the catalogue. */
export async function registerCallback(
  client: ServiceClient,
  receiverUrl: string,
  secret: string,
): Promise<void> {
  await client.registerWebhook({ url: `${receiverUrl}/webhooks`, eventos: [...EVENTOS], secret });
}
