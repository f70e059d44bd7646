import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ForwardSenderThread } from '../../src/runtime/sender-thread';
import { openSpool } from '../../src/sqlite/spool';
import { clusterBed } from '../helpers/cluster-bed';
import { count, rows, waitFor } from '../helpers/cluster-db';
import { FakeDestination, orderViolations } from '../helpers/destination';
import { sendBurst as burst, type TestReceiver } from '../helpers/receiver';

/**
 * Issue 23 in cluster mode: while a webhook answer is being made on a replica, its background work
 * waits — the relay (spool → PostgreSQL) and the turns (pg-boss jobs → processing) — and nothing is
 * dropped: the spool keeps what it acknowledged, PostgreSQL keeps the pending events. A real
 * replica (the whole receiver with DATABASE_URL) on a real PostgreSQL. No durations are asserted:
 * counters before and after a burst.
 *
 * An answer "being made" is held open with `receiver.answers.begin()` (see answer-first.test.ts
 * for why); the floor slice is set beyond the test's length.
 */

const NO_SLICE = { maxDeferMs: 3_600_000, sliceMs: 1 };
const bed = clusterBed({ prefix: 'answer_first' });

const pending = () => count(bed.pool, "SELECT count(*) AS n FROM events WHERE status = 'pending'");
const done = () => count(bed.pool, "SELECT count(*) AS n FROM events WHERE status = 'done'");
const inPostgres = () => count(bed.pool, 'SELECT count(*) AS n FROM events');
const spooled = (r: TestReceiver) => openSpool(r.store.db).backlog().count;

/** A few relay intervals (20 ms) and pg-boss fetches: time enough for background work to move. */
async function idle(): Promise<void> {
  for (let i = 0; i < 15; i += 1) await new Promise((resolve) => setTimeout(resolve, 20));
}

it('a burst is answered while the relay and the turns wait; once no answer is being made everything is processed, in order', async () => {
  const r = await bed.replica({}, { deferral: NO_SLICE });
  // An ingest-only replica (no workers): what it relays is processed by r's workers alone.
  const ingest = await bed.replica({ REPLICA_ID: 'replica-b', CLUSTER_CONCURRENCY: '0' });
  await burst(r, 931_000, 10, 10);
  await waitFor(async () => (await done()) === 10, '10 events processed');

  r.answers.begin(); // an answer is being made from here on
  await burst(r, 932_000, 60, 20);
  // The relay waits: the burst stays in the spool, acknowledged, and PostgreSQL has none of it.
  await idle();
  expect(spooled(r)).toBe(60);
  expect(await inPostgres()).toBe(10);

  // The other replica's burst reaches PostgreSQL through its own relay: its turns are queued in
  // pg-boss, and r's workers, the only ones, wait at the gate with them.
  await burst(ingest, 935_000, 30, 10);
  await waitFor(async () => (await inPostgres()) === 40, "the other replica's burst relayed");
  expect(await pending()).toBe(30);
  await idle();
  expect(await pending()).toBe(30);
  expect(await done()).toBe(10);
  expect(spooled(r)).toBe(60);

  r.answers.end(); // no answer being made: the spool and the backlog drain
  await waitFor(async () => (await done()) === 100, 'the 100 events processed');
  // Per proposal, in the order received: each transition's event follows the one before, all applied.
  const lines = await rows<{ event_ids: string[]; applied: boolean[] }>(
    bed.pool,
    `SELECT array_agg(event_id::text ORDER BY id) AS event_ids, array_agg(applied ORDER BY id) AS applied
     FROM proposal_transitions WHERE nu_proposta LIKE '932%' OR nu_proposta LIKE '935%' GROUP BY nu_proposta`,
  );
  expect(lines).toHaveLength(30);
  for (const line of lines) {
    const ids = line.event_ids.map(Number);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(line.applied).toEqual([true, true, true]);
  }
  expect(r.answers.snapshot().deferredMsTotal).toBeGreaterThan(0);
});

const TOKEN = 'cluster-answer-first-admin-token-0123';
const SECRET = `whsec_${Buffer.from('cluster-answer-first-destination').toString('base64')}`;
const delivered = () =>
  count(bed.pool, "SELECT count(*) AS n FROM forward_deliveries WHERE status = 'delivered'");
const messages = () => count(bed.pool, 'SELECT count(*) AS n FROM forward_messages');

/** A replica sending to `d` as `crm` (short retries), with an admin token for pause and resume. */
async function sendingReplica(
  d: FakeDestination,
  extra: Record<string, unknown> = {},
): Promise<TestReceiver> {
  const file = join(bed.dir.dir, 'destinations.json');
  const crm = {
    name: 'crm',
    url: d.url,
    secret: SECRET,
    timeout_ms: 2000,
    retry: { schedule_ms: [20, 20, 20] },
  };
  writeFileSync(file, JSON.stringify({ destinations: [{ ...crm, ...extra }] }));
  return bed.replica({ DESTINATIONS_FILE: file, ADMIN_TOKEN: TOKEN }, { deferral: NO_SLICE });
}

async function setPaused(r: TestReceiver, paused: boolean): Promise<void> {
  const res = await fetch(`${r.url}/admin/destinations/crm/${paused ? 'pause' : 'resume'}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  expect(res.status).toBe(200);
}

/** The thread that sends for the replica (runtime/sender-thread.ts), and the destinations it holds. */
const sendingOf = (r: TestReceiver) => r.runtime.sender as ForwardSenderThread;

it('the forwarding thread sends nothing while an answer is being made; once none is, it sends the backlog, in order', async () => {
  const d = await FakeDestination.start();
  try {
    const r = await sendingReplica(d);
    await waitFor(() => sendingOf(r).holding().includes('crm'), 'the replica to hold crm');
    // A backlog to forward: 10 events processed while the destination is paused (20 messages).
    await setPaused(r, true);
    await burst(r, 933_000, 10, 10);
    await waitFor(async () => (await done()) === 10 && (await messages()) === 20, '10 events processed');

    r.answers.begin(); // an answer is being made from here on
    await setPaused(r, false); // the operator lets it go: the thread hears the NOTIFY
    await idle();
    expect(d.requests).toHaveLength(0);
    expect(await delivered()).toBe(0);

    r.answers.end();
    await waitFor(async () => (await delivered()) === 20, 'the 20 messages delivered');
    const stored = await rows<{ id: string; webhook_id: string; nu_proposta: string | null }>(
      bed.pool,
      'SELECT id, webhook_id, nu_proposta FROM forward_messages ORDER BY id',
    );
    const asStored = stored.map((m) => ({
      id: Number(m.id),
      webhook_id: m.webhook_id,
      nu_proposta: m.nu_proposta === null ? null : Number(m.nu_proposta),
    }));
    expect(orderViolations(d, asStored)).toEqual([]);
  } finally {
    await d.close();
  }
});

it('the forwarding thread ended from outside is replaced: its lock is taken again, the message it had in flight sent again and delivered, nothing lost', async () => {
  // The first request is held open (a slow destination), the second refused, the third accepted.
  const d = await FakeDestination.start((req) =>
    req.seq === 0 ? { delayMs: 30_000 } : req.seq === 1 ? { status: 500 } : undefined,
  );
  try {
    const r = await sendingReplica(d, { timeout_ms: 60_000 });
    const sending = sendingOf(r);
    await waitFor(() => sending.holding().includes('crm'), 'the replica to hold crm');
    await burst(r, 934_000, 1, 1);
    await waitFor(() => d.requests.length === 1 && sending.inFlight === 1, 'the request in flight');
    const ended = sending.thread;
    expect(ended).not.toBeNull();
    await ended?.terminate();
    // Its lock connection ended with it: the replica holds nothing until the new thread takes it.
    expect(sending.holding()).toEqual([]);

    await waitFor(async () => (await delivered()) === 2, 'both messages delivered');
    expect(sending.thread?.threadId).not.toBe(ended?.threadId);
    expect(sending.holding()).toEqual(['crm']);
    // The request the ended thread had in flight was never recorded; the new thread's were.
    const attempts = await rows<{ webhook_id: string; http_status: number }>(
      bed.pool,
      `SELECT m.webhook_id, a.http_status FROM forward_attempts a
       JOIN forward_deliveries d ON d.id = a.delivery_id JOIN forward_messages m ON m.id = d.message_id
       ORDER BY a.id`,
    );
    const first = d.requests[0]!.webhookId;
    expect(attempts.filter((a) => a.webhook_id === first).map((a) => a.http_status)).toEqual([500, 200]);
    expect(d.byWebhookId().get(first)).toHaveLength(3);
    const lines = r.logs.lines;
    expect(lines.some((l) => String(l.msg).startsWith('forwarding: sender thread exited'))).toBe(true);
    // The thread's own log lines come through the main logger, marked.
    expect(lines.find((l) => l.msg === 'forwarding: attempt failed; will retry')).toMatchObject({
      thread: 'forwarding',
      destination: 'crm',
      http_status: 500,
    });
  } finally {
    await d.close();
  }
});
