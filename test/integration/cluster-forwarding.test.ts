import type { Pool } from 'pg';
import { ClusterForwarder, FORWARD_LOCK_CLASS } from '../../src/runtime/cluster/forwarder';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { sqlOf } from '../../src/postgres/pg-sql';
import { pgStoreSql, poolRunners } from '../../src/postgres/pg-statements';
import { destinationGauges, senderStore } from '../../src/core/sender-queries';
import { checkOut } from '../../src/postgres/pg-sql';
import { systemClock } from '../../src/clock';
import type { BackgroundGate } from '../../src/domain/answer-first';
import { AnswerFirst } from '../../src/runtime/answer-first';
import { type Destination, parseDestinationsFile } from '../../src/domain/forwarding/destinations';
import { serializeMessage } from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';
import { ForwardSender } from '../../src/forwarding/sender';
import type { SenderControl } from '../../src/runtime/sender-thread';
import { createLogger } from '../../src/logger';
import { LogSink } from '../helpers/app';
import { type LogLine, memoryLogger, openPool, rows, waitFor } from '../helpers/cluster-db';
import {
  bodyOf,
  FakeDestination,
  orderViolations,
  type Responder,
  type StoredMessage,
} from '../helpers/destination';
import { CPF, lifecycleMessages } from '../helpers/outbox';
import { createTestDatabase, startTestPostgres, workerPostgres, migrateUrl } from '../helpers/postgres';
import { startLatencyProxy } from '../helpers/latency-proxy';

/**
 * Forwarding in cluster mode (contract §8, §10; src/runtime/cluster/forwarder.ts), unmocked: a real
 * PostgreSQL this file starts, the outbox filled with SQL as the turn fills it (messages and their
 * deliveries committed together, then `pg_notify('consig_forward', '')`), ClusterForwarders as the
 * replicas run them (the real ForwardSender on the PostgreSQL store), and destinations that are real
 * HTTP servers on loopback (test/helpers/destination.ts). Signatures are checked with the reference
 * `standardwebhooks` library. Waits are bounds for a hang, never performance thresholds.
 */

const SECRET = `whsec_${Buffer.from('cluster-lender-secret-0123456').toString('base64')}`;
const MASKED_CPF = '***.456.789-**';
const LIFE: readonly [string, ProposalStatus][] = [
  ['proposta.criada', 'em_analise'],
  ['proposta.pre_aprovada', 'pre_aprovada'],
  ['proposta.aprovada', 'aprovada'],
];

let pg: LocalPostgres;
beforeAll(async () => {
  pg = await workerPostgres();
});
afterAll(async () => {
  await pg?.stop();
});

// Torn down in this order: the replicas (they wait for their requests), the destinations, the pools,
// the servers of their own some tests start.
const replicas: Replica[] = [];
const destinations: FakeDestination[] = [];
const pools: Pool[] = [];
const servers: LocalPostgres[] = [];
afterEach(async () => {
  for (const r of replicas.splice(0)) await r.forwarder.stop(1000);
  for (const d of destinations.splice(0)) await d.close();
  for (const p of pools.splice(0)) await p.end();
  for (const s of servers.splice(0)) await s.stop();
});

interface Db {
  url: string;
  pool: Pool;
}

/** A fresh migrated database on `server`. */
async function database(server: LocalPostgres = pg): Promise<Db> {
  const url = await createTestDatabase(server, 'fwd');
  await migrateUrl(url);
  const pool = openPool(url, 8);
  pools.push(pool);
  return { url, pool };
}

async function destination(respond?: Responder): Promise<FakeDestination> {
  const d = await FakeDestination.start(respond);
  destinations.push(d);
  return d;
}

/** A destination as DESTINATIONS_FILE gives it: short timeout and retries unless overridden. */
function config(name: string, d: FakeDestination, extra: Record<string, unknown> = {}): Destination {
  const raw = {
    name,
    url: d.url,
    secret: SECRET,
    timeout_ms: 2000,
    retry: { schedule_ms: Array.from({ length: 20 }, () => 50) },
    ...extra,
  };
  const [parsed] = parseDestinationsFile(JSON.stringify({ destinations: [raw] }), 'test');
  if (parsed === undefined) throw new Error('no destination parsed');
  return parsed;
}

interface Replica {
  name: string;
  forwarder: ClusterForwarder;
  /** The forwarder's log. */
  log: LogLine[];
  /** The senders' log (pino JSON). */
  senderLog: LogSink;
  /** The senders it built (one per destination it held). */
  senders: ForwardSender[];
}

/** One replica's forwarder, started: locks tried every 100 ms, its lock connection named `fwd-test-<name>`. */
function replica(
  db: Db,
  name: string,
  list: readonly Destination[],
  options: {
    pollIntervalMs?: number;
    concurrency?: number;
    lockRetryMs?: number;
    gate?: BackgroundGate;
  } = {},
): Replica {
  const logger = memoryLogger();
  const senderLog = new LogSink();
  const senders: ForwardSender[] = [];
  const forwarder = new ClusterForwarder({
    pool: db.pool,
    connectionString: db.url,
    destinations: list,
    applicationName: `fwd-test-${name}`,
    lockRetryMs: options.lockRetryMs ?? 100,
    maxBackoffMs: 1000,
    logger,
    createSender: (dest, store) => {
      const sender = new ForwardSender(store, [dest], {
        clock: systemClock,
        logger: createLogger('info', senderLog as never),
        pollIntervalMs: options.pollIntervalMs ?? 100,
        concurrency: options.concurrency,
        gate: options.gate,
      });
      senders.push(sender);
      return sender;
    },
  });
  // What main holds: forwarding's control, whichever mode.
  const control: SenderControl = forwarder;
  control.start();
  const r = { name, forwarder, log: logger.lines, senderLog, senders };
  replicas.push(r);
  return r;
}

/**
 * Stores the messages of one life-cycle event per entry, as the turn does: the event, its messages
 * (the real `messagesFor`, bodies with the CPF in full) and a delivery per destination, due at once,
 * in one transaction; then the notification. Returns the messages in id order.
 */
async function store(
  pool: Pool,
  events: readonly { nu: number; step: number }[],
  names: readonly string[],
): Promise<StoredMessage[]> {
  const out: StoredMessage[] = [];
  const client = await checkOut(pool);
  try {
    await client.query('BEGIN');
    for (const { nu, step } of events) {
      const [evento, to] = LIFE[step % LIFE.length]!;
      const at = new Date().toISOString();
      const event = await client.query<{ id: string }>(
        `INSERT INTO events (dedup_key, kind, evento, nu_proposta, received_at, status, processed_at)
         VALUES ($1, 'event', $2, $3, $4, 'done', $4) RETURNING id`,
        [`test:${nu}:${step}:${Math.random()}`, evento, String(nu), at],
      );
      const eventId = Number(event.rows[0]!.id);
      for (const m of lifecycleMessages({ id: eventId, nu, evento, to, at })) {
        const message = await client.query<{ id: string }>(
          `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, request_id, order_key,
             created_at, body)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
          [
            m.webhookId,
            m.type,
            eventId,
            m.evento,
            String(nu),
            m.requestId,
            m.orderKey,
            m.createdAt,
            serializeMessage(m),
          ],
        );
        const id = Number(message.rows[0]!.id);
        await client.query(
          `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, next_attempt_at,
             created_at, updated_at)
           SELECT $1, d, $2, 'pending', 0, $3, $3, $3 FROM unnest($4::text[]) AS d`,
          [id, m.orderKey, m.createdAt, names],
        );
        out.push({ id, webhook_id: m.webhookId, nu_proposta: nu });
      }
    }
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await pool.query("SELECT pg_notify('consig_forward', '')");
  return out;
}

/** `count` proposals from `first`, `steps` events each, interleaved as a busy service sends them. */
function lifecycles(first: number, count: number, steps: number): { nu: number; step: number }[] {
  const out: { nu: number; step: number }[] = [];
  for (let step = 0; step < steps; step++) for (let i = 0; i < count; i++) out.push({ nu: first + i, step });
  return out;
}

interface DeliveryRow {
  id: string;
  webhook_id: string;
  status: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
}

function deliveries(pool: Pool, name: string): Promise<DeliveryRow[]> {
  return rows<DeliveryRow>(
    pool,
    `SELECT d.id, m.webhook_id, d.status, d.attempts, d.last_status, d.last_error
     FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id
     WHERE d.destination = $1 ORDER BY d.id`,
    [name],
  );
}

/** Waits until every delivery to `name` is final (delivered or dead), `count` of them. */
async function settled(pool: Pool, name: string, count: number, timeoutMs?: number): Promise<DeliveryRow[]> {
  return waitFor(
    async () => {
      const list = await deliveries(pool, name);
      return list.length === count && list.every((d) => d.status !== 'pending') && list;
    },
    `${count} deliveries to ${name} final`,
    timeoutMs,
  );
}

/** Every request carried its message's `webhook-id` (the body's `id` too), a valid signature, the same bytes on every attempt. */
function expectSigned(d: FakeDestination): void {
  for (const [id, requests] of d.byWebhookId()) {
    for (const req of requests) {
      expect(bodyOf(req).id).toBe(id);
      expect(req.raw.equals(requests[0]!.raw)).toBe(true);
      expect(req.headers['content-type']).toBe('application/json');
      expect(FakeDestination.verifies(req, SECRET)).toBe(true);
    }
  }
}

/** How many requests the destination had open at once, at most. */
function maxConcurrent(d: FakeDestination): number {
  let max = 0;
  for (const r of d.requests) {
    const open = d.requests.filter((o) => o.at <= r.at && (o.answeredAt ?? Infinity) > r.at).length;
    max = Math.max(max, open);
  }
  return max;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('one replica', () => {
  it('delivers every message signed, with its webhook-id, in order per proposal with several proposals in flight', async () => {
    const db = await database();
    // Each request takes a moment, so that the lines' heads are visibly in flight together.
    const d = await destination(() => ({ delayMs: 30 }));
    const r = replica(db, 'a', [config('crm', d)]);
    await waitFor(() => r.forwarder.holding().includes('crm'), 'the replica to hold crm');
    const messages = await store(db.pool, lifecycles(1000, 6, 3), ['crm']);
    const final = await settled(db.pool, 'crm', messages.length);

    expect(final.every((row) => row.status === 'delivered' && row.attempts === 1)).toBe(true);
    expect(
      d
        .accepted()
        .map((req) => req.webhookId)
        .sort(),
    ).toEqual(messages.map((m) => m.webhook_id).sort());
    expect(d.requests).toHaveLength(messages.length); // each once: nothing failed
    expect(orderViolations(d, messages)).toEqual([]);
    expect(maxConcurrent(d)).toBeGreaterThan(1);
    expectSigned(d);
    // Masked for a destination that did not ask for the CPF in full (the stored body has it).
    const changed = d.requests.map(bodyOf).find((b) => b.type === 'proposal.changed');
    expect(changed.data.proposal.nu_cpf).toBe(MASKED_CPF);
    for (const req of d.requests) expect(req.raw.toString('utf8')).not.toContain(CPF);
    const attempts = await rows<{ n: string }>(
      db.pool,
      "SELECT count(*) AS n FROM forward_attempts WHERE outcome = 'delivered' AND http_status = 200",
    );
    expect(Number(attempts[0]!.n)).toBe(messages.length);
  });

  it('a 500 is retried with the same webhook-id and delivered; a 400 is dead at once with its answer kept; attempts recorded', async () => {
    const db = await database();
    let failing = '';
    let refused = '';
    const d = await destination((req) => {
      if (req.webhookId === refused) return { status: 400, body: 'unknown proposal' };
      if (req.webhookId === failing && d.byWebhookId().get(failing)!.length <= 2) return { status: 500 };
      return undefined;
    });
    const messages = await store(db.pool, lifecycles(2000, 2, 2), ['los']);
    // Proposal 2000's first message fails twice; proposal 2001's first is refused.
    failing = messages.find((m) => m.nu_proposta === 2000)!.webhook_id;
    refused = messages.find((m) => m.nu_proposta === 2001)!.webhook_id;
    replica(db, 'a', [config('los', d)]);
    const final = await settled(db.pool, 'los', messages.length);

    const byId = new Map(final.map((row) => [row.webhook_id, row]));
    expect(byId.get(failing)).toMatchObject({
      status: 'delivered',
      attempts: 3,
      last_status: 200,
      last_error: null,
    });
    expect(byId.get(refused)).toMatchObject({
      status: 'dead',
      attempts: 1,
      last_status: 400,
      last_error: 'HTTP 400',
    });
    // A dead message holds nothing back: every other message, of both proposals, was delivered.
    expect(final.filter((row) => row.status === 'delivered')).toHaveLength(messages.length - 1);
    const tries = await rows<{ attempt: number; http_status: number; outcome: string; answer: string }>(
      db.pool,
      `SELECT a.attempt, a.http_status, a.outcome, a.answer FROM forward_attempts a
       JOIN forward_deliveries d ON d.id = a.delivery_id JOIN forward_messages m ON m.id = d.message_id
       WHERE m.webhook_id = $1 ORDER BY a.id`,
      [failing],
    );
    expect(tries.map((t) => [t.attempt, t.outcome, t.http_status])).toEqual([
      [1, 'temporary', 500],
      [2, 'temporary', 500],
      [3, 'delivered', 200],
    ]);
    const dead = await rows<{ outcome: string; answer: string }>(
      db.pool,
      `SELECT a.outcome, a.answer FROM forward_attempts a JOIN forward_deliveries d ON d.id = a.delivery_id
       JOIN forward_messages m ON m.id = d.message_id WHERE m.webhook_id = $1`,
      [refused],
    );
    expect(dead).toEqual([{ outcome: 'permanent', answer: 'unknown proposal' }]);
    expect(d.byWebhookId().get(failing)).toHaveLength(3);
    expect(d.byWebhookId().get(refused)).toHaveLength(1);
    expectSigned(d);
    // The retried message held its proposal's later ones back (order kept).
    expect(
      orderViolations(
        d,
        messages.filter((m) => m.nu_proposta === 2000),
      ),
    ).toEqual([]);
  });

  it('paused in forward_destinations: nothing is sent while paused; resumed: everything delivered, in order', async () => {
    const db = await database();
    const d = await destination();
    const r = replica(db, 'a', [config('dw', d)]);
    await waitFor(() => r.forwarder.holding().includes('dw'), 'the replica to hold dw');
    const first = await store(db.pool, lifecycles(3000, 2, 1), ['dw']);
    await settled(db.pool, 'dw', first.length);

    await db.pool.query(
      `INSERT INTO forward_destinations (name, paused, updated_at) VALUES ('dw', true, now())
       ON CONFLICT (name) DO UPDATE SET paused = true`,
    );
    // The sender re-reads the flag at most every 250 ms: once it has found dw paused, it stays so.
    const pausedLooks = () => r.senders.reduce((n, sender) => n + sender.pausedLooks, 0);
    await waitFor(() => pausedLooks() > 0, 'the sender to find dw paused');
    const more = await store(db.pool, lifecycles(3000, 2, 2).slice(2), ['dw']);
    // A look after the messages were stored (store() notifies, and it polls every 100 ms) found dw
    // paused: the sender had its chance to send them, and sent nothing.
    const looked = pausedLooks();
    await waitFor(() => pausedLooks() > looked, 'the sender to look at dw again');
    expect(d.requests).toHaveLength(first.length);
    expect((await deliveries(db.pool, 'dw')).filter((row) => row.status === 'pending')).toHaveLength(
      more.length,
    );

    await db.pool.query("UPDATE forward_destinations SET paused = false WHERE name = 'dw'");
    await settled(db.pool, 'dw', first.length + more.length);
    expect(d.requests).toHaveLength(first.length + more.length);
    expect(orderViolations(d, [...first, ...more])).toEqual([]);
  });

  it('answers first (issue 23): while a webhook answer is being made the forwarder (main thread) sends nothing; then everything, in order', async () => {
    const db = await database();
    const d = await destination();
    // The gate main gives the senders; the floor slice set beyond the test's length.
    const answers = new AnswerFirst({
      monotonic: () => performance.now(),
      logger: createLogger('info', new LogSink() as never),
      policy: { maxDeferMs: 3_600_000, sliceMs: 1 },
    });
    // The gate as main gives it, counting the times a sender found it held and waited there.
    let heldWaits = 0;
    const gate: BackgroundGate = {
      whenClear: () => {
        const wait = answers.whenClear();
        if (wait !== null) heldWaits += 1;
        return wait;
      },
      underLoad: () => answers.underLoad(),
      held: () => answers.held(),
    };
    const r = replica(db, 'a', [config('crm', d)], { gate });
    await waitFor(() => r.forwarder.holding().includes('crm'), 'the replica to hold crm');
    const first = await store(db.pool, lifecycles(5000, 2, 1), ['crm']);
    await settled(db.pool, 'crm', first.length);

    answers.begin(); // an answer is being made (the webhook path reports it so)
    const more = await store(db.pool, lifecycles(5000, 4, 3).slice(4), ['crm']);
    // Notified (and polling every 100 ms), the sender came to its gate and waits there: whatever
    // it would send must pass it, so nothing went meanwhile.
    await waitFor(() => heldWaits > 0, 'the sender waiting at its gate');
    expect(d.requests).toHaveLength(first.length);
    expect((await deliveries(db.pool, 'crm')).filter((row) => row.status === 'pending')).toHaveLength(
      more.length,
    );

    answers.end();
    await settled(db.pool, 'crm', first.length + more.length);
    expect(d.requests).toHaveLength(first.length + more.length);
    expect(orderViolations(d, [...first, ...more])).toEqual([]);
    expect(answers.snapshot().deferredMsTotal).toBeGreaterThan(0);
  });

  it('the notification wakes the sender: with a 10-minute poll interval, new messages still go at once', async () => {
    const db = await database();
    const d = await destination();
    const r = replica(db, 'a', [config('crm', d)], { pollIntervalMs: 600_000 });
    await waitFor(() => r.forwarder.holding().includes('crm'), 'the replica to hold crm');
    // The sender looked once at start, found nothing, and would look again in 10 minutes.
    await sleep(200);
    const messages = await store(db.pool, lifecycles(4000, 3, 1), ['crm']);
    await settled(db.pool, 'crm', messages.length, 10_000);
    expect(d.accepted()).toHaveLength(messages.length);
  });
});

describe('two replicas on one database', () => {
  it('each destination is sent by exactly one replica; every message is delivered exactly once', async () => {
    const db = await database();
    const names = ['d1', 'd2', 'd3', 'd4'];
    const dests = await Promise.all(names.map(() => destination()));
    const list = names.map((name, i) => config(name, dests[i]!));
    const a = replica(db, 'a', list);
    const b = replica(db, 'b', list);
    await waitFor(
      () => a.forwarder.holding().length + b.forwarder.holding().length === names.length,
      'every destination held',
    );
    const heldBy = { a: a.forwarder.holding(), b: b.forwarder.holding() };
    expect([...heldBy.a, ...heldBy.b].sort()).toEqual(names);
    // PostgreSQL agrees: one lock per destination, held by two sessions at most.
    const locks = await rows<{ pid: number }>(
      db.pool,
      "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND granted",
      [FORWARD_LOCK_CLASS],
    );
    expect(locks).toHaveLength(names.length);

    const messages = await store(db.pool, lifecycles(5000, 5, 3), names);
    for (const name of names) await settled(db.pool, name, messages.length);

    for (const d of dests) {
      expect(d.requests).toHaveLength(messages.length);
      expect(new Set(d.requests.map((req) => req.webhookId)).size).toBe(messages.length);
      expect(orderViolations(d, messages)).toEqual([]);
      expectSigned(d);
    }
    // Nobody took over from anybody: the holders did not change.
    expect({ a: a.forwarder.holding(), b: b.forwarder.holding() }).toEqual(heldBy);
    const sent = await rows<{ n: string }>(db.pool, 'SELECT count(*) AS n FROM forward_attempts');
    expect(Number(sent[0]!.n)).toBe(messages.length * names.length);
  });

  it("the holder's lock connection killed (pg_terminate_backend): the other replica takes over, nothing pending is lost", async () => {
    const db = await database();
    const d = await destination(() => ({ delayMs: 20 }));
    const list = [config('solo', d)];
    // a tries again only every 3 s once it lost its connection, so that b is the one taking over.
    const a = replica(db, 'a', list, { lockRetryMs: 3000 });
    await waitFor(() => a.forwarder.holding().includes('solo'), 'replica a to hold solo');
    const b = replica(db, 'b', list);
    await waitFor(() => b.forwarder.connected, 'replica b connected');
    const messages = await store(db.pool, lifecycles(6000, 8, 3), ['solo']);
    await waitFor(() => d.accepted().length >= 10, 'a to deliver some');
    expect(b.forwarder.holding()).toEqual([]);

    const killed = await rows<{ ok: boolean }>(
      db.pool,
      "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = 'fwd-test-a'",
    );
    expect(killed).toEqual([{ ok: true }]);
    await waitFor(() => b.forwarder.holding().includes('solo'), 'replica b to take solo over');
    const final = await settled(db.pool, 'solo', messages.length);

    expect(final.every((row) => row.status === 'delivered')).toBe(true);
    expect(new Set(d.accepted().map((req) => req.webhookId))).toEqual(
      new Set(messages.map((m) => m.webhook_id)),
    );
    expect(orderViolations(d, messages)).toEqual([]);
    expectSigned(d);
    // Only what a had in flight when it lost the lock may have gone twice (at-least-once).
    const twice = [...d.byWebhookId().values()].filter((reqs) => reqs.length > 1);
    expect(twice.length).toBeLessThanOrEqual(16);
    expect(a.log.some((l) => l.message.startsWith('forwarding: lost the lock connection'))).toBe(true);
    // a reconnects, and finds the lock taken.
    await waitFor(() => a.forwarder.connected, 'replica a reconnected');
    expect(a.forwarder.holding()).toEqual([]);
    expect(b.forwarder.holding()).toEqual(['solo']);
  });

  it('a replica stopping (a rolling deploy) finishes and records its requests before it lets go: the other goes on, nothing twice', async () => {
    const db = await database();
    // Answers slower than b's lock retries: were a's lock released before its answers were in, b
    // would send those messages again meanwhile.
    const d = await destination(() => ({ delayMs: 300 }));
    const list = [config('crm', d)];
    const a = replica(db, 'a', list);
    await waitFor(() => a.forwarder.holding().includes('crm'), 'replica a to hold crm');
    const b = replica(db, 'b', list);
    await waitFor(() => b.forwarder.connected, 'replica b connected');
    const messages = await store(db.pool, lifecycles(6500, 6, 3), ['crm']);
    const open = () => d.requests.filter((req) => req.answer === null).length;
    await waitFor(() => d.accepted().length >= 6 && open() > 0, 'a with requests open at the destination');

    expect(await a.forwarder.stop(5000)).toBe(true);
    expect(a.forwarder.holding()).toEqual([]);
    await waitFor(() => b.forwarder.holding().includes('crm'), 'replica b to take crm over');
    await settled(db.pool, 'crm', messages.length);
    // Every answer a got was recorded before its lock went: b sent none of those again.
    expect(d.requests.length).toBe(messages.length);
    expect(new Set(d.requests.map((req) => req.webhookId)).size).toBe(messages.length);
    expect(orderViolations(d, messages)).toEqual([]);
  });
  it('a replica stopped while its lock connection is in the middle of a heartbeat still finishes and records its requests before it lets go', async () => {
    const db = await database();
    // The lock connection through a proxy this test can pause: a heartbeat is held mid-flight, and
    // stop() comes while it is. The stop used to end with that heartbeat (the lock released at
    // once, before the requests in flight were answered and recorded), and b sent them again.
    const proxy = await startLatencyProxy({ host: '127.0.0.1', port: Number(new URL(db.url).port) }, 1);
    try {
      const d = await destination(() => ({ delayMs: 1500 }));
      const list = [config('crm', d)];
      const a = replica({ ...db, url: proxy.through(db.url) }, 'a', list);
      await waitFor(() => a.forwarder.holding().includes('crm'), 'replica a to hold crm');
      const b = replica(db, 'b', list);
      await waitFor(() => b.forwarder.connected, 'replica b connected');
      const messages = await store(db.pool, lifecycles(6600, 6, 3), ['crm']);
      await waitFor(() => d.requests.some((req) => req.answer === null), 'a with requests open');

      proxy.pause();
      // A heartbeat (`SELECT 1` on the lock connection) every 100 ms: the next one is held mid-flight.
      await waitFor(() => proxy.held('SELECT 1\0') > 0, 'a heartbeat held by the paused link');
      const stopping = a.forwarder.stop(10_000);
      await sleep(100);
      proxy.resume();
      expect(await stopping).toBe(true);
      await waitFor(() => b.forwarder.holding().includes('crm'), 'replica b to take crm over');
      await settled(db.pool, 'crm', messages.length);
      expect(d.requests.length).toBe(messages.length);
      expect(new Set(d.requests.map((req) => req.webhookId)).size).toBe(messages.length);
    } finally {
      await proxy.close();
    }
  });
});

describe("the sender's records on PostgreSQL", () => {
  /** Each delivery's recorded attempts and the requests the destination got for its message. */
  async function attemptsAndRequests(pool: Pool, d: FakeDestination) {
    const counted = await rows<{ webhook_id: string; status: string; attempts: string }>(
      pool,
      `SELECT m.webhook_id, d.status, (SELECT count(*) FROM forward_attempts a WHERE a.delivery_id = d.id) AS attempts
       FROM forward_deliveries d JOIN forward_messages m ON m.id = d.message_id ORDER BY d.id`,
    );
    return counted.map((c) => ({
      status: c.status,
      attempts: Number(c.attempts),
      requests: d.byWebhookId().get(c.webhook_id)?.length ?? 0,
    }));
  }

  it('a record whose COMMIT went through but whose answer was lost (the connection cut) is written again: each attempt recorded once, nothing sent twice', async () => {
    const db = await database();
    // The senders' pool through a proxy that cuts one connection between PostgreSQL's commit of the
    // attempts and its answer: the sender sees a failed write of something that is stored.
    const proxy = await startLatencyProxy({ host: '127.0.0.1', port: Number(new URL(db.url).port) }, 1);
    try {
      const pool = openPool(proxy.through(db.url), 8);
      const d = await destination();
      const a = replica({ url: db.url, pool }, 'a', [config('crm', d)]);
      await waitFor(() => a.forwarder.holding().includes('crm'), 'replica a to hold crm');
      const cut = proxy.loseCommitAnswer('INSERT INTO forward_attempts');
      const messages = await store(db.pool, lifecycles(6700, 4, 3), ['crm']);
      await cut;
      await settled(db.pool, 'crm', messages.length);
      await a.forwarder.stop(1000);
      await pool.end();

      // The write was tried again (a second later) on a new connection, and found its attempts stored.
      expect(a.senderLog.lines.map((l) => l.msg)).toContain(
        'forwarding: could not record attempts; retrying',
      );
      const all = await attemptsAndRequests(db.pool, d);
      expect(all).toHaveLength(messages.length);
      expect(all.filter((x) => x.status !== 'delivered' || x.attempts !== 1 || x.requests !== 1)).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it('a sender stopping while PostgreSQL refuses its records tries once more, not in a loop; the next holder sends those again, each recorded once', async () => {
    const db = await database();
    const d = await destination(() => ({ delayMs: 500 }));
    const a = replica(db, 'a', [config('crm', d)]);
    await waitFor(() => a.forwarder.holding().includes('crm'), 'replica a to hold crm');
    const messages = await store(db.pool, lifecycles(6800, 3, 1), ['crm']);
    await waitFor(() => d.requests.length === 3, "a with each proposal's first message open");
    // A refusal the test can take back: every attempt's INSERT fails (as a store down would).
    await db.pool.query(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
      $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$`);
    await db.pool.query(
      'CREATE TRIGGER refuse BEFORE INSERT ON forward_attempts FOR EACH ROW EXECUTE FUNCTION refuse()',
    );
    const open = d.requests.length;
    expect(await a.forwarder.stop(5000)).toBe(true);
    const refused = () =>
      a.senderLog.lines.filter(
        (l) =>
          l.msg ===
          'forwarding: could not record attempts while stopping; they stay pending and are sent again',
      ).length;
    // Once per answer at most, and once more in stop(): a sender that kept trying on its own after
    // its stop would go on logging (checked below, once b has settled everything: the later event
    // that gave it its chance) and would write behind the next holder's back once let through.
    const tried = refused();
    expect(tried).toBeGreaterThanOrEqual(1);
    expect(tried).toBeLessThanOrEqual(open + 1);
    expect((await deliveries(db.pool, 'crm')).map((x) => [x.status, x.attempts])).toEqual(
      messages.map(() => ['pending', 0]),
    );

    await db.pool.query('DROP TRIGGER refuse ON forward_attempts');
    replica(db, 'b', [config('crm', d)]);
    await settled(db.pool, 'crm', messages.length);
    expect(refused()).toBe(tried);
    const all = await attemptsAndRequests(db.pool, d);
    // What a sent went again with b (at-least-once), and only b's attempts are recorded.
    expect(all.map((x) => [x.status, x.attempts])).toEqual(messages.map(() => ['delivered', 1]));
    expect(all.reduce((n, x) => n + x.requests, 0)).toBe(messages.length + open);
  });
});

describe('PostgreSQL restarted', () => {
  it('mid-run: no crash, the replica reconnects, retakes its destinations and delivers everything', async () => {
    // A durable server of its own (this test crashes it): with synchronous_commit off a crash would
    // lose recorded deliveries, and their messages would go twice.
    const own = await startTestPostgres({});
    servers.push(own);
    const base = await database(own);
    // A password in the URL (the server trusts loopback and never asks for it): it must appear in no log.
    const withPassword = new URL(base.url);
    withPassword.password = 's3cret-Pa55word';
    const db = { url: withPassword.toString(), pool: base.pool };
    const dests = await Promise.all([
      destination(() => ({ delayMs: 10 })),
      destination(() => ({ delayMs: 10 })),
    ]);
    const list = [config('crm', dests[0]!), config('dw', dests[1]!)];
    const r = replica(db, 'a', list);
    await waitFor(() => r.forwarder.holding().length === 2, 'the replica to hold both');
    const messages = await store(db.pool, lifecycles(7000, 6, 3), ['crm', 'dw']);
    await waitFor(() => dests[0]!.accepted().length >= 5, 'some delivered before the restart');

    await own.restart({ mode: 'immediate' });
    await waitFor(
      () => r.log.some((l) => l.message.startsWith('forwarding: lost the lock connection')),
      'loss seen',
    );
    await waitFor(() => r.forwarder.holding().length === 2, 'both destinations held again', 60_000);
    for (const name of ['crm', 'dw']) await settled(db.pool, name, messages.length, 60_000);

    for (const d of dests) {
      expect(new Set(d.accepted().map((req) => req.webhookId))).toEqual(
        new Set(messages.map((m) => m.webhook_id)),
      );
      expect(orderViolations(d, messages)).toEqual([]);
      expectSigned(d);
    }
    const logs = JSON.stringify(r.log) + r.senderLog.raw;
    expect(logs).not.toContain('s3cret');
  });
});

describe('the sender store on PostgreSQL (core/sender-queries.ts)', () => {
  it('returns SQLite shapes: numeric ids, ISO times, paused 0/1; gauges per destination in the order asked', async () => {
    const db = await database();
    const messages = await store(db.pool, lifecycles(8000, 2, 1), ['x', 'y']);
    await db.pool.query(
      "INSERT INTO forward_destinations (name, paused, updated_at) VALUES ('y', true, now())",
    );
    const s = senderStore(pgStoreSql(poolRunners(db.pool), db.pool));
    const now = new Date(Date.now() + 1000).toISOString();

    const heads = await s.due('x', now, 10);
    // One head per proposal: the second message of each waits behind the first.
    expect(heads.map((h) => h.order_key)).toEqual(['p:8000', 'p:8001']);
    const [first] = await s.dueDeliveries(heads.map((h) => h.id));
    expect(first).toMatchObject({
      id: heads[0]!.id,
      destination: 'x',
      attempts: 0,
      webhook_id: messages[0]!.webhook_id,
    });
    expect(typeof first!.message_id).toBe('number');
    expect(first!.message_created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(JSON.parse(first!.body).data.payload.dados.nu_cpf).toBe(CPF);

    const retryAt = new Date(Date.now() + 60_000).toISOString();
    await s.record(
      [
        {
          deliveryId: heads[0]!.id,
          attempt: 1,
          startedAt: new Date().toISOString(),
          durationMs: 12.5,
          httpStatus: 503,
          error: null,
          outcome: 'temporary',
          answer: 'busy\u0000',
          next: { status: 'pending', nextAttemptAt: retryAt },
          at: new Date().toISOString(),
        },
      ],
      [{ name: 'x', circuit: '{"state":"open"}', at: new Date().toISOString() }],
    );
    expect((await s.due('x', now, 10)).map((h) => h.order_key)).toEqual(['p:8001']);
    expect(await s.nextDueAt('x', now)).toBe(retryAt);
    const dests = await s.destinations();
    expect(dests.find((row) => row.name === 'x')).toMatchObject({ paused: 0, circuit: '{"state":"open"}' });
    expect(dests.find((row) => row.name === 'y')).toMatchObject({ paused: 1, circuit: null });

    const answers = await rows<{ answer: string }>(db.pool, 'SELECT answer FROM forward_attempts');
    expect(answers).toEqual([{ answer: 'busy' }]); // PostgreSQL's text holds no NUL

    await s.record(
      [
        {
          deliveryId: heads[1]!.id,
          attempt: 1,
          startedAt: new Date().toISOString(),
          durationMs: 3,
          httpStatus: 410,
          error: null,
          outcome: 'permanent',
          answer: null,
          next: { status: 'dead' },
          at: new Date().toISOString(),
        },
      ],
      [],
    );
    const gauges = await destinationGauges(sqlOf(db.pool), ['y', 'x', 'none']);
    expect(gauges.map((g) => [g.destination, g.pending, g.dead, g.paused])).toEqual([
      ['y', messages.length, 0, 1],
      ['x', messages.length - 1, 1, 0],
      ['none', 0, 0, 0],
    ]);
    expect(gauges[0]!.oldest_pending_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(gauges[2]!.oldest_pending_at).toBeNull();
  });
});
