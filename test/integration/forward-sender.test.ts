import { createHook } from 'node:async_hooks';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { systemClock } from '../../src/clock';
import type { CircuitState } from '../../src/domain/forwarding/circuit';
import { type Destination, parseDestinationsFile } from '../../src/domain/forwarding/destinations';
import type { OutgoingMessage } from '../../src/domain/forwarding/messages';
import { ForwardSender } from '../../src/forwarding/sender';
import type { ForwardSenderThread } from '../../src/runtime/sender-thread';
import { createLogger } from '../../src/logger';
import { createMetrics } from '../../src/metrics';
import Database from '../../src/sqlite/sqlite-driver';
import { senderStore } from '../../src/core/sender-queries';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import { openStore, type Store } from '../../src/sqlite/store';
import { LogSink } from '../helpers/app';
import {
  bodyOf,
  FakeDestination,
  orderViolations,
  type Received,
  type Responder,
} from '../helpers/destination';
import { delivery, eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * The forwarding sender end to end inside one process: the real receiver (webhooks → pipeline →
 * outbox → sender) on a temp SQLite file, a DESTINATIONS_FILE in the temp dir, and destinations that
 * are real HTTP servers on loopback (test/helpers/destination.ts) answering as each test programs
 * them. Signatures are checked with the reference `standardwebhooks` library. Nothing waits for a
 * fixed time to pass an assertion: the tests wait for outcomes (`eventually`) and compare the times
 * the destination and the sender recorded only where the time is the contract (Retry-After, rate).
 */

const SECRET_A = `whsec_${Buffer.from('lender-secret-a-0123456789').toString('base64')}`;
const SECRET_B = `whsec_${Buffer.from('lender-secret-b-9876543210').toString('base64')}`;
const PLAIN_SECRET = 'plain-string-secret-42';
const CPF = '12345678909';
const MASKED_CPF = '***.456.789-**';
const HAPPY = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'];

const cleanups: (() => Promise<void> | void)[] = [];
/** Temp dirs go last, once the receivers using them stopped. */
const tempDirs: ReturnType<typeof tempDir>[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
  for (const tmp of tempDirs.splice(0)) tmp.cleanup();
});

/** A temp dir, removed after everything using it stopped. */
function home(): string {
  const tmp = tempDir('consig-fwd-home-');
  tempDirs.push(tmp);
  return tmp.dir;
}

async function destination(respond?: Responder): Promise<FakeDestination> {
  const d = await FakeDestination.start(respond);
  // Destinations go first: a receiver stopping waits for its requests in flight.
  cleanups.unshift(() => d.close());
  return d;
}

/** One destination entry of a DESTINATIONS_FILE: short timeout and retries unless overridden. */
function entry(
  name: string,
  d: FakeDestination,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    name,
    url: d.url,
    secret: SECRET_A,
    timeout_ms: 2000,
    retry: { schedule_ms: Array.from({ length: 20 }, () => 50) },
    ...extra,
  };
}

interface Running extends TestReceiver {
  dir: string;
}

/** The real receiver with these destinations in its DESTINATIONS_FILE (in `dir`, or a new temp dir). */
async function receiverWith(
  destinations: Record<string, unknown>[],
  dir?: string,
  env: Record<string, string> = {},
): Promise<Running> {
  const where = dir ?? home();
  const file = join(where, 'destinations.json');
  writeFileSync(file, JSON.stringify({ destinations }));
  const receiver = await startTestReceiver({ dir: where, env: { DESTINATIONS_FILE: file, ...env } });
  let stopped: Promise<void> | null = null;
  const stop = () => (stopped ??= receiver.stop());
  cleanups.push(stop);
  return { ...receiver, stop, dir: where };
}

async function sendEvents(r: TestReceiver, nuProposta: number, eventos: readonly string[]): Promise<void> {
  for (const evento of eventos) {
    const res = await r.send(delivery(evento, { nu_proposta: nuProposta }));
    expect(res.status).toBe(200);
  }
}

interface MessageRow {
  id: number;
  webhook_id: string;
  type: string;
  nu_proposta: number | null;
}

interface DeliveryRow {
  id: number;
  message_id: number;
  webhook_id: string;
  nu_proposta: number | null;
  status: 'pending' | 'delivered' | 'dead';
  attempts: number;
  last_status: number | null;
}

interface AttemptRow {
  attempt: number;
  started_at: string;
  http_status: number | null;
  error: string | null;
  outcome: string;
  answer: string | null;
}

function messagesOf(db: Store['db']): MessageRow[] {
  return db
    .prepare('SELECT id, webhook_id, type, nu_proposta FROM forward_messages ORDER BY id')
    .all() as MessageRow[];
}

function deliveriesOf(db: Store['db'], destinationName: string): DeliveryRow[] {
  return db
    .prepare(
      `SELECT d.id, d.message_id, m.webhook_id, m.nu_proposta, d.status, d.attempts, d.last_status
       FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
       WHERE d.destination = ? ORDER BY d.id`,
    )
    .all(destinationName) as DeliveryRow[];
}

function attemptsOf(db: Store['db'], destinationName: string, webhookId: string): AttemptRow[] {
  return db
    .prepare(
      `SELECT a.attempt, a.started_at, a.http_status, a.error, a.outcome, a.answer
       FROM forward_attempts a JOIN forward_deliveries d ON d.id = a.delivery_id
       JOIN forward_messages m ON m.id = d.message_id
       WHERE d.destination = ? AND m.webhook_id = ? ORDER BY a.id`,
    )
    .all(destinationName, webhookId) as AttemptRow[];
}

/** Waits until the destination has `count` deliveries and every one of them is `delivered`. */
async function allDelivered(r: TestReceiver, destinationName: string, count: number): Promise<DeliveryRow[]> {
  await eventually(() => {
    const rows = deliveriesOf(r.store.db, destinationName);
    return rows.length === count && rows.every((row) => row.status === 'delivered');
  }, `${count} deliveries to ${destinationName} delivered`);
  return deliveriesOf(r.store.db, destinationName);
}

const isSuccess = (req: Received) => typeof req.answer === 'number' && req.answer >= 200 && req.answer < 300;

/**
 * Every attempt of one message carried the same `webhook-id` (the body's `id` too), byte-identical
 * bodies, `content-type: application/json`, and a signature the reference library accepts.
 */
function expectConsistentAttempts(d: FakeDestination, secret: string): void {
  for (const [id, requests] of d.byWebhookId()) {
    expect(id).toMatch(/^msg_/);
    for (const req of requests) {
      expect(req.raw.equals(requests[0]?.raw as Buffer)).toBe(true);
      expect(bodyOf(req).id).toBe(id);
      expect(req.headers['content-type']).toBe('application/json');
      expect(FakeDestination.verifies(req, secret)).toBe(true);
    }
  }
}

/** Per-proposal order at the destination (see `orderViolations`). */
function expectProposalOrder(d: FakeDestination, messages: readonly MessageRow[]): void {
  expect(orderViolations(d, messages)).toEqual([]);
}

async function metricsText(r: TestReceiver): Promise<string> {
  const res = await fetch(`${r.url}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** A sample's value in Prometheus text, or null when absent. */
function sample(text: string, name: string, labels: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('through the whole receiver', () => {
  it('a slow destination: the attempt times out (temporary), is retried with the same id and bytes, then delivered', async () => {
    const d = await destination((req) => (req.seq === 0 ? { delayMs: 5000 } : undefined));
    const r = await receiverWith([entry('slow', d, { timeout_ms: 500 })]);
    await sendEvents(r, 810_001, ['proposta.criada']);
    await allDelivered(r, 'slow', 2);

    const [first, second] = messagesOf(r.store.db);
    const tries = attemptsOf(r.store.db, 'slow', first?.webhook_id ?? '');
    // The first attempt timed out; on a busy machine a later one might too, the last one delivered.
    expect(tries.length).toBeGreaterThanOrEqual(2);
    for (const t of tries.slice(0, -1)) {
      expect(t).toMatchObject({ outcome: 'temporary', http_status: null });
      expect(t.error).toBe('timeout: no answer within 500 ms');
    }
    expect(tries.at(-1)).toMatchObject({ attempt: tries.length, outcome: 'delivered', http_status: 200 });
    expect(attemptsOf(r.store.db, 'slow', second?.webhook_id ?? '')).toHaveLength(1);
    expect(d.byWebhookId().get(first?.webhook_id ?? '')).toHaveLength(tries.length);
    // The destination saw the sender give up on the slow one before it answered.
    expect(d.requests[0]?.clientGone).toBe(true);
    expectConsistentAttempts(d, SECRET_A);
    expectProposalOrder(d, messagesOf(r.store.db));
  });

  it('500 for the first requests, then up: delivered in order, every attempt with the same webhook-id and bytes', async () => {
    const d = await destination((req) => (req.seq < 3 ? { status: 500 } : undefined));
    const r = await receiverWith([entry('flaky', d)]);
    await sendEvents(r, 810_002, ['proposta.criada', 'proposta.pre_aprovada']);
    const rows = await allDelivered(r, 'flaky', 4);

    const messages = messagesOf(r.store.db);
    expect(messages.map((m) => m.type)).toEqual([
      'event.received',
      'proposal.changed',
      'event.received',
      'proposal.changed',
    ]);
    expect(rows.map((row) => row.attempts)).toEqual([4, 1, 1, 1]);
    const tries = attemptsOf(r.store.db, 'flaky', messages[0]?.webhook_id ?? '');
    expect(tries.map((t) => [t.outcome, t.http_status])).toEqual([
      ['temporary', 500],
      ['temporary', 500],
      ['temporary', 500],
      ['delivered', 200],
    ]);
    expect(d.requests).toHaveLength(7);
    expect(d.byWebhookId().get(messages[0]?.webhook_id ?? '')).toHaveLength(4);
    expectConsistentAttempts(d, SECRET_A);
    expectProposalOrder(d, messages);
    // The destination saw the proposal's messages in exactly the order they were stored.
    const firstSeen = [...d.byWebhookId().keys()];
    expect(firstSeen).toEqual(messages.map((m) => m.webhook_id));
  });

  it.each<[number, string, (answeredAt: number) => { header: string; notBefore: number }]>([
    [429, 'delay-seconds', (answeredAt) => ({ header: '1', notBefore: answeredAt + 1000 })],
    [
      503,
      'an HTTP-date',
      () => {
        const at = new Date(Math.floor((Date.now() + 2000) / 1000) * 1000);
        return { header: at.toUTCString(), notBefore: at.getTime() };
      },
    ],
  ])(
    '%p with Retry-After as %s: neither that message nor any other reaches the destination before it',
    async (status, _form, retryAfter) => {
      let notBefore = Number.NaN;
      const d = await destination((req) => {
        if (req.seq !== 0) return undefined;
        const asked = retryAfter(Date.now());
        notBefore = asked.notBefore;
        return { status, retryAfter: asked.header };
      });
      const r = await receiverWith([entry('limited', d)]);
      await sendEvents(r, 810_003, ['proposta.criada']);
      const [held] = await (async () => {
        await eventually(() => messagesOf(r.store.db).length === 2, 'messages stored');
        return messagesOf(r.store.db);
      })();
      await eventually(
        () => attemptsOf(r.store.db, 'limited', held?.webhook_id ?? '').length === 1,
        `the ${status} recorded`,
      );
      // Another proposal's message, stored while the destination asked for a pause.
      await sendEvents(r, 810_004, ['proposta.criada']);
      await allDelivered(r, 'limited', 4);

      const tries = attemptsOf(r.store.db, 'limited', held?.webhook_id ?? '');
      expect(tries.map((t) => [t.outcome, t.http_status])).toEqual([
        ['temporary', status],
        ['delivered', 200],
      ]);
      // The sender's own record of when it started the retry: not before the time asked for.
      expect(Date.parse(tries[1]?.started_at ?? '')).toBeGreaterThanOrEqual(notBefore);
      // Retry-After holds the whole destination, not only the message it answered.
      for (const req of d.requests.slice(1)) expect(req.at).toBeGreaterThanOrEqual(notBefore);
      expectConsistentAttempts(d, SECRET_A);
      expectProposalOrder(d, messagesOf(r.store.db));
    },
  );

  it('a permanent 400 goes to the dead letter at once with the answer kept; the proposal then moves on', async () => {
    // Longer than the excerpt kept (1 KB).
    const refusal = `invalid payload: data.proposal.uuid is required. ${'details '.repeat(300)}`;
    const d = await destination((req) => (req.seq === 0 ? { status: 400, body: refusal } : undefined));
    const r = await receiverWith([entry('strict', d)]);
    await sendEvents(r, 810_005, ['proposta.criada', 'proposta.pre_aprovada']);
    await eventually(() => {
      const rows = deliveriesOf(r.store.db, 'strict');
      return rows.length === 4 && rows.every((row) => row.status !== 'pending');
    }, 'every delivery settled');

    const rows = deliveriesOf(r.store.db, 'strict');
    expect(rows.map((row) => [row.status, row.attempts, row.last_status])).toEqual([
      ['dead', 1, 400],
      ['delivered', 1, 200],
      ['delivered', 1, 200],
      ['delivered', 1, 200],
    ]);
    const tries = attemptsOf(r.store.db, 'strict', rows[0]?.webhook_id ?? '');
    expect(tries).toHaveLength(1);
    expect(tries[0]).toMatchObject({
      outcome: 'permanent',
      http_status: 400,
      answer: refusal.slice(0, 1024),
      error: null,
    });
    // Sent once, never again; the later messages only after the refusal.
    expect(d.byWebhookId().get(rows[0]?.webhook_id ?? '')).toHaveLength(1);
    expect(d.requests.map((req) => req.webhookId)).toEqual(rows.map((row) => row.webhook_id));
    const text = await metricsText(r);
    expect(sample(text, 'consig_forward_dead', 'destination="strict"')).toBe(1);
    expect(sample(text, 'consig_forward_dead_total', 'destination="strict"')).toBe(1);
    expect(sample(text, 'consig_forward_attempts_total', 'destination="strict",outcome="permanent"')).toBe(1);
  });

  it('a destination down (port closed), then up on the same port: network errors, then delivered', async () => {
    const d = await destination();
    await d.down();
    const r = await receiverWith([entry('flapping', d, { retry: { schedule_ms: Array(20).fill(200) } })]);
    await sendEvents(r, 810_006, ['proposta.criada']);
    const [first] = await (async () => {
      await eventually(() => messagesOf(r.store.db).length === 2, 'messages stored');
      return messagesOf(r.store.db);
    })();
    await eventually(
      () => attemptsOf(r.store.db, 'flapping', first?.webhook_id ?? '').length >= 2,
      'two refused attempts',
    );
    expect(d.requests).toHaveLength(0);
    await d.up();
    await allDelivered(r, 'flapping', 2);

    const tries = attemptsOf(r.store.db, 'flapping', first?.webhook_id ?? '');
    const failures = tries.slice(0, -1);
    expect(failures.length).toBeGreaterThanOrEqual(2);
    for (const t of failures) {
      expect(t).toMatchObject({ outcome: 'temporary', http_status: null });
      expect(t.error).toMatch(/^network: /);
    }
    expect(tries.at(-1)).toMatchObject({ outcome: 'delivered', http_status: 200, attempt: tries.length });
    expectConsistentAttempts(d, SECRET_A);
    expectProposalOrder(d, messagesOf(r.store.db));
  });

  it('a destination that closes the socket without answering: a network error, retried, then delivered', async () => {
    const d = await destination((req) => (req.seq === 0 ? { close: true } : undefined));
    const r = await receiverWith([entry('hangup', d)]);
    await sendEvents(r, 810_007, ['proposta.criada']);
    await allDelivered(r, 'hangup', 2);
    const [first] = messagesOf(r.store.db);
    const tries = attemptsOf(r.store.db, 'hangup', first?.webhook_id ?? '');
    expect(tries.map((t) => [t.outcome, t.http_status])).toEqual([
      ['temporary', null],
      ['delivered', 200],
    ]);
    expect(tries[0]?.error).toMatch(/^network: /);
    expectConsistentAttempts(d, SECRET_A);
  });

  it('stopping with a request in flight: it is not counted as an attempt, and the next start sends it again, same id and bytes', async () => {
    const dir = home();
    const d = await destination((req) => (req.seq === 0 ? { delayMs: 30_000 } : undefined));
    const config = [entry('patient', d, { timeout_ms: 60_000 })];
    const first = await receiverWith(config, dir, { SHUTDOWN_TIMEOUT_MS: '200' });
    await sendEvents(first, 810_008, ['proposta.criada']);
    await eventually(
      () => d.requests.length === 1 && first.runtime.sender!.inFlight === 1,
      'the request in flight',
    );
    await first.stop();
    const file = new Database(join(dir, 'consig.db'), { readonly: true });
    const pending = deliveriesOf(file, 'patient');
    file.close();
    expect(pending.map((row) => [row.status, row.attempts])).toEqual([
      ['pending', 0],
      ['pending', 0],
    ]);

    const second = await receiverWith(config, dir);
    await allDelivered(second, 'patient', 2);
    const [message] = messagesOf(second.store.db);
    expect(attemptsOf(second.store.db, 'patient', message?.webhook_id ?? '')).toHaveLength(1);
    expect(d.byWebhookId().get(message?.webhook_id ?? '')).toHaveLength(2);
    expect(d.requests[0]?.clientGone).toBe(true);
    expectConsistentAttempts(d, SECRET_A);
  });

  it('stopping while the file refuses the records: one more try in the stop, not a loop (the thread stops in time); the next start sends them again, each recorded once', async () => {
    // The first three requests (each proposal's first message) answered while the sender stops.
    const d = await destination((req) => (req.seq < 3 ? { delayMs: 500 } : undefined));
    const r = await receiverWith([entry('refused', d)]);
    const sender = r.runtime.sender! as ForwardSenderThread;
    for (const nu of [810_030, 810_031, 810_032]) await sendEvents(r, nu, ['proposta.criada']);
    await eventually(() => d.requests.length === 3, "each proposal's first message open");
    // A refusal the test can take back: every attempt's INSERT fails, as on a full disk.
    r.store.db.exec(
      "CREATE TRIGGER refuse BEFORE INSERT ON forward_attempts BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    );
    // The answers come while it stops, and cannot be recorded: tried with the answers and once more in
    // the stop, then left pending. (The sender used to try again at once after each refusal, on and
    // on; here the thread's end cut that short, cluster-forwarding.test.ts shows it going on.)
    expect(await sender.stop(5000)).toBe(true);
    const refused = r.logs.lines.filter(
      (l) =>
        l.msg ===
        'forwarding: could not record attempts while stopping; they stay pending and are sent again',
    ).length;
    expect(refused).toBeGreaterThanOrEqual(1);
    expect(refused).toBeLessThanOrEqual(4);
    const pending = deliveriesOf(r.store.db, 'refused');
    expect(pending.map((row) => [row.status, row.attempts])).toEqual(pending.map(() => ['pending', 0]));

    r.store.db.exec('DROP TRIGGER refuse');
    sender.start();
    const done = await allDelivered(r, 'refused', pending.length);
    for (const row of done) {
      const sent = d.byWebhookId().get(row.webhook_id) ?? [];
      expect(attemptsOf(r.store.db, 'refused', row.webhook_id).map((a) => a.http_status)).toEqual([200]);
      // The three answered during the stop went again (at-least-once, the same webhook-id).
      expect(sent).toHaveLength(d.requests.slice(0, 3).some((q) => q.webhookId === row.webhook_id) ? 2 : 1);
    }
    expectConsistentAttempts(d, SECRET_A);
  });

  it("each pipeline commit nudges the sender's thread: with a 10-minute poll interval, every message still goes at once", async () => {
    const d = await destination();
    const where = home();
    const file = join(where, 'destinations.json');
    writeFileSync(file, JSON.stringify({ destinations: [entry('nudged', d)] }));
    const r = await startTestReceiver({
      dir: where,
      env: { DESTINATIONS_FILE: file },
      forwardPollMs: 600_000,
    });
    cleanups.push(() => r.stop());
    // One at a time: the sender is idle (waiting out its poll interval) when each arrives.
    for (const [i, evento] of HAPPY.entries()) {
      await sendEvents(r, 810_019, [evento]);
      await allDelivered(r, 'nudged', 2 * (i + 1));
    }
    expectProposalOrder(d, messagesOf(r.store.db));
  });

  it('the sender thread ended from outside is replaced: the message it had in flight is sent again and delivered, nothing lost', async () => {
    const d = await destination((req) =>
      req.seq === 0 ? { delayMs: 30_000 } : req.seq === 1 ? { status: 500 } : undefined,
    );
    const r = await receiverWith([entry('sturdy', d, { timeout_ms: 60_000 })]);
    const sender = r.runtime.sender! as ForwardSenderThread;
    await sendEvents(r, 810_018, ['proposta.criada']);
    await eventually(() => d.requests.length === 1 && sender.inFlight === 1, 'the request in flight');
    const ended = sender.thread;
    expect(ended).not.toBeNull();
    await ended?.terminate();

    await allDelivered(r, 'sturdy', 2);
    expect(sender.thread).not.toBeNull();
    expect(sender.thread?.threadId).not.toBe(ended?.threadId);
    const [message] = messagesOf(r.store.db);
    // The request the ended thread had in flight never counted; the new thread's 500 and 200 did.
    expect(attemptsOf(r.store.db, 'sturdy', message?.webhook_id ?? '').map((a) => a.http_status)).toEqual([
      500, 200,
    ]);
    expect(d.byWebhookId().get(message?.webhook_id ?? '')).toHaveLength(3);
    expectConsistentAttempts(d, SECRET_A);
    // The main logger said so; the thread's own log line (the 500) came through it, CPF-free.
    const lines = r.logs.lines;
    expect(lines.some((l) => String(l.msg).startsWith('forwarding: sender thread exited'))).toBe(true);
    const relayed = lines.find((l) => l.msg === 'forwarding: attempt failed; will retry');
    expect(relayed).toMatchObject({
      level: 'warn',
      thread: 'forwarding',
      destination: 'sturdy',
      http_status: 500,
    });
    expect(r.logs.raw).not.toContain(CPF);
  });

  it("per proposal: one proposal's first message held by failures holds only that proposal's later messages", async () => {
    const [A, B, C] = [820_001, 820_002, 820_003];
    let releaseA = false;
    const d = await destination((req) =>
      bodyOf(req).data?.nu_proposta === A && !releaseA ? { status: 503 } : undefined,
    );
    const r = await receiverWith([entry('ordered', d, { retry: { schedule_ms: Array(20).fill(300) } })]);
    await sendEvents(r, A, HAPPY);
    await sendEvents(r, B, HAPPY);
    await sendEvents(r, C, HAPPY);
    const ofProposal = (nu: number) =>
      deliveriesOf(r.store.db, 'ordered').filter((x) => x.nu_proposta === nu);
    await eventually(
      () =>
        [B, C].every(
          (nu) => ofProposal(nu).length === 6 && ofProposal(nu).every((x) => x.status === 'delivered'),
        ),
      'B and C delivered',
    );
    // Meanwhile A's first message was refused, and none of A's later messages left.
    const a = ofProposal(A);
    expect(a.map((x) => x.status)).toEqual(Array(6).fill('pending'));
    expect(a[0]?.attempts).toBeGreaterThanOrEqual(1);
    const sentOfA = new Set(
      d.requests.filter((req) => bodyOf(req).data?.nu_proposta === A).map((x) => x.webhookId),
    );
    expect([...sentOfA]).toEqual([a[0]?.webhook_id]);

    releaseA = true;
    await allDelivered(r, 'ordered', 18);
    const messages = messagesOf(r.store.db);
    expectProposalOrder(d, messages);
    // B's and C's messages were all answered before A's first one was.
    const firstAOk =
      d.requests.find((req) => req.webhookId === a[0]?.webhook_id && isSuccess(req))?.seq ?? -1;
    const lastOther = Math.max(
      ...d.requests.filter((req) => bodyOf(req).data?.nu_proposta !== A && isSuccess(req)).map((x) => x.seq),
    );
    expect(lastOther).toBeLessThan(firstAOk);
    expectConsistentAttempts(d, SECRET_A);
  });

  it("a slow request of one proposal does not delay another proposal's retry", async () => {
    const [SLOW, RETRIED] = [825_001, 825_002];
    let failedOnce = false;
    const d = await destination((req) => {
      const nu = bodyOf(req).data?.nu_proposta;
      if (nu === SLOW) return { delayMs: 15_000 };
      if (nu === RETRIED && !failedOnce) {
        failedOnce = true;
        return { status: 500 };
      }
      return undefined;
    });
    const r = await receiverWith([entry('mixed', d, { timeout_ms: 20_000 })]);
    await sendEvents(r, SLOW, ['proposta.criada']);
    await eventually(() => d.requests.length === 1, 'the slow request arrived');
    await sendEvents(r, RETRIED, ['proposta.criada']);
    const ofProposal = (nu: number) => deliveriesOf(r.store.db, 'mixed').filter((x) => x.nu_proposta === nu);
    await eventually(
      () => ofProposal(RETRIED).filter((x) => x.status === 'delivered').length === 2,
      'the retried proposal delivered',
    );
    // Refused, retried on its 50 ms schedule and delivered, all while the slow request was in flight.
    expect(ofProposal(RETRIED).map((x) => x.attempts)).toEqual([2, 1]);
    expect(d.requests[0]?.answer).toBeNull();
    expect(ofProposal(SLOW).map((x) => [x.status, x.attempts])).toEqual([
      ['pending', 0],
      ['pending', 0],
    ]);
    await eventually(() => r.runtime.sender!.inFlight === 1, 'only the slow request in flight');
  });

  it('two destinations are independent: one failing does not hold the other; metrics per destination', async () => {
    const bad = await destination(() => ({ status: 500 }));
    const good = await destination();
    const r = await receiverWith([entry('bad', bad), entry('good', good)]);
    for (const nu of [830_001, 830_002, 830_003]) await sendEvents(r, nu, HAPPY.slice(0, 2));
    await allDelivered(r, 'good', 12);

    expect(deliveriesOf(r.store.db, 'bad').every((row) => row.status === 'pending')).toBe(true);
    expect(bad.requests.length).toBeGreaterThan(0);
    expect(bad.accepted()).toHaveLength(0);
    const messages = messagesOf(r.store.db);
    expectProposalOrder(good, messages);
    expectConsistentAttempts(good, SECRET_A);
    // The same message has the same id at both destinations.
    const badIds = new Set(bad.requests.map((req) => req.webhookId));
    for (const id of badIds) expect(good.byWebhookId().has(id)).toBe(true);

    const text = await metricsText(r);
    expect(sample(text, 'consig_forward_attempts_total', 'destination="good",outcome="delivered"')).toBe(12);
    expect(
      sample(text, 'consig_forward_attempts_total', 'destination="bad",outcome="temporary"'),
    ).toBeGreaterThan(0);
    expect(sample(text, 'consig_forward_backlog', 'destination="good"')).toBe(0);
    expect(sample(text, 'consig_forward_backlog', 'destination="bad"')).toBe(12);
    expect(sample(text, 'consig_forward_oldest_pending_seconds', 'destination="good"')).toBe(0);
    expect(sample(text, 'consig_forward_oldest_pending_seconds', 'destination="bad"')).toBeGreaterThanOrEqual(
      0,
    );
    expect(sample(text, 'consig_forward_paused', 'destination="bad"')).toBe(0);
  });

  it('the circuit opens after 5 consecutive failures (gauge 2, nothing sent while open) and a good probe after a restart closes it', async () => {
    const dir = home();
    const d = await destination(() => ({ status: 503 }));
    const witness = await destination();
    const config = [
      entry('breaker', d, { retry: { schedule_ms: Array(30).fill(50) } }),
      entry('witness', witness),
    ];
    const first = await receiverWith(config, dir);
    for (let nu = 840_001; nu <= 840_008; nu++) await sendEvents(first, nu, ['proposta.criada']);
    await eventually(
      () =>
        first.runtime.sender!.circuits().get('breaker')?.state === 'open' &&
        first.runtime.sender!.inFlight === 0,
      'circuit open, nothing in flight',
    );
    expect(sample(await metricsText(first), 'consig_forward_circuit_state', 'destination="breaker"')).toBe(2);
    const failures = first.store.db
      .prepare("SELECT count(*) AS n FROM forward_attempts WHERE outcome = 'temporary'")
      .get() as { n: number };
    expect(failures.n).toBeGreaterThanOrEqual(5);
    // Open for 30 s (DEFAULT_CIRCUIT): retries due every 50 ms are not sent meanwhile, nor a new
    // message. Its commit nudges every destination, `breaker` first: once the witness has it, the
    // breaker's sender has looked at it too.
    const sentBeforeWait = d.requests.length;
    await sendEvents(first, 840_009, ['proposta.criada']);
    await allDelivered(first, 'witness', 18);
    expect(d.requests).toHaveLength(sentBeforeWait);
    await first.stop();

    // The open state survived in forward_destinations; make its 30 s have passed, then restart.
    const file = new Database(join(dir, 'consig.db'));
    const row = file.prepare("SELECT circuit FROM forward_destinations WHERE name = 'breaker'").get() as {
      circuit: string;
    };
    const stored = JSON.parse(row.circuit) as CircuitState;
    expect(stored.state).toBe('open');
    const now = Date.now();
    file
      .prepare("UPDATE forward_destinations SET circuit = ? WHERE name = 'breaker'")
      .run(JSON.stringify({ ...stored, since: now - 30_001, until: now - 1 }));
    file.close();
    d.respond = () => undefined;
    const second = await receiverWith(config, dir);
    await allDelivered(second, 'breaker', 18);

    // One probe alone, then the rest once it succeeded.
    const after = d.requests.slice(sentBeforeWait);
    expect(after[1]?.at).toBeGreaterThanOrEqual(after[0]?.answeredAt as number);
    expect(sample(await metricsText(second), 'consig_forward_circuit_state', 'destination="breaker"')).toBe(
      0,
    );
    const saved = second.store.db
      .prepare("SELECT circuit FROM forward_destinations WHERE name = 'breaker'")
      .get() as { circuit: string | null };
    expect(saved.circuit).toBeNull();
    expectProposalOrder(d, messagesOf(second.store.db));
  });

  it('a circuit left half open by a process that died mid-probe is probed again at once after the restart', async () => {
    const dir = home();
    const d = await destination();
    const config = [entry('revived', d)];
    await (await receiverWith(config, dir)).stop(); // creates and migrates the file
    const file = new Database(join(dir, 'consig.db'));
    const halfOpen: CircuitState = {
      state: 'half_open',
      failures: 5,
      lastOpenMs: 30_000,
      probeSince: Date.now(),
    };
    file
      .prepare("INSERT INTO forward_destinations (name, circuit, updated_at) VALUES ('revived', ?, ?)")
      .run(JSON.stringify(halfOpen), new Date().toISOString());
    file.close();

    const r = await receiverWith(config, dir);
    await sendEvents(r, 845_001, ['proposta.criada']);
    // The probe of the dead process will never be answered; waiting out DEFAULT_CIRCUIT's
    // probeTimeoutMs (2 min) would hold the destination for nothing.
    await allDelivered(r, 'revived', 2);
    // The sender runs in a thread: its state reaches this one just after the rows it wrote.
    await eventually(
      () => r.runtime.sender!.circuits().get('revived')?.state === 'closed',
      'the circuit closed',
    );
  });

  it('a rate limit: no more than the rate plus its burst in the first second, at the destination and at the sender', async () => {
    const RATE = 5;
    const d = await destination();
    const r = await receiverWith([entry('metered', d, { rate_limit_per_second: RATE })]);
    for (let nu = 850_001; nu <= 850_010; nu++) await sendEvents(r, nu, ['proposta.criada']);
    await allDelivered(r, 'metered', 20);

    const arrivals = d.requests.map((req) => req.at).sort((x, y) => x - y);
    const t0 = arrivals[0] as number;
    expect(arrivals.filter((t) => t < t0 + 1000).length).toBeLessThanOrEqual(RATE + RATE);
    // The sender's own start times: no one-second window holds more than the bucket plus a second's refill.
    const starts = (
      r.store.db.prepare('SELECT started_at FROM forward_attempts ORDER BY id').all() as {
        started_at: string;
      }[]
    ).map((row) => Date.parse(row.started_at));
    for (const s of starts) {
      expect(starts.filter((t) => t >= s && t < s + 1000).length).toBeLessThanOrEqual(RATE + RATE);
    }
    expectProposalOrder(d, messagesOf(r.store.db));
  });

  it('paused in forward_destinations: messages accumulate, nothing is sent; resumed: all delivered in order', async () => {
    const d = await destination();
    // A second destination, not paused, takes the same messages: once it has them all, the sender
    // has looked at both after the last commit (each commit nudges every destination, `later` first).
    const witness = await destination();
    const r = await receiverWith([entry('later', d), entry('witness', witness)]);
    const setPaused = (paused: 0 | 1) =>
      r.store.db
        .prepare(
          `INSERT INTO forward_destinations (name, paused, updated_at) VALUES ('later', ?, ?)
           ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`,
        )
        .run(paused, new Date().toISOString());
    setPaused(1);
    for (const nu of [860_001, 860_002]) await sendEvents(r, nu, HAPPY);
    await eventually(() => deliveriesOf(r.store.db, 'later').length === 12, 'twelve deliveries stored');
    await allDelivered(r, 'witness', 12);
    expect(d.requests).toHaveLength(0);
    const text = await metricsText(r);
    expect(sample(text, 'consig_forward_backlog', 'destination="later"')).toBe(12);
    expect(sample(text, 'consig_forward_paused', 'destination="later"')).toBe(1);
    expect(sample(text, 'consig_forward_oldest_pending_seconds', 'destination="later"')).toBeGreaterThan(0);

    setPaused(0);
    await allDelivered(r, 'later', 12);
    const messages = messagesOf(r.store.db);
    expectProposalOrder(d, messages);
    const after = await metricsText(r);
    expect(sample(after, 'consig_forward_backlog', 'destination="later"')).toBe(0);
    expect(sample(after, 'consig_forward_paused', 'destination="later"')).toBe(0);
  });

  it('full_cpf: that destination gets the CPF in full, another the masked CPF; both the same message ids', async () => {
    const full = await destination();
    const masked = await destination();
    const r = await receiverWith([entry('full', full, { full_cpf: true }), entry('masked', masked)]);
    await sendEvents(r, 870_001, ['proposta.criada']);
    await allDelivered(r, 'full', 2);
    await allDelivered(r, 'masked', 2);

    const byType = (d: FakeDestination, type: string) =>
      bodyOf(d.requests.find((req) => bodyOf(req).type === type) as Received);
    expect(byType(full, 'event.received').data.payload.dados.nu_cpf).toBe(CPF);
    expect(byType(full, 'proposal.changed').data.proposal.nu_cpf).toBe(CPF);
    expect(byType(masked, 'event.received').data.payload.dados.nu_cpf).toBe(MASKED_CPF);
    expect(byType(masked, 'proposal.changed').data.proposal.nu_cpf).toBe(MASKED_CPF);
    for (const req of masked.requests) expect(req.raw.toString('utf8')).not.toContain(CPF);
    expect(masked.requests.map((req) => req.webhookId)).toEqual(full.requests.map((req) => req.webhookId));
    expectConsistentAttempts(full, SECRET_A);
    expectConsistentAttempts(masked, SECRET_A);
  });

  it('several secrets: one signature for each, and the reference library verifies with any of them', async () => {
    const d = await destination();
    const r = await receiverWith([
      entry('rotating', d, { secret: undefined, secrets: [SECRET_B, SECRET_A, PLAIN_SECRET] }),
    ]);
    await sendEvents(r, 870_002, ['proposta.criada']);
    await allDelivered(r, 'rotating', 2);

    const other = `whsec_${Buffer.from('not-the-lender-secret').toString('base64')}`;
    for (const req of d.requests) {
      expect(String(req.headers['webhook-signature']).split(' ')).toHaveLength(3);
      expect(String(req.headers['webhook-signature'])).toMatch(/^v1,\S+ v1,\S+ v1,\S+$/);
      expect(FakeDestination.verifies(req, SECRET_A)).toBe(true);
      expect(FakeDestination.verifies(req, SECRET_B)).toBe(true);
      // A secret that is not whsec_ is keyed by its UTF-8 bytes (the library's raw format).
      expect(FakeDestination.verifies(req, Buffer.from(PLAIN_SECRET, 'utf8'))).toBe(true);
      expect(FakeDestination.verifies(req, other)).toBe(false);
      expect(Number(req.headers['webhook-timestamp'])).toBeGreaterThan(0);
    }
  });
});

describe('ForwardSender over a real file (short circuit timings)', () => {
  function outboxOf(store: Store, destinationName: string) {
    const outbox = forwardOutbox(store.db);
    let n = 0;
    return (nuProposta: number): void => {
      n += 1;
      const webhookId = `msg_direct_${nuProposta}_${n}`;
      const createdAt = new Date().toISOString();
      const message: OutgoingMessage = {
        type: 'proposal.changed',
        webhookId,
        eventId: n,
        evento: 'proposta.criada',
        nuProposta,
        requestId: null,
        orderKey: `p:${nuProposta}`,
        createdAt,
        body: {
          id: webhookId,
          type: 'proposal.changed',
          created_at: createdAt,
          data: { nu_proposta: nuProposta },
        },
      };
      outbox.insert(message, [destinationName]);
    };
  }

  function parsed(raw: Record<string, unknown>): Destination {
    const [destination] = parseDestinationsFile(JSON.stringify({ destinations: [raw] }), 'test');
    if (destination === undefined) throw new Error('no destination parsed');
    return destination;
  }

  function openTemp(): Store {
    const store = openStore(join(home(), 'consig.db'), { migrate: true });
    cleanups.push(() => store.close());
    return store;
  }

  it('opens after the threshold, a failed probe reopens it for twice as long, a good probe closes it; nothing starts while open', async () => {
    let healthy = false;
    const d = await destination(() => (healthy ? undefined : { status: 500 }));
    const dest = parsed(entry('probe', d, { retry: { schedule_ms: Array(50).fill(20) } }));
    const store = openTemp();
    const add = outboxOf(store, 'probe');
    for (let nu = 1; nu <= 6; nu++) add(nu);
    const metrics = createMetrics({ defaultMetrics: false });
    const seen: CircuitState[] = [];
    const gauges: string[] = [];
    let sender: ForwardSender | null = null;
    sender = new ForwardSender(senderStore(sqliteStoreSql(store.db)), [dest], {
      clock: systemClock,
      logger: createLogger('silent', new LogSink() as never),
      pollIntervalMs: 20,
      circuit: { failureThreshold: 3, openMs: 300, maxOpenMs: 5000, probeTimeoutMs: 10_000 },
      metrics: {
        attempt: () => undefined,
        delivered: () => undefined,
        dead: () => undefined,
        circuit: (name, state) => {
          metrics.forwardCircuit.set({ destination: name }, { closed: 0, half_open: 1, open: 2 }[state]);
          const current = sender?.circuits().get(name);
          if (current) seen.push(current);
          // After the first failed probe (closed, open, half_open, open) the destination comes back.
          if (seen.filter((s) => s.state === 'open').length === 2) healthy = true;
          void metrics.registry
            .getSingleMetricAsString('consig_forward_circuit_state')
            .then((text) => gauges.push(text.split('\n').at(-1) ?? ''));
        },
      },
    });
    // Before the destination closes and the file does.
    cleanups.unshift(async () => {
      await sender?.stop(1000);
    });
    sender.start();
    await eventually(
      () => deliveriesOf(store.db, 'probe').every((row) => row.status === 'delivered'),
      'all delivered after the circuit closed',
    );
    await sender.stop(1000);

    // `closed` first: the state read back at start.
    expect(seen.map((s) => s.state)).toEqual(['closed', 'open', 'half_open', 'open', 'half_open', 'closed']);
    const [, open1, , open2] = seen as [
      CircuitState,
      Extract<CircuitState, { state: 'open' }>,
      CircuitState,
      Extract<CircuitState, { state: 'open' }>,
    ];
    expect(open1.until - open1.since).toBe(300);
    expect(open2.until - open2.since).toBe(600);
    expect(gauges).toContain('consig_forward_circuit_state{destination="probe"} 2');
    expect(gauges.at(-1)).toBe('consig_forward_circuit_state{destination="probe"} 0');
    // No attempt started while the circuit was open, and each probe went alone.
    const starts = (
      store.db.prepare('SELECT started_at FROM forward_attempts ORDER BY id').all() as {
        started_at: string;
      }[]
    ).map((row) => Date.parse(row.started_at));
    for (const open of [open1, open2]) {
      expect(starts.filter((s) => s > open.since && s < open.until)).toEqual([]);
    }
    const probes = d.requests.filter((req) => req.at >= open1.until);
    expect(probes[0]?.answer).toBe(500); // the failed probe
    expect(probes[1]?.at).toBeGreaterThanOrEqual(open2.until); // nothing between the two probes
  });

  it('a proposal held by a retry minutes away: the sender looks again at its poll interval, it does not spin', async () => {
    const d = await destination((req) => (req.seq === 0 ? { status: 500 } : undefined));
    const dest = parsed(entry('patient', d, { retry: { schedule_ms: [600_000] } }));
    const store = openTemp();
    const add = outboxOf(store, 'patient');
    add(1);
    add(1); // waits behind the first, due at once
    const sender = new ForwardSender(senderStore(sqliteStoreSql(store.db)), [dest], {
      clock: systemClock,
      logger: createLogger('silent', new LogSink() as never),
      pollIntervalMs: 200,
    });
    cleanups.unshift(async () => {
      await sender.stop(1000);
    });
    sender.start();
    await eventually(
      () => deliveriesOf(store.db, 'patient')[0]?.attempts === 1,
      'the first attempt recorded',
    );
    // Count the timers the process creates while nothing is due: a sender that keeps re-reading
    // the outbox with a zero delay creates one per event-loop turn, one that waits creates a few.
    let timers = 0;
    const hook = createHook({
      init: (_id, type) => {
        if (type === 'Timeout') timers += 1;
      },
    }).enable();
    await sleep(1000);
    hook.disable();
    expect(d.requests).toHaveLength(1);
    expect(timers).toBeLessThan(30);
  });
});
