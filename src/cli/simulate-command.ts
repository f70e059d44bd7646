import { UsageError } from '../domain/errors';
import { createLogger, type Logger } from '../logger';
import { controlApiHelp, type Simulator, startSimulator } from '../simulator';
import type { Output } from './log-commands';

/** Port of `simulate` when `--port` is not given (the usual port of API mock servers). */
export const DEFAULT_SIMULATOR_PORT = 4010;

export interface SimulateOptions {
  port?: string;
  host?: string;
  json?: boolean;
}

/** What the command waits on; the process's own signals unless a test passes its own. */
export interface SimulateDeps {
  logger?: Logger;
  /** Subscribes to SIGINT/SIGTERM; returns the unsubscribe. */
  onSignal?: (listener: (signal: NodeJS.Signals) => void) => () => void;
  /** Called once the simulator listens (tests read its URL here). */
  onStarted?: (simulator: Simulator) => void;
}

function parsePort(value: string | undefined): number {
  if (value === undefined) return DEFAULT_SIMULATOR_PORT;
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n > 65535)
    throw new UsageError(`--port expects an integer from 0 to 65535, got "${value}"`);
  return n;
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
 * `simulate [--port N] [--host H] [--json]`: runs the service simulator (contract §7) until SIGINT or
 * SIGTERM, then closes it and resolves (exit code 0). Prints where it listens, the token endpoint
 * and the control API; `--json` prints the same as one JSON object. Logs are pino JSON on stdout.
 */
export async function simulateCommand(
  opts: SimulateOptions,
  io: Output,
  deps: SimulateDeps = {},
): Promise<void> {
  const port = parsePort(opts.port);
  const host = opts.host ?? '127.0.0.1';
  const logger = deps.logger ?? createLogger(process.env.LOG_LEVEL ?? 'info');
  let simulator: Simulator;
  try {
    simulator = await startSimulator({ port, host, logger });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'EADDRINUSE') throw new UsageError(`port ${port} on ${host} is already in use (try --port)`);
    throw err;
  }
  const control = controlApiHelp();
  if (opts.json) {
    io.out(JSON.stringify({ url: simulator.url, tokenUrl: simulator.tokenUrl, control }));
  } else {
    io.out(
      [
        `service simulator listening on ${simulator.url}`,
        `token endpoint: POST ${simulator.tokenUrl}`,
        '  (grant_type=client_credentials; any non-empty client_id and client_secret)',
        'API: POST /api/v1/webhooks, /api/v1/propostas, /contract/averbacao, /contract; GET /request/:id; ' +
          'POST /offers/search (public)',
        'control API (no auth):',
        ...control.map((line) => `  ${line}`),
        'Ctrl-C to stop',
      ].join('\n'),
    );
  }
  deps.onStarted?.(simulator);
  await new Promise<void>((resolve) => {
    const unsubscribe = (deps.onSignal ?? processSignals)((signal) => {
      unsubscribe();
      logger.info({ signal }, 'simulator stopping');
      resolve();
    });
  });
  await simulator.close();
  logger.flush();
}
