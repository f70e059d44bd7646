import { createServer, type Server } from 'node:http';
import { maskCpf } from '../../src/domain/privacy';
import { CPF, lifecycleMessages } from '../helpers/outbox';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { systemClock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import { type Destination, parseDestinationsFile } from '../../src/domain/forwarding/destinations';
import { destinationWants, type OutgoingMessage } from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';
import { FeedWaiters } from '../../src/http/admin/feed-waiters';
import { createApp } from '../../src/http/app';
import { createLogger } from '../../src/logger';
import { createMetrics } from '../../src/metrics';
import Database from '../../src/sqlite/sqlite-driver';
import { CHUNK_ROWS } from '../../src/domain/forwarding/admin';
import { senderStore } from '../../src/core/sender-queries';
import { forwardOutbox } from '../../src/sqlite/sqlite-outbox';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { IngestWriter } from '../../src/sqlite/ingest-writer';
import { openStore, type Store } from '../../src/sqlite/store';
import { sqliteStorePort } from '../../src/sqlite/sqlite-port';
import { SECRET } from '../helpers/payloads';
import { tempDir } from '../helpers/tmp';

/**
 * `/admin/forwards*` and `/admin/destinations*` over real HTTP, on a real SQLite file whose outbox
 * is written by the pipeline's own statements (forwardOutbox) and whose attempts by the sender's
 * (core/sender-queries.ts).
 */

const TOKEN = 'admin-token-forwards';
const DESTINATIONS = parseDestinationsFile(
  JSON.stringify({
    destinations: [
      {
        name: 'crm',
        url: 'https://crm.example/hooks?token=abc',
        secret: 'crm-secret-1',
        types: ['proposal.changed'],
      },
      { name: 'warehouse', url: 'https://dw.example/in', secret: 'dw-secret-1', full_cpf: true },
      { name: 'frozen', url: 'https://frozen.example/', secret: 'frozen-secret-1', paused: true },
      {
        name: 'late',
        url: 'https://late.example/',
        secret: 'late-secret-1',
        types: ['proposal.changed'],
        filter: { 'data.to': { $in: ['aprovada', 'averbada'] } },
      },
    ],
  }),
  'test',
);
// `late` joins after the history was stored: the messages below are routed to the others only.
const LIVE = DESTINATIONS.filter((d) => d.name !== 'late');

interface Answer {
  status: number;
  headers: Headers;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  body: any;
  text: string;
}

let tmp: ReturnType<typeof tempDir>;
let store: Store;
let server: Server;
let url: string;
let writer: IngestWriter;
let nudges: number;

beforeEach(async () => {
  tmp = tempDir('consig-fwd-admin-');
  const dbPath = join(tmp.dir, 'consig.db');
  const config = loadConfig({ DATABASE_PATH: dbPath, ADMIN_TOKEN: TOKEN, WEBHOOK_SECRETS: SECRET });
  store = openStore(dbPath, { migrate: true, busyTimeoutMs: 20 });
  writer = new IngestWriter(store.db, store.events, store.deliveries, { maxBatch: 64 });
  nudges = 0;
  const app = createApp({
    config,
    store,
    storePort: sqliteStorePort(store, { nudge: () => (nudges += 1) }),
    writer,
    metrics: createMetrics({ defaultMetrics: false }),
    logger: createLogger('silent'),
    clock: systemClock,
    forwarding: {
      destinations: DESTINATIONS,
      feedFullCpf: false,
      feedEnabled: true,
      waiters: new FeedWaiters(),
      nudge: () => (nudges += 1),
    },
  });
  server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  writer.close();
  store.close();
  tmp.cleanup();
});

async function admin(
  path: string,
  init: { method?: string; json?: unknown; token?: string } = {},
): Promise<Answer> {
  const res = await fetch(`${url}/admin${path}`, {
    method: init.method ?? 'GET',
    headers: { authorization: `Bearer ${init.token ?? TOKEN}`, 'content-type': 'application/json' },
    ...(init.json === undefined ? {} : { body: JSON.stringify(init.json) }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === '' ? null : JSON.parse(text), text };
}

let eventSeq = 0;

/** The messages the pipeline stores for one processed life-cycle event of proposal `nu`. */
function processed(nu: number, evento: string, to: ProposalStatus, at: string): OutgoingMessage[] {
  eventSeq += 1;
  const id = eventSeq;
  return lifecycleMessages(
    { id, nu, evento, to, at },
    { idPrefix: 't', proposal: { vl_emprestimo: 15000.5, no_conveniada: 'Empresa Exemplo' } },
  );
}

/** Stores them as the outbox handler does: one delivery per destination that wants each. */
function storeMessages(messages: OutgoingMessage[], destinations: readonly Destination[] = LIVE): number[] {
  const outbox = forwardOutbox(store.db);
  return store.db.transaction(() =>
    messages.map((m) =>
      outbox.insert(
        m,
        destinations.filter((d) => destinationWants(d, m)).map((d) => d.name),
      ),
    ),
  )() as number[];
}

const deliveryOf = (messageId: number, destination: string) =>
  store.db
    .prepare('SELECT * FROM forward_deliveries WHERE message_id = ? AND destination = ?')
    .get(messageId, destination) as {
    id: number;
    status: string;
    attempts: number;
    next_attempt_at: string | null;
  };

/** Records one attempt with the sender's own statement. */
async function attempt(
  deliveryId: number,
  n: number,
  outcome: 'delivered' | 'permanent' | 'temporary',
  at: string,
) {
  const next =
    outcome === 'delivered'
      ? { status: 'delivered' as const }
      : outcome === 'permanent'
        ? { status: 'dead' as const }
        : { status: 'pending' as const, nextAttemptAt: '2999-01-01T00:00:00.000Z' };
  await senderStore(sqliteStoreSql(store.db)).record(
    [
      {
        deliveryId,
        attempt: n,
        startedAt: at,
        durationMs: 12.5,
        httpStatus: outcome === 'delivered' ? 200 : outcome === 'permanent' ? 400 : 503,
        error: null,
        outcome,
        answer: outcome === 'permanent' ? '{"error":"bad"}' : 'ok',
        next,
        at,
      },
    ],
    [],
  );
}

/** A circuit as the sender keeps it, with the sender's own statement. */
async function saveCircuit(name: string, circuit: string) {
  await senderStore(sqliteStoreSql(store.db)).record([], [{ name, circuit, at: new Date().toISOString() }]);
}

/**
 * Proposal 7: criada (10:00), aprovada (11:00); proposal 8: criada (12:00). Each event stores
 * event.received and proposal.changed. crm gets proposal.changed; warehouse and frozen get all.
 */
function history() {
  const [r1, c1] = storeMessages(processed(7, 'proposta.criada', 'em_analise', '2026-11-21T10:00:00.000Z'));
  const [r2, c2] = storeMessages(processed(7, 'proposta.aprovada', 'aprovada', '2026-11-21T11:00:00.000Z'));
  const [r3, c3] = storeMessages(processed(8, 'proposta.criada', 'em_analise', '2026-11-21T12:00:00.000Z'));
  return { received: [r1, r2, r3] as number[], changed: [c1, c2, c3] as number[] };
}

describe('GET /admin/forwards', () => {
  it('lists deliveries with their message, newest first, filtered and paged by id', async () => {
    const { changed } = history();
    const all = await admin('/forwards');
    expect(all.status).toBe(200);
    expect(all.body.forwards).toHaveLength(15); // 3 changed × 3 destinations + 3 received × 2
    const ids = all.body.forwards.map((f: { id: number }) => f.id);
    expect(ids).toEqual([...ids].sort((a, b) => b - a));
    expect(all.body.next_before).toBeNull();

    const crm = await admin('/forwards?destination=crm&nu_proposta=7');
    expect(crm.body.forwards.map((f: { message_id: number }) => f.message_id)).toEqual([
      changed[1],
      changed[0],
    ]);
    expect(crm.body.forwards[0]).toMatchObject({
      destination: 'crm',
      status: 'pending',
      attempts: 0,
      type: 'proposal.changed',
      evento: 'proposta.aprovada',
      nu_proposta: 7,
      order_key: 'p:7',
      message_created_at: '2026-11-21T11:00:00.000Z',
    });
    expect(crm.body.forwards[0].webhook_id).toMatch(/^msg_/);
    expect(crm.text).not.toContain(CPF);

    const page1 = await admin('/forwards?type=event.received&destination=warehouse&limit=2');
    expect(page1.body.forwards).toHaveLength(2);
    expect(page1.body.next_before).toBe(page1.body.forwards[1].id);
    const page2 = await admin(
      `/forwards?type=event.received&destination=warehouse&limit=2&before=${page1.body.next_before}`,
    );
    expect(page2.body.forwards).toHaveLength(1);
    expect(page2.body.next_before).toBeNull();

    const range = await admin(
      '/forwards?destination=crm&since=2026-11-21T10:30:00Z&until=2026-11-21T12:00:00.000Z',
    );
    expect(range.body.forwards.map((f: { message_id: number }) => f.message_id)).toEqual([changed[1]]);
    const fromDate = await admin('/forwards?destination=crm&since=2026-11-22');
    expect(fromDate.body.forwards).toEqual([]);
  });

  it('status: delivered, dead, pending and retrying (pending after a failed attempt)', async () => {
    const { changed } = history();
    const [a, b, c] = changed.map((m) => deliveryOf(m, 'crm').id) as [number, number, number];
    await attempt(a, 1, 'delivered', '2026-11-21T10:00:01.000Z');
    await attempt(b, 1, 'permanent', '2026-11-21T11:00:01.000Z');
    await attempt(c, 1, 'temporary', '2026-11-21T12:00:01.000Z');
    const ids = async (status: string) =>
      (await admin(`/forwards?destination=crm&status=${status}`)).body.forwards.map(
        (f: { id: number }) => f.id,
      );
    expect(await ids('delivered')).toEqual([a]);
    expect(await ids('dead')).toEqual([b]);
    expect(await ids('pending')).toEqual([c]);
    expect(await ids('retrying')).toEqual([c]);
  });

  it.each([
    ['status=lost', 'status must be one of pending, retrying, delivered, dead'],
    ['type=proposal', 'type must be event.received, proposal.changed or averbacao.result'],
    ['since=yesterday', 'since must be an ISO 8601 date'],
    ['until=2026-02-30', 'until must be an ISO 8601 date'],
    ['since=2026-11-21T10:00:00', 'since must be an ISO 8601 date'],
    ['limit=0', 'limit must be an integer from 1 to 1000'],
    ['limit=1001', 'limit must be an integer from 1 to 1000'],
    ['before=x', 'before must be a non-negative integer'],
    ['destination=a&destination=b', 'destination may be given only once'],
  ])('a bad query (%s) is 400 naming the parameter', async (query, message) => {
    const res = await admin(`/forwards?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('bad_request');
    expect(res.body.message).toContain(message);
  });

  it('needs the admin token', async () => {
    expect((await admin('/forwards', { token: 'wrong' })).status).toBe(401);
  });
});

describe('GET /admin/forwards/:id', () => {
  it('shows the delivery, its message as that destination gets it, and every attempt in order', async () => {
    const { changed } = history();
    const crm = deliveryOf(changed[0] as number, 'crm').id;
    await attempt(crm, 1, 'temporary', '2026-11-21T10:00:01.000Z');
    await attempt(crm, 2, 'permanent', '2026-11-21T10:00:05.000Z');
    const res = await admin(`/forwards/${crm}`);
    expect(res.status).toBe(200);
    expect(res.body.delivery).toMatchObject({
      id: crm,
      destination: 'crm',
      status: 'dead',
      attempts: 2,
      last_status: 400,
    });
    expect(res.body.message).toMatchObject({
      type: 'proposal.changed',
      data: { nu_proposta: 7, to: 'em_analise' },
    });
    expect(res.body.message.id).toBe(res.body.delivery.webhook_id);
    // crm does not see the CPF in full…
    expect(res.body.message.data.proposal.nu_cpf).toBe('***.456.789-**');
    expect(res.text).not.toContain(CPF);
    expect(res.body.attempts).toEqual([
      expect.objectContaining({
        attempt: 1,
        outcome: 'temporary',
        http_status: 503,
        duration_ms: 12.5,
        answer: 'ok',
      }),
      expect.objectContaining({
        attempt: 2,
        outcome: 'permanent',
        http_status: 400,
        answer: '{"error":"bad"}',
      }),
    ]);
    // …the warehouse does (full_cpf: true), but the admin answer never does (contract §5).
    const dw = await admin(`/forwards/${deliveryOf(changed[0] as number, 'warehouse').id}`);
    expect(dw.body.message.data.proposal.nu_cpf).toBe(maskCpf(CPF));
    expect(dw.text).not.toContain(CPF);
    expect(dw.body.attempts).toEqual([]);
  });

  it('404 for an unknown id, 400 for one that is not an id', async () => {
    expect((await admin('/forwards/999999')).body).toEqual({
      error: 'not_found',
      message: 'no forward 999999',
    });
    expect((await admin('/forwards/999999')).status).toBe(404);
    const bad = await admin('/forwards/abc');
    expect(bad).toMatchObject({
      status: 400,
      body: { error: 'bad_request', message: 'id must be a positive integer' },
    });
  });
});

describe('POST /admin/forwards/:id/replay', () => {
  it('puts a dead delivery back to pending, attempts 0, due now, and nudges the sender', async () => {
    const { changed } = history();
    const id = deliveryOf(changed[0] as number, 'crm').id;
    await attempt(id, 1, 'permanent', '2026-11-21T10:00:01.000Z');
    const before = Date.now();
    const res = await admin(`/forwards/${id}/replay`, { method: 'POST' });
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({
      status: 'queued',
      replayed: 1,
      by_status: { dead: 1, delivered: 0, pending: 0 },
      delivery: { id, status: 'pending', attempts: 0, last_status: 400 },
    });
    const row = deliveryOf(changed[0] as number, 'crm');
    expect(row).toMatchObject({ status: 'pending', attempts: 0 });
    expect(Date.parse(row.next_attempt_at as string)).toBeGreaterThanOrEqual(before - 5);
    expect(nudges).toBe(1);
    // The attempts before the replay stay in the history.
    expect((await admin(`/forwards/${id}`)).body.attempts).toHaveLength(1);
  });

  it('a delivered one starts over; a pending one retrying later is due now, its attempts kept', async () => {
    const { changed } = history();
    const delivered = deliveryOf(changed[0] as number, 'crm').id;
    const retrying = deliveryOf(changed[1] as number, 'crm').id;
    await attempt(delivered, 1, 'delivered', '2026-11-21T10:00:01.000Z');
    await attempt(retrying, 1, 'temporary', '2026-11-21T11:00:01.000Z');
    await admin(`/forwards/${delivered}/replay`, { method: 'POST' });
    const res = await admin(`/forwards/${retrying}/replay`, { method: 'POST' });
    expect(res.body.by_status).toEqual({ dead: 0, delivered: 0, pending: 1 });
    expect(deliveryOf(changed[0] as number, 'crm')).toMatchObject({
      status: 'pending',
      attempts: 0,
      delivered_at: null,
    });
    const row = deliveryOf(changed[1] as number, 'crm');
    expect(row).toMatchObject({ status: 'pending', attempts: 1 });
    expect(row.next_attempt_at! < '2999').toBe(true);
  });

  it('404 for an unknown delivery', async () => {
    const res = await admin('/forwards/4242/replay', { method: 'POST' });
    expect(res).toMatchObject({ status: 404, body: { error: 'not_found' } });
    expect(nudges).toBe(0);
  });
});

describe('POST /admin/forwards/replay', () => {
  it('a dry run only counts; the replay resets what the filter matches', async () => {
    const { changed, received } = history();
    for (const m of [...changed, ...received])
      await attempt(deliveryOf(m, 'warehouse').id, 1, 'permanent', '2026-11-21T13:00:00.000Z');
    await attempt(deliveryOf(changed[0] as number, 'crm').id, 1, 'permanent', '2026-11-21T13:00:00.000Z');
    const filter = { destination: 'warehouse', status: 'dead', nu_proposta: 7 };
    const dry = await admin('/forwards/replay', { method: 'POST', json: { ...filter, dry_run: true } });
    expect(dry).toMatchObject({
      status: 200,
      body: { dry_run: true, matched: 4, by_status: { dead: 4, delivered: 0, pending: 0 } },
    });
    expect((await admin('/forwards?status=dead')).body.forwards).toHaveLength(7);

    const res = await admin('/forwards/replay', { method: 'POST', json: filter });
    expect(res).toMatchObject({
      status: 202,
      body: { status: 'queued', replayed: 4, by_status: { dead: 4, delivered: 0, pending: 0 } },
    });
    expect(nudges).toBe(1);
    // Proposal 8 at the warehouse and crm's dead letter are untouched.
    const dead = (await admin('/forwards?status=dead')).body.forwards;
    expect(
      dead.map((f: { destination: string; nu_proposta: number }) => [f.destination, f.nu_proposta]).sort(),
    ).toEqual([
      ['crm', 7],
      ['warehouse', 8],
      ['warehouse', 8],
    ]);
    const since = await admin('/forwards/replay', {
      method: 'POST',
      json: { since: '2026-11-21T12:00:00Z', status: 'dead' },
    });
    expect(since.body.replayed).toBe(2);
  });

  it('an empty filter is refused (400 filter_required), with or without a body', async () => {
    history();
    for (const json of [{}, { dry_run: true }, undefined]) {
      const res = await admin('/forwards/replay', { method: 'POST', json });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('filter_required');
    }
    expect(nudges).toBe(0);
  });

  it.each([
    [{ destinaton: 'crm', status: 'dead' }, 'unknown field destinaton'],
    [{ status: 'gone' }, 'status must be one of'],
    [{ since: 'last week' }, 'since must be an ISO 8601 date'],
    [{ destination: 5 }, 'destination must be a non-empty string'],
    [{ status: 'dead', dry_run: 'yes' }, 'dry_run must be true or false'],
    [[1, 2], 'the body must be a JSON object'],
  ])('a bad body (%j) is 400 naming the field', async (json, message) => {
    const res = await admin('/forwards/replay', { method: 'POST', json });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('bad_request');
    expect(res.body.message).toContain(message);
  });

  it(`replays more than one chunk (${CHUNK_ROWS} rows per transaction)`, async () => {
    const outbox = forwardOutbox(store.db);
    const total = CHUNK_ROWS * 2 + 7;
    store.db.transaction(() => {
      for (let i = 0; i < total; i++) {
        for (const m of processed(100 + i, 'proposta.criada', 'em_analise', '2026-11-20T00:00:00.000Z')) {
          if (m.type === 'proposal.changed') outbox.insert(m, ['crm']);
        }
      }
      store.db.prepare("UPDATE forward_deliveries SET status = 'dead', attempts = 3").run();
    })();
    const res = await admin('/forwards/replay', {
      method: 'POST',
      json: { destination: 'crm', status: 'dead' },
    });
    expect(res.body).toEqual({
      status: 'queued',
      replayed: total,
      by_status: { dead: total, delivered: 0, pending: 0 },
    });
    const left = store.db
      .prepare("SELECT count(*) AS n FROM forward_deliveries WHERE status = 'pending' AND attempts = 0")
      .get();
    expect(left).toEqual({ n: total });
  });

  it('a database locked by another connection is 503 storage_busy with Retry-After', async () => {
    const { changed } = history();
    const id = deliveryOf(changed[0] as number, 'crm').id;
    const other = new Database(store.path);
    other.exec('BEGIN IMMEDIATE');
    try {
      for (const [path, json] of [
        [`/forwards/${id}/replay`, undefined],
        ['/forwards/replay', { destination: 'crm' }],
        ['/forwards/backfill', { destination: 'late' }],
        ['/destinations/crm/pause', undefined],
      ] as const) {
        const res = await admin(path, { method: 'POST', json });
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(res.body.error).toBe('storage_busy');
      }
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
  });
});

describe('POST /admin/forwards/backfill', () => {
  it('creates deliveries only for the messages the destination wants and lacks; twice creates nothing', async () => {
    const { changed } = history();
    // late wants proposal.changed to aprovada/averbada only: one of the three.
    const first = await admin('/forwards/backfill', { method: 'POST', json: { destination: 'late' } });
    expect(first).toMatchObject({
      status: 202,
      body: { status: 'queued', destination: 'late', matched: 1, created: 1 },
    });
    expect(nudges).toBe(1);
    const rows = store.db
      .prepare(
        "SELECT message_id, status, attempts, order_key FROM forward_deliveries WHERE destination = 'late'",
      )
      .all();
    expect(rows).toEqual([{ message_id: changed[1], status: 'pending', attempts: 0, order_key: 'p:7' }]);
    const again = await admin('/forwards/backfill', { method: 'POST', json: { destination: 'late' } });
    expect(again.body).toMatchObject({ matched: 1, created: 0 });
  });

  it('a range: one proposal, or a time window; a destination that already has the rows gets none', async () => {
    history();
    storeMessages(processed(9, 'proposta.aprovada', 'aprovada', '2026-11-21T14:00:00.000Z'));
    const byProposal = await admin('/forwards/backfill', {
      method: 'POST',
      json: { destination: 'late', nu_proposta: '9' },
    });
    expect(byProposal.body).toMatchObject({ matched: 1, created: 1 });
    const window = await admin('/forwards/backfill', {
      method: 'POST',
      json: { destination: 'late', since: '2026-11-21T10:30:00Z', until: '2026-11-21T13:00:00Z' },
    });
    expect(window.body).toMatchObject({ matched: 1, created: 1 });
    const all = await admin('/forwards/backfill', { method: 'POST', json: { destination: 'late' } });
    expect(all.body).toMatchObject({ matched: 2, created: 0 });
    // crm was routed every proposal.changed when they were stored.
    const crm = await admin('/forwards/backfill', { method: 'POST', json: { destination: 'crm' } });
    expect(crm.body).toMatchObject({ matched: 4, created: 0 });
  });

  it('404 for a destination that is not configured; 400 without one or with a bad range', async () => {
    const unknown = await admin('/forwards/backfill', { method: 'POST', json: { destination: 'nowhere' } });
    expect(unknown.status).toBe(404);
    expect(unknown.body.message).toContain('no destination "nowhere" is configured');
    const missing = await admin('/forwards/backfill', { method: 'POST', json: { nu_proposta: 7 } });
    expect(missing).toMatchObject({ status: 400, body: { error: 'bad_request' } });
    expect(missing.body.message).toContain('destination');
    const bad = await admin('/forwards/backfill', {
      method: 'POST',
      json: { destination: 'late', until: 'soon' },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toContain('until');
    const extra = await admin('/forwards/backfill', {
      method: 'POST',
      json: { destination: 'late', status: 'dead' },
    });
    expect(extra.status).toBe(400);
    expect(extra.body.message).toContain('unknown field status');
  });
});

describe('destinations', () => {
  it('lists configured destinations (no secrets), counts, circuit, and names no longer configured', async () => {
    const { changed } = history();
    await attempt(deliveryOf(changed[0] as number, 'crm').id, 1, 'delivered', '2026-11-21T10:00:01.000Z');
    await attempt(deliveryOf(changed[1] as number, 'crm').id, 1, 'temporary', '2026-11-21T11:00:01.000Z');
    const circuit = { state: 'open', since: 1, until: 2, failures: 5 };
    await saveCircuit('warehouse', JSON.stringify(circuit));
    storeMessages(processed(10, 'proposta.criada', 'em_analise', '2026-11-21T15:00:00.000Z'), [
      ...LIVE,
      { ...(LIVE[0] as Destination), name: 'old', types: ['*'] },
    ]);
    const res = await admin('/destinations');
    expect(res.status).toBe(200);
    expect(res.text).not.toMatch(/secret|token=abc/);
    const byName = Object.fromEntries(res.body.destinations.map((d: { name: string }) => [d.name, d]));
    expect(res.body.destinations.map((d: { name: string }) => d.name)).toEqual([
      'crm',
      'warehouse',
      'frozen',
      'late',
      'old',
    ]);
    expect(byName.crm).toEqual({
      name: 'crm',
      configured: true,
      url: 'https://crm.example/hooks?…',
      types: ['proposal.changed'],
      eventos: ['*'],
      has_filter: false,
      full_cpf: false,
      paused: false,
      paused_in_config: false,
      paused_by_operator: false,
      counts: { pending: 3, retrying: 1, delivered: 1, dead: 0 },
      oldest_pending_at: '2026-11-21T11:00:00.000Z',
      circuit: { state: 'closed', failures: 0 },
    });
    expect(byName.warehouse).toMatchObject({ full_cpf: true, circuit, counts: { pending: 8, delivered: 0 } });
    expect(byName.frozen).toMatchObject({ paused: true, paused_in_config: true });
    expect(byName.late).toMatchObject({
      has_filter: true,
      counts: { pending: 0, retrying: 0, delivered: 0, dead: 0 },
    });
    expect(byName.old).toMatchObject({ configured: false, url: null, paused: false, counts: { pending: 2 } });
  });

  it('pause and resume: the flag is stored for the sender; resume nudges it', async () => {
    const paused = await admin('/destinations/crm/pause', { method: 'POST' });
    expect(paused).toMatchObject({
      status: 200,
      body: { status: 'paused', destination: { name: 'crm', paused: true, paused_by_operator: true } },
    });
    expect(store.db.prepare("SELECT paused FROM forward_destinations WHERE name = 'crm'").get()).toEqual({
      paused: 1,
    });
    expect(nudges).toBe(0);
    const resumed = await admin('/destinations/crm/resume', { method: 'POST' });
    expect(resumed).toMatchObject({
      status: 200,
      body: { status: 'resumed', destination: { name: 'crm', paused: false } },
    });
    expect(store.db.prepare("SELECT paused FROM forward_destinations WHERE name = 'crm'").get()).toEqual({
      paused: 0,
    });
    expect(nudges).toBe(1);
  });

  it('pause keeps the circuit the sender stored', async () => {
    const circuit = JSON.stringify({ state: 'open', since: 1, until: 2, failures: 5 });
    await saveCircuit('crm', circuit);
    await admin('/destinations/crm/pause', { method: 'POST' });
    expect(
      store.db.prepare("SELECT paused, circuit FROM forward_destinations WHERE name = 'crm'").get(),
    ).toEqual({ paused: 1, circuit });
  });

  it('a destination paused in its configuration cannot be resumed here: 409 paused_in_config', async () => {
    const res = await admin('/destinations/frozen/resume', { method: 'POST' });
    expect(res.status).toBe(409);
    expect(res.body.error).toBe('paused_in_config');
    expect(res.body.message).toContain('frozen');
    expect(nudges).toBe(0);
  });

  it('404 for a destination that is not configured', async () => {
    for (const action of ['pause', 'resume']) {
      const res = await admin(`/destinations/nowhere/${action}`, { method: 'POST' });
      expect(res).toMatchObject({ status: 404, body: { error: 'not_found' } });
    }
  });
});
