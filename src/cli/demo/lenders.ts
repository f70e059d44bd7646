import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { DEFAULT_CIRCUIT } from '../../domain/forwarding/circuit';
import {
  type LenderConsumer,
  type ReceivedMessage,
  type Refusal,
  startLenderConsumer,
} from '../../lender/consumer';
import { messageLine } from '../../lender/message-line';

/**
 * The lender's side of the demo (contract §8): two consumers of forwarded messages, each verifying
 * with the `standardwebhooks` library (src/lender/), and the DESTINATIONS_FILE that points the
 * receiver at them.
 *
 * - `crm` is always up and takes what a CRM wants: `proposal.changed` and `averbacao.result`.
 * - `warehouse` takes every message type and is down at first: it answers 503 to its first
 *   {@link WAREHOUSE_FAIL_FIRST} requests, so the receiver retries them on a short schedule while
 *   holding back only the later messages of the same proposals, and the warehouse catches up.
 */

/**
 * One below the circuit breaker's threshold (five consecutive failures open it for 30 s, see
 * domain/forwarding/circuit.ts): enough to show retries and catching up, without the demo waiting
 * out an open circuit.
 */
export const WAREHOUSE_FAIL_FIRST = DEFAULT_CIRCUIT.failureThreshold - 1;

const CRM_TYPES = ['proposal.changed', 'averbacao.result'];
const WAREHOUSE_TYPES = ['*'];

/** A second between attempts: long enough to see the warehouse lag behind the CRM, short for a demo. */
const WAREHOUSE_RETRY_MS = [1000, 1000, 2000, 4000, 8000];

export interface DemoLender {
  name: string;
  /** What it subscribes to, as written in the destinations file. */
  types: readonly string[];
  consumer: LenderConsumer;
}

/** What a destinations file entry says, in its own field names (domain/forwarding/destinations.ts). */
interface DestinationEntry {
  name: string;
  url: string;
  secret: string;
  types: readonly string[];
  retry?: { schedule_ms: readonly number[] };
}

/**
 * Starts both consumers and writes the destinations file for the receiver. `say` prints the
 * lender's side: every message the CRM gets, and the warehouse's 503s and the retries that catch
 * it up (its other messages only count, or the output would be every line twice).
 */
export async function startDemoLenders(
  destinationsPath: string,
  say: (text: string) => void,
): Promise<DemoLender[]> {
  // Two ways to give a secret: Standard Webhooks' whsec_<base64>, and any string (keyed by its bytes).
  const crmSecret = `whsec_${randomBytes(24).toString('base64')}`;
  const warehouseSecret = `warehouse-${randomBytes(12).toString('hex')}`;
  const lenders: DemoLender[] = [];
  const entries: DestinationEntry[] = [];
  const closeAll = () => Promise.all(lenders.map((l) => l.consumer.close()));
  try {
    const crm = await startLenderConsumer({
      secrets: [crmSecret],
      onMessage: ({ message }) => say(`lender crm       ← ${messageLine(message)}`),
    });
    lenders.push({ name: 'crm', types: CRM_TYPES, consumer: crm });
    entries.push({ name: 'crm', url: crm.url, secret: crmSecret, types: CRM_TYPES });

    const warehouse = await startLenderConsumer({
      secrets: [warehouseSecret],
      failFirst: WAREHOUSE_FAIL_FIRST,
      onMessage: (received) => sayRetried(say, received),
      onRefused: (refusal) => sayRefused(say, refusal),
    });
    lenders.push({ name: 'warehouse', types: WAREHOUSE_TYPES, consumer: warehouse });
    entries.push({
      name: 'warehouse',
      url: warehouse.url,
      secret: warehouseSecret,
      types: WAREHOUSE_TYPES,
      retry: { schedule_ms: WAREHOUSE_RETRY_MS },
    });
    writeFileSync(destinationsPath, `${JSON.stringify({ destinations: entries }, null, 2)}\n`, {
      mode: 0o600, // it holds the secrets
    });
    return lenders;
  } catch (err) {
    await closeAll();
    throw err;
  }
}

function sayRefused(say: (text: string) => void, { status, message, reason }: Refusal): void {
  const what = message ? messageLine(message) : 'a request';
  say(`lender warehouse ✗ ${status} to ${what} (${status === 503 ? 'down on purpose' : reason})`);
}

function sayRetried(say: (text: string) => void, { message, failedBefore }: ReceivedMessage): void {
  if (failedBefore === 0) return;
  const times = failedBefore === 1 ? 'once' : `${failedBefore} times`;
  say(`lender warehouse ← ${messageLine(message)} (retried: answered 503 ${times} before)`);
}
