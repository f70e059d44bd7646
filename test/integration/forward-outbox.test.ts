import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { systemClock } from '../../src/clock';
import { loadConfig } from '../../src/config';
import type { Evento } from '../../src/domain/catalogue';
import { classifyDelivery, type Route } from '../../src/domain/delivery';
import { bodyFor, type MessageBody } from '../../src/domain/forwarding/messages';
import { HandlerRouter } from '../../src/domain/event-router';
import { type Db, openDatabase } from '../../src/sqlite/database';
import { createLogger } from '../../src/logger';
import { Pipeline } from '../../src/runtime/single/pipeline';
import { workKeyOf } from '../../src/domain/work-key';
import type { NewEvent } from '../../src/domain/event-status';
import { IngestWriter } from '../../src/sqlite/ingest-writer';
import { replayEvents } from '../../src/core/replay';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openStore, type Store } from '../../src/sqlite/store';
import { delivery, eventually } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';
import { eventById } from '../helpers/events';

/**
 * The outbox (contract §8, migration 0007) written by the real pipeline: a temp SQLite file, the
 * router main.ts builds (life cycle, registry, then the forwarding handler last via onAny),
 * deliveries classified and stored as the webhook route stores them, destinations read from a
 * DESTINATIONS_FILE by the real configuration loader.
 */

const CPF = '12345678909';

/** `averbacoes` wants the proposal changes of the averbação stage only; `everything` wants all. */
const DESTINATIONS_FILE = {
  destinations: [
    {
      name: 'averbacoes',
      url: 'https://los.example/hooks',
      secret: 'averbacoes-secret-1',
      types: ['proposal.changed'],
      eventos: ['averbacao.*'],
    },
    { name: 'everything', url: 'https://dw.example/in', secret: 'everything-secret-1' },
  ],
};

interface MessageRow {
  id: number;
  webhook_id: string;
  type: string;
  event_id: number;
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  order_key: string;
  created_at: string;
  body: string;
}

interface DeliveryRow {
  message_id: number;
  destination: string;
  order_key: string;
  status: string;
  attempts: number;
  next_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
}

let tmp: ReturnType<typeof tempDir>;
let store: Store;
let writer: IngestWriter;
let pipeline: Pipeline;
let partnerDb: Db | null = null;

/**
 * The processing side as runtime/single/single-mode.ts builds it; `partner` registers the partner's handlers
 * (configureHandlers: the partner stage, before the outbox's), run on a connection of their own.
 */
function start(partner?: (router: HandlerRouter) => void): void {
  const dbPath = join(tmp.dir, 'consig.db');
  const destinationsPath = join(tmp.dir, 'destinations.json');
  writeFileSync(destinationsPath, JSON.stringify(DESTINATIONS_FILE));
  const config = loadConfig({ DATABASE_PATH: dbPath, DESTINATIONS_FILE: destinationsPath });
  store = openStore(dbPath, { migrate: true });
  const router = new HandlerRouter();
  partner?.(router);
  partnerDb = partner === undefined ? null : openDatabase(dbPath, { synchronous: 'NORMAL' });
  pipeline = new Pipeline(store.db, {
    stages: {
      schedule: {
        graceMs: config.registry.webhookGraceMs,
        intervalMs: config.registry.pollIntervalMs,
        maxIntervalMs: config.registry.pollMaxIntervalMs,
        maxAgeMs: config.registry.pollMaxAgeMs,
      },
      // The feed on: messages no destination wants are stored too (for it).
      outbox: { destinations: config.forwarding.destinations, feedEnabled: true },
    },
    ...(partnerDb === null ? {} : { partners: { partner: router, db: partnerDb } }),
    maxAttempts: 50,
    clock: systemClock,
    logger: createLogger('silent'),
    backoff: { baseMs: 5, maxMs: 20 },
    sweepIntervalMs: 10,
  });
  writer = new IngestWriter(store.db, store.events, store.deliveries, {
    onStored: (id, event) => {
      if (event.status === 'pending') {
        pipeline.enqueue(id, workKeyOf({ id, nu_proposta: event.nuProposta, request_id: event.requestId }));
      }
    },
  });
  pipeline.start();
}

beforeEach(() => {
  tmp = tempDir('consig-fwd-outbox-');
});

afterEach(async () => {
  await pipeline.stop(5000);
  writer.close();
  partnerDb?.close();
  store.close();
  tmp.cleanup();
});

/** Stores a signed delivery's body as the webhook route does (classified, then written); its event id. */
async function receive(body: unknown, route: Route = 'events'): Promise<number> {
  const raw = Buffer.from(JSON.stringify(body));
  const c = classifyDelivery(raw, route);
  const event: NewEvent = {
    dedupKey: c.dedupKey,
    webhookId: c.webhookId,
    kind: c.kind,
    evento: c.evento,
    nuProposta: c.nuProposta,
    requestId: c.requestId,
    registryStatus: c.registryStatus,
    tentativa: c.tentativa,
    receivedAt: new Date().toISOString(),
    body: c.text ?? raw,
    bodyBytes: raw.length,
    status: c.status,
    lastError: c.invalidReason,
  };
  const stored = await writer.ingest(event, {
    receivedAt: event.receivedAt,
    path: route === 'registry' ? '/webhooks/registry' : '/webhooks',
    bodyBytes: raw.length,
    secretIndex: 0,
    remoteAddr: null,
    detail: null,
    startedAt: performance.now(),
  });
  expect(stored.outcome).toBe('accepted');
  return stored.eventId;
}

/** Stores a poll answer as the registry poller does, and queues it. */
function polled(requestId: string, status: string): number {
  const body = JSON.stringify({ requestId, status });
  const stored = store.events.insertOrCountDuplicate({
    dedupKey: `poll:${requestId}:${status}`,
    webhookId: null,
    kind: 'poll',
    evento: null,
    nuProposta: null,
    requestId,
    registryStatus: status,
    tentativa: null,
    receivedAt: new Date().toISOString(),
    body,
    bodyBytes: Buffer.byteLength(body),
    status: 'pending',
    lastError: null,
  });
  pipeline.enqueue(stored.id, workKeyOf({ id: stored.id, nu_proposta: null, request_id: requestId }));
  return stored.id;
}

async function processed(...ids: number[]): Promise<void> {
  await eventually(
    () => ids.every((id) => eventById(store.db, id)?.status === 'done'),
    `events ${ids.join(', ')} done`,
  );
}

const all = <T>(sql: string, ...params: unknown[]) => store.db.prepare(sql).all(...params) as T[];
const count = (sql: string, ...params: unknown[]) =>
  (store.db.prepare(sql).get(...params) as { n: number }).n;

const messagesOfEvents = (ids: number[]) =>
  all<MessageRow>(
    `SELECT * FROM forward_messages WHERE event_id IN (${ids.map(() => '?').join(',')}) ORDER BY id`,
    ...ids,
  );
const messagesOf = (nu: number) =>
  all<MessageRow>('SELECT * FROM forward_messages WHERE nu_proposta = ? ORDER BY id', nu);
const deliveriesTo = (destination: string) =>
  all<DeliveryRow>('SELECT * FROM forward_deliveries WHERE destination = ? ORDER BY message_id', destination);
const parsed = (m: MessageRow) => JSON.parse(m.body) as MessageBody;

/** A proposal through the first two stages; `averbacao.solicitada` declares registration `req-<nu>`. */
const FLOW: Evento[] = [
  'proposta.criada',
  'proposta.pre_aprovada',
  'proposta.aprovada',
  'averbacao.solicitada',
  'averbacao.aprovada',
];

async function sendFlow(nu: number, eventos: readonly Evento[] = FLOW): Promise<number[]> {
  const ids: number[] = [];
  for (const evento of eventos) {
    const dados = evento === 'averbacao.solicitada' ? { requestId: `req-${nu}` } : {};
    ids.push(await receive(delivery(evento, { nu_proposta: nu, dados })));
  }
  return ids;
}

describe('the outbox, written by the pipeline', () => {
  it('a proposal’s events produce its messages in processing order, with increasing ids', async () => {
    start();
    // Two proposals interleaved, then a late event of the first: each proposal's messages follow
    // its own events, whatever the other does.
    const a: number[] = [];
    const b: number[] = [];
    for (const evento of FLOW.slice(0, 3)) {
      a.push(...(await sendFlow(7001, [evento])));
      b.push(...(await sendFlow(7002, [evento])));
    }
    a.push(...(await sendFlow(7001, FLOW.slice(3))));
    a.push(...(await sendFlow(7001, ['proposta.aprovada']))); // late: recorded, not applied
    await processed(...a, ...b);

    for (const [nu, ids] of [
      [7001, a],
      [7002, b],
    ] as const) {
      const rows = messagesOf(nu);
      const eventos = all<{ id: number; evento: string }>(
        `SELECT id, evento FROM events WHERE id IN (${ids.join(',')}) ORDER BY id`,
      );
      expect(rows.map((m) => [m.event_id, m.type, m.evento])).toEqual(
        eventos.flatMap((e) => [
          [e.id, 'event.received', e.evento],
          [e.id, 'proposal.changed', e.evento],
        ]),
      );
      for (const [i, m] of rows.entries()) {
        if (i > 0) expect(m.id).toBeGreaterThan((rows[i - 1] as MessageRow).id);
        expect(m.order_key).toBe(`p:${nu}`);
        expect(m.webhook_id).toMatch(/^msg_[A-Za-z0-9_-]{22}$/);
        expect(parsed(m)).toMatchObject({ id: m.webhook_id, type: m.type, created_at: m.created_at });
      }
    }
    expect(
      new Set(all<MessageRow>('SELECT webhook_id FROM forward_messages').map((m) => m.webhook_id)).size,
    ).toBe(count('SELECT count(*) AS n FROM forward_messages'));

    const changes = messagesOf(7001)
      .filter((m) => m.type === 'proposal.changed')
      .map((m) => parsed(m).data);
    expect(changes.map((d) => [d.from, d.to, d.applied])).toEqual([
      [null, 'em_analise', true],
      ['em_analise', 'pre_aprovada', true],
      ['pre_aprovada', 'aprovada', true],
      ['aprovada', 'averbacao_solicitada', true],
      ['averbacao_solicitada', 'averbada', true],
      ['averbada', 'aprovada', false],
    ]);
    expect(changes[5]).toMatchObject({ reason: 'late', stage: 'Proposta', from_stage: 'Averbação' });
    expect(changes[5]?.proposal).toMatchObject({ status: 'averbada', stage: 'Averbação' });
    // From averbacao.solicitada on, the change shows the registration it declared.
    expect(changes[3]?.averbacao).toMatchObject({ request_id: 'req-7001', status: 'queued' });
  });

  it('each destination gets exactly the delivery rows it wants, pending and due at once', async () => {
    start();
    const ids = await sendFlow(7101);
    await processed(...ids);
    const messages = messagesOf(7101);
    expect(messages).toHaveLength(FLOW.length * 2);

    const wanted = messages.filter(
      (m) => m.type === 'proposal.changed' && m.evento?.startsWith('averbacao.'),
    );
    expect(wanted.map((m) => m.evento)).toEqual(['averbacao.solicitada', 'averbacao.aprovada']);
    expect(deliveriesTo('averbacoes').map((d) => d.message_id)).toEqual(wanted.map((m) => m.id));
    expect(deliveriesTo('everything').map((d) => d.message_id)).toEqual(messages.map((m) => m.id));

    const now = new Date().toISOString();
    const orderKeys = new Map(messages.map((m) => [m.id, m.order_key]));
    for (const d of all<DeliveryRow>('SELECT * FROM forward_deliveries')) {
      expect(d).toMatchObject({ status: 'pending', attempts: 0, last_status: null, last_error: null });
      expect(d.order_key).toBe(orderKeys.get(d.message_id));
      expect(d.next_attempt_at !== null && d.next_attempt_at <= now).toBe(true);
    }
    expect(count('SELECT count(*) AS n FROM forward_deliveries')).toBe(wanted.length + messages.length);
  });

  it('a result from the registry webhook that completes a tracked averbação: averbacao.result in the proposal’s line', async () => {
    start();
    const ids = await sendFlow(7201, FLOW.slice(0, 4)); // up to averbacao.solicitada (req-7201)
    await processed(...ids);
    const processing = await receive({ requestId: 'req-7201', status: 'processing' }, 'registry');
    const result = { requestId: 'req-7201', status: 'completed', correlationId: 'corr-7201' };
    const completed = await receive(result, 'registry');
    await processed(processing, completed);
    expect(eventById(store.db, completed)).toMatchObject({ kind: 'registry', nu_proposta: null });

    // A result that is not final is received, and nothing more; it waits in the line of the
    // proposal its registration is tracked for, so it cannot overtake the final result.
    expect(messagesOfEvents([processing]).map((m) => [m.type, m.order_key])).toEqual([
      ['event.received', 'p:7201'],
    ]);
    const [received, averbacao, ...rest] = messagesOfEvents([completed]);
    expect(rest).toEqual([]);
    expect(received).toMatchObject({ type: 'event.received', order_key: 'p:7201', nu_proposta: 7201 });
    expect(averbacao).toMatchObject({
      type: 'averbacao.result',
      evento: null,
      nu_proposta: 7201,
      request_id: 'req-7201',
      order_key: 'p:7201',
    });
    expect(parsed(averbacao as MessageRow).data).toMatchObject({
      request_id: 'req-7201',
      correlation_id: 'corr-7201',
      status: 'completed',
      source: 'webhook',
      stale: false,
      nu_proposta: 7201,
      event_id: completed,
      result,
    });
    // `averbacoes` wants proposal.changed only: the result goes to `everything` alone.
    const to = (destination: string) =>
      count(
        'SELECT count(*) AS n FROM forward_deliveries WHERE message_id = ? AND destination = ?',
        (averbacao as MessageRow).id,
        destination,
      );
    expect([to('averbacoes'), to('everything')]).toEqual([0, 1]);
  });

  it('a result found by polling: averbacao.result (source poll), no event.received', async () => {
    start();
    const ids = await sendFlow(7202, FLOW.slice(0, 4));
    await processed(...ids);
    const poll = polled('req-7202', 'error');
    await processed(poll);
    const messages = messagesOfEvents([poll]);
    expect(messages.map((m) => [m.type, m.order_key, m.nu_proposta])).toEqual([
      ['averbacao.result', 'p:7202', 7202],
    ]);
    expect(parsed(messages[0] as MessageRow).data).toMatchObject({
      status: 'error',
      source: 'poll',
      result: { requestId: 'req-7202', status: 'error' },
    });
  });

  it('replaying events already done adds no message and no delivery row', async () => {
    start();
    const ids = await sendFlow(7301);
    const registry = await receive({ requestId: 'req-7301', status: 'completed' }, 'registry');
    await processed(...ids, registry);
    const poll = polled('req-7301', 'completed'); // a late poll answer: the webhook was first
    await processed(poll);
    const before = {
      messages: all<MessageRow>('SELECT * FROM forward_messages ORDER BY id'),
      deliveries: all<DeliveryRow>('SELECT * FROM forward_deliveries ORDER BY id'),
    };
    expect(before.messages.filter((m) => m.type === 'averbacao.result')).toHaveLength(1);

    const all3 = [...ids, registry, poll];
    const now = new Date().toISOString();
    const replayed = await sqliteStoreSql(store.db).write((q) => replayEvents(q, all3, now));
    expect(replayed.queued).toEqual(all3);
    expect(eventById(store.db, registry)?.status).toBe('pending');
    pipeline.sweep();
    await processed(...all3);

    expect(all<MessageRow>('SELECT * FROM forward_messages ORDER BY id')).toEqual(before.messages);
    expect(all<DeliveryRow>('SELECT * FROM forward_deliveries ORDER BY id')).toEqual(before.deliveries);
  });

  it('a partner handler that throws rolls the event’s messages back; once it succeeds, exactly one set', async () => {
    let failures = 0;
    let broken = true;
    start((router) =>
      router.on('proposta.criada', async (event) => {
        if (event.nuProposta === 7401 && broken) {
          failures += 1;
          throw new Error('partner system down');
        }
      }),
    );
    const [criada, preAprovada] = (await sendFlow(7401, FLOW.slice(0, 2))) as [number, number];
    const other = await receive(delivery('proposta.criada', { nu_proposta: 7402 }));
    await processed(other); // another proposal is not held back
    await eventually(() => failures >= 3, 'three failed attempts');
    expect(eventById(store.db, criada)).toMatchObject({
      status: 'failed',
      last_error: 'partner system down',
    });
    // Nothing of the failed event, nor of the event held behind it, was stored.
    expect(messagesOfEvents([criada, preAprovada])).toEqual([]);
    expect(count('SELECT count(*) AS n FROM forward_messages WHERE nu_proposta = 7401')).toBe(0);
    expect(count('SELECT count(*) AS n FROM proposal_transitions WHERE nu_proposta = 7401')).toBe(0);

    broken = false;
    await processed(criada, preAprovada);
    const messages = messagesOf(7401);
    expect(messages.map((m) => [m.event_id, m.type])).toEqual([
      [criada, 'event.received'],
      [criada, 'proposal.changed'],
      [preAprovada, 'event.received'],
      [preAprovada, 'proposal.changed'],
    ]);
    expect(
      count(
        `SELECT count(*) AS n FROM forward_deliveries WHERE message_id IN (${messages.map((m) => m.id).join(',')})`,
      ),
    ).toBe(4); // `everything` only: neither is an averbacao.* change
  });

  it('the stored body holds the CPF in full; bodyFor(…, false) masks it', async () => {
    start();
    const [id] = await sendFlow(7501, ['proposta.criada']);
    await processed(id as number);
    const [received, changed] = messagesOf(7501) as [MessageRow, MessageRow];
    expect(parsed(received).data).toMatchObject({ payload: { dados: { nu_cpf: CPF } } });
    expect(parsed(changed).data).toMatchObject({ proposal: { nu_cpf: CPF } });

    for (const m of [received, changed]) {
      expect(bodyFor(m.body, true)).toBe(m.body);
      const masked = bodyFor(m.body, false);
      expect(masked).not.toContain(CPF);
      expect(masked).toContain('***.456.789-**');
    }
    const maskedChange = JSON.parse(bodyFor(changed.body, false)) as MessageBody;
    expect(maskedChange.data).toMatchObject({ proposal: { nu_cpf: '***.456.789-**' } });
    const maskedReceived = JSON.parse(bodyFor(received.body, false)) as MessageBody;
    expect(maskedReceived.data).toMatchObject({ payload: { dados: { nu_cpf: '***.456.789-**' } } });
  });
});
