import { join } from 'node:path';
import type { Clock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import type { DeferralPolicy } from '../../src/domain/answer-first';
import type { HandlerRouter } from '../../src/domain/event-router';
import { createLogger } from '../../src/logger';
import { type Receiver, startReceiver } from '../../src/main';
import type { ServiceClient } from '../../src/client';
import { LogSink } from './app';
import { delivery, postRaw, SECRET, signed } from './payloads';
import { tempDir } from './tmp';

export interface TestReceiver extends Receiver {
  /** Whether it runs in cluster mode (DATABASE_URL set), as its configuration says. */
  clustered: boolean;
  logs: LogSink;
  dbPath: string;
  send(body: unknown, path?: string): ReturnType<typeof postRaw>;
  stop(): Promise<void>;
}

/** The real composition root (store, writer, pipeline, app) on a temp SQLite file and a loopback port. */
export async function startTestReceiver(
  options: {
    env?: Record<string, string>;
    dir?: string;
    configureHandlers?: (router: HandlerRouter) => void;
    serviceClient?: ServiceClient | null;
    pollTickMs?: number;
    /** @default 50 ms */
    forwardPollMs?: number;
    /** Answers first: how long background work may be held (StartOptions.deferral). */
    deferral?: DeferralPolicy;
    /** The receiver's clock (StartOptions.clock), e.g. a wall clock set off PostgreSQL's. @default the system clock */
    clock?: Clock;
  } = {},
): Promise<TestReceiver> {
  const tmp = options.dir ? null : tempDir();
  const dir = options.dir ?? (tmp as { dir: string }).dir;
  const dbPath = join(dir, 'consig.db');
  const config = loadConfig(
    { WEBHOOK_SECRETS: SECRET, DATABASE_PATH: dbPath, PORT: '0', HOST: '127.0.0.1', ...options.env },
    { requireSecrets: true },
  );
  const logs = new LogSink();
  const receiver = await startReceiver(config, {
    logger: createLogger('debug', logs as never),
    configureHandlers: options.configureHandlers,
    handlerBackoff: { baseMs: 10, maxMs: 40 },
    sweepIntervalMs: 10,
    serviceClient: options.serviceClient,
    pollTickMs: options.pollTickMs ?? 20,
    forwardPollMs: options.forwardPollMs ?? 50,
    deferral: options.deferral,
    clock: options.clock,
  });
  return {
    ...receiver,
    clustered: config.cluster !== null,
    logs,
    dbPath,
    send(body: unknown, path = '/webhooks') {
      const { raw, signature } = signed(body);
      return postRaw(`${receiver.url}${path}`, raw, {
        'content-type': 'application/json',
        'x-service-signature': signature,
      });
    },
    async stop() {
      await receiver.close();
      tmp?.cleanup();
    },
  };
}

/** Waits until `predicate` holds, polling; fails with `what` after `timeoutMs`. */
export async function eventually(predicate: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export { delivery };

/**
 * `n` deliveries of `proposals` proposals (numbered from `first`) sent to `r` at once, each
 * proposal's events in the life cycle's order; every one must be answered 200.
 */
export async function sendBurst(r: TestReceiver, first: number, n: number, proposals: number): Promise<void> {
  const eventos = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'];
  const answers = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      r.send(
        delivery(eventos[Math.floor(i / proposals) % eventos.length] as string, {
          nu_proposta: first + (i % proposals),
        }),
      ),
    ),
  );
  expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
}
