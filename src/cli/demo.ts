import { createLogger } from '../logger';
import { startReceiver } from '../main';
import { DemoDriver } from './demo/driver';
import { stampedPrinter, ProgressWatch } from './demo/progress';
import { driveScenarios } from './demo/scenarios';
import {
  demoClient,
  demoConfig,
  demoCredentials,
  freshFiles,
  registerCallback,
  startDemoSimulator,
} from './demo/services';
import { printSummary, summaryRow } from './demo/summary';
import type { Output } from './log-commands';

/**
 * `demo`: one command, no configuration. Starts the receiver on its embedded SQLite and the
 * service simulator, registers the callback, creates a handful of proposals and drives them down
 * different paths — with duplicate and out-of-order deliveries on the way — printing progress as
 * the receiver's own database sees it, then a table of final statuses.
 */

export interface DemoOptions {
  /** The receiver's SQLite file; emptied first. @default ./data/demo.db */
  database?: string;
  /** How long any one wait for the receiver may last. @default 30000 */
  timeoutMs?: number;
}

/** Time for the duplicates the simulator is still sending to land before the table is read. */
const SETTLE_MS = 300;

export async function demoCommand(opts: DemoOptions, io: Output): Promise<void> {
  const files = freshFiles(opts.database ?? './data/demo.db');
  const logger = createLogger('info', files.logFile);
  const say = stampedPrinter(io);
  // Run in reverse on the way out, whatever got started.
  const closers: (() => unknown)[] = [() => files.logFile.end(), () => logger.flush()];
  try {
    const credentials = demoCredentials();
    const simulator = await startDemoSimulator(files.logFile, credentials);
    closers.push(() => simulator.close());
    const config = demoConfig(files.dbPath, simulator, credentials);
    const receiver = await startReceiver(config, { logger, pollTickMs: 200, sweepIntervalMs: 200 });
    closers.push(() => receiver.close());
    say(`receiver ${receiver.url} (SQLite ${files.dbPath}), service simulator ${simulator.url}`);

    const client = demoClient(config, logger);
    await registerCallback(client, receiver.url, credentials.webhookSecret);
    say('callback registered for all 13 events; duplicates on (30 % of deliveries are sent twice)');

    const progress = new ProgressWatch(receiver.store, say);
    closers.push(() => progress.stop());
    const demo = new DemoDriver({
      simulator,
      client,
      store: receiver.store,
      webhookGraceMs: config.registry.webhookGraceMs,
      timeoutMs: opts.timeoutMs ?? 30_000,
      logPath: files.logPath,
      say,
    });
    const driven = await driveScenarios(demo, progress);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    progress.stop();

    const rows = driven.map((proposal) => summaryRow(receiver.store, proposal));
    printSummary(io, rows, files);
    if (rows.some((row) => row.ok !== 'yes'))
      throw new Error('demo: a proposal did not end where expected (see the table)');
  } finally {
    for (const close of closers.reverse()) await close();
  }
}
