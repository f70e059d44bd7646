import type { ReceivedMessage } from '../../lender/consumer';
import type { Store } from '../../sqlite/store';
import type { Output } from '../log-commands';
import { renderTable } from '../table';
import type { DemoLender } from './lenders';

/**
 * The end of the demo, for each lender's destination: did every message the receiver stored for it
 * arrive, and did each proposal's messages arrive in the order the receiver committed them
 * (contract §8: per destination, per `nu_proposta`)? The receiver's outbox is the reference; what
 * the lender's consumer recorded, in arrival order, is checked against it.
 */

// A type, not an interface: renderTable takes records, and only a type alias is assignable to one.
export type LenderRow = {
  destination: string;
  receives: string;
  messages: number;
  /** Requests answered 503 by the consumer (the warehouse's outage). */
  answered_503: number;
  /** Repeats of a webhook-id the consumer had already accepted. */
  repeats: number;
  order: string;
  ok: 'yes' | 'NO';
};

const COLUMNS = ['destination', 'receives', 'messages', 'answered_503', 'repeats', 'order', 'ok'];
const POLL_MS = 50;

type StoredDelivery = {
  status: string;
  message_id: number;
  order_key: string;
  webhook_id: string;
  nu_proposta: number | string | null;
};

/**
 * A destination's deliveries, oldest first, read at once (the demo's own SQLite file, synchronously:
 * the verdict is checked in a loop until it settles).
 */
function deliveriesOf(store: Store, destination: string): StoredDelivery[] {
  return store.db
    .prepare<[string], StoredDelivery>(
      `SELECT d.status, d.message_id, d.order_key, m.webhook_id, m.nu_proposta
       FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
       WHERE d.destination = ? ORDER BY d.id`,
    )
    .all(destination);
}

/**
 * What arrived against what was stored. `received` is read before the outbox, so anything received
 * is already listed (the sender only sends stored messages); a message stored since then shows as
 * not yet delivered, and the caller looks again.
 */
export function checkLender(store: Store, lender: DemoLender): LenderRow & { settled: boolean } {
  const received: readonly ReceivedMessage[] = [...lender.consumer.received];
  const stored = deliveriesOf(store, lender.name);
  const byWebhookId = new Map(stored.map((row) => [row.webhook_id, row]));
  const pending = stored.filter((row) => row.status === 'pending').length;
  const dead = stored.filter((row) => row.status === 'dead').length;
  const arrived = new Set(received.map((r) => r.webhookId));
  const missing = stored.filter((row) => row.status === 'delivered' && !arrived.has(row.webhook_id)).length;
  const unknown = received.filter((r) => !byWebhookId.has(r.webhookId)).length;
  // Per order key (a proposal), the outbox ids in arrival order must rise.
  const lastId = new Map<string, number>();
  const outOfOrder = new Set<string>();
  for (const { webhookId } of received) {
    const row = byWebhookId.get(webhookId);
    if (row === undefined) continue;
    if ((lastId.get(row.order_key) ?? 0) > row.message_id)
      outOfOrder.add(String(row.nu_proposta ?? row.order_key));
    lastId.set(row.order_key, row.message_id);
  }
  const problems = [
    outOfOrder.size > 0 ? `OUT OF ORDER: ${[...outOfOrder].sort().join(', ')}` : '',
    pending > 0 ? `${pending} not delivered` : '',
    dead > 0 ? `${dead} dead` : '',
    missing > 0 ? `${missing} delivered but not received` : '',
    unknown > 0 ? `${unknown} received that the receiver never stored` : '',
  ].filter((p) => p !== '');
  return {
    destination: lender.name,
    receives: lender.types.join(', ') === '*' ? 'every message type' : lender.types.join(', '),
    messages: received.length,
    answered_503: lender.consumer.counts.failed,
    repeats: lender.consumer.counts.duplicates,
    order: problems.length === 0 ? 'every proposal in order' : problems.join('; '),
    ok: problems.length === 0 ? 'yes' : 'NO',
    settled: pending === 0 && missing === 0,
  };
}

/**
 * Waits (up to `timeoutMs`) until every destination has nothing pending and has received all its
 * delivered messages, then answers the rows; at the deadline, the rows as they are (saying NO).
 */
export async function settleLenders(
  store: Store,
  lenders: readonly DemoLender[],
  timeoutMs: number,
): Promise<LenderRow[]> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const rows = lenders.map((lender) => checkLender(store, lender));
    if (rows.every((row) => row.settled) || Date.now() > until) {
      return rows.map(({ settled: _settled, ...row }) => row);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

export function printLenderSummary(io: Output, rows: readonly LenderRow[]): void {
  io.out('');
  io.out("The lender's side (every request verified with the standardwebhooks library):");
  io.out(renderTable(COLUMNS, rows));
}
