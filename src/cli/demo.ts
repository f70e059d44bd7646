import { createLogger } from '../logger';
import { startReceiver } from '../main';
import { DemoDriver } from './demo/driver';
import { printLenderSummary, settleLenders } from './demo/lender-summary';
import { type DemoLender, startDemoLenders, WAREHOUSE_FAIL_FIRST } from './demo/lenders';
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
import { printSummary, printWhereToLook, summaryRow } from './demo/summary';
import { trackStarted } from './service-commands';
import type { Output } from './log-commands';

/**
 * `demo`: one command, no configuration. Starts the receiver on its embedded SQLite, the service
 * simulator and two lender consumers the receiver forwards to (contract §8), registers the
 * callback, creates a handful of proposals and drives them down different paths — with duplicate
 * and out-of-order deliveries on the way — printing progress as the receiver's own database sees
 * it and as the lenders receive it, then a table of final statuses and one of what each lender
 * received. Exits ≠ 0 when a proposal did not end where expected or a lender did not get every
 * message of each proposal in order.
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
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const logger = createLogger('info', files.logFile);
  const say = stampedPrinter(io);
  // Lender lines come from HTTP requests: silenced once the tables are being printed.
  let lendersSpeak = true;
  // Run in reverse on the way out, whatever got started.
  const closers: (() => unknown)[] = [() => files.logFile.end(), () => logger.flush()];
  try {
    const credentials = demoCredentials();
    const simulator = await startDemoSimulator(files.logFile, credentials);
    closers.push(() => simulator.close());
    const lenders = await startDemoLenders(files.destinationsPath, (text) => lendersSpeak && say(text));
    closers.push(() => Promise.all(lenders.map((l) => l.consumer.close())));
    const config = demoConfig(files, simulator, credentials);
    const receiver = await startReceiver(config, {
      logger,
      pollTickMs: 200,
      sweepIntervalMs: 200,
      forwardPollMs: 200,
    });
    closers.push(() => receiver.close());
    say(`receiver ${receiver.url} (SQLite ${files.dbPath}), service simulator ${simulator.url}`);
    sayLenders(say, lenders);

    const client = demoClient(config, logger);
    await registerCallback(client, receiver.url, credentials.webhookSecret);
    say('callback registered for all 13 events; duplicates on (30 % of deliveries are sent twice)');

    const progress = new ProgressWatch(receiver.store, say);
    closers.push(() => progress.stop());
    const demo = new DemoDriver({
      simulator,
      client,
      store: receiver.store,
      track: (accepted, nu) => trackStarted(config, accepted, nu),
      timeoutMs,
      logPath: files.logPath,
      say,
    });
    const driven = await driveScenarios(demo, progress);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    progress.stop();
    const lenderRows = await settleLenders(receiver.store, lenders, timeoutMs);
    lendersSpeak = false;

    const rows = driven.map((proposal) => summaryRow(receiver.store, proposal));
    printSummary(io, rows);
    printLenderSummary(io, lenderRows);
    printWhereToLook(io, files, rows[0]?.nu_proposta);
    if (rows.some((row) => row.ok !== 'yes'))
      throw new Error('demo: a proposal did not end where expected (see the table)');
    if (lenderRows.some((row) => row.ok !== 'yes'))
      throw new Error(
        "demo: a lender did not receive every proposal's messages in order (see the lender table)",
      );
  } finally {
    for (const close of closers.reverse()) await close();
  }
}

function sayLenders(say: (text: string) => void, lenders: readonly DemoLender[]): void {
  const [crm, warehouse] = lenders;
  say(
    `lenders (forwarding, Standard Webhooks): crm ${crm?.consumer.url} takes ${crm?.types.join(', ')}; ` +
      `warehouse ${warehouse?.consumer.url} takes every message and is down for its first ${WAREHOUSE_FAIL_FIRST} requests`,
  );
}
