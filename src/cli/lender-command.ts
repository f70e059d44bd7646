import { UsageError } from '../domain/errors';
import { type LenderConsumer, startLenderConsumer, webhookFor } from '../lender/consumer';
import { messageLine } from '../lender/message-line';
import type { Output } from './log-commands';

/** Port of `lender` when `--port` is not given (next to `simulate`'s 4010). */
export const DEFAULT_LENDER_PORT = 4020;

export interface LenderOptions {
  port?: string;
  host?: string;
  /** Repeatable: any one verifies (a rotation). */
  secret?: string[];
  failFirst?: string;
}

/** What the command waits on; the process's own signals unless a test passes its own. */
export interface LenderDeps {
  /** Subscribes to SIGINT/SIGTERM; returns the unsubscribe. */
  onSignal?: (listener: (signal: NodeJS.Signals) => void) => () => void;
  /** Called once the consumer listens (tests read its URL here). */
  onStarted?: (consumer: LenderConsumer) => void;
  /** @default () => new Date() */
  now?: () => Date;
}

function integerOption(name: string, value: string | undefined, fallback: number, max: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n > max)
    throw new UsageError(`${name} expects an integer from 0 to ${max}, got "${value}"`);
  return n;
}

function checkedSecrets(secrets: string[] | undefined): string[] {
  if (secrets === undefined || secrets.length === 0)
    throw new UsageError(
      '--secret is required: the FORWARD_SECRET (or a destination secret) of the receiver',
    );
  for (const secret of secrets) {
    try {
      webhookFor(secret);
    } catch {
      throw new UsageError('--secret: a whsec_ secret must be base64 after the prefix (value not shown)');
    }
  }
  return secrets;
}

function processSignals(listener: (signal: NodeJS.Signals) => void): () => void {
  process.on('SIGINT', listener);
  process.on('SIGTERM', listener);
  return () => {
    process.off('SIGINT', listener);
    process.off('SIGTERM', listener);
  };
}

/**
 * `lender --secret S [--port N] [--host H] [--fail-first N]`: the lender's side of forwarding
 * (contract §8), for trying a destination out. Runs a consumer that verifies each request with the
 * `standardwebhooks` library and prints every accepted message as one line (time, type,
 * nu_proposta, from → to or the averbação status); a bad signature is answered 401 and printed as
 * refused; `--fail-first N` answers 503 to the first N messages, to watch the receiver retry.
 * Runs until SIGINT or SIGTERM, then exits 0.
 */
export async function lenderCommand(opts: LenderOptions, io: Output, deps: LenderDeps = {}): Promise<void> {
  const port = integerOption('--port', opts.port, DEFAULT_LENDER_PORT, 65535);
  const failFirst = integerOption('--fail-first', opts.failFirst, 0, 1_000_000);
  const secrets = checkedSecrets(opts.secret);
  const host = opts.host ?? '127.0.0.1';
  const now = deps.now ?? (() => new Date());
  const line = (text: string) => io.out(`${now().toISOString()} ${text}`);
  let consumer: LenderConsumer;
  try {
    consumer = await startLenderConsumer({
      port,
      host,
      secrets,
      failFirst,
      onMessage: ({ message }) => line(messageLine(message)),
      onRefused: (r) => line(`${r.status} ${r.message ? `${messageLine(r.message)}: ` : ''}${r.reason}`),
    });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EADDRINUSE') throw new UsageError(`port ${port} on ${host} is already in use (try --port)`);
    throw err;
  }
  io.out(`lender consumer listening on ${consumer.url} (Standard Webhooks, verified with standardwebhooks)`);
  io.out(`  point the receiver at it: FORWARD_URL=${consumer.url} FORWARD_SECRET=<the same secret>`);
  if (failFirst > 0) io.out(`  answering 503 to the first ${failFirst} messages`);
  io.out('Ctrl-C to stop');
  deps.onStarted?.(consumer);
  await new Promise<void>((resolve) => {
    const unsubscribe = (deps.onSignal ?? processSignals)(() => {
      unsubscribe();
      resolve();
    });
  });
  await consumer.close();
  const { received, counts } = consumer;
  io.out(
    `received ${received.length} messages (${counts.duplicates} repeats, ${counts.failed} answered 503, ${counts.refused} refused)`,
  );
}
