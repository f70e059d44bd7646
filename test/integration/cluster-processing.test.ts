import { readdirSync, readlinkSync, realpathSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { POLL_QUEUE, startEngine } from '../../src/postgres/pg-queues';
import { runTurns } from '../../src/runtime/cluster/turn';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { sqlOf } from '../../src/postgres/pg-sql';
import { startTestApp, type TestApp } from '../helpers/app';
import {
  count,
  drain,
  failEvent,
  dropFailureTrigger,
  installFailureTrigger,
  memoryLogger,
  openPool,
  recordingTurns,
  relayOf,
  rows,
  sendSigned,
  spoolsRelayed,
  waitFor,
} from '../helpers/cluster-db';
import { type FakeService, startFakeService } from '../helpers/fake-service';
import { delivery } from '../helpers/payloads';
import { createTestDatabase, workerPostgres, migrateUrl } from '../helpers/postgres';
import { runCliAsync } from '../helpers/process';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Processing in cluster mode (contract §10, docs/cluster.md §5), unmocked: real receivers with
 * DATABASE_URL (spool → relay → pg-boss turns → PostgreSQL effects) on a real PostgreSQL this file
 * starts, compared with a receiver on SQLite alone given the same deliveries; failures provoked
 * for real by a trigger in the test database; registry polls against a real HTTP fake of the service.
 */

let pg: LocalPostgres;
beforeAll(async () => {
  pg = await workerPostgres();
});
afterAll(async () => {
  await pg?.stop();
});

let url: string;
let pool: Pool;
const receivers: TestReceiver[] = [];
const apps: TestApp[] = [];
let fake: FakeService | null = null;
let outboxDir: ReturnType<typeof tempDir>;
beforeEach(async () => {
  outboxDir = tempDir();
  url = await createTestDatabase(pg, 'proc');
  pool = openPool(url);
});
afterEach(async () => {
  for (const r of receivers.splice(0)) await r.stop();
  for (const a of apps.splice(0)) await a.close();
  await fake?.close();
  fake = null;
  await pool.end();
  outboxDir.cleanup();
});

/** A replica in cluster mode: the whole receiver with DATABASE_URL, connected and running. */
async function clusterReplica(name: string, env: Record<string, string> = {}): Promise<TestReceiver> {
  const r = await startTestReceiver({
    env: {
      DATABASE_URL: url,
      REPLICA_ID: name,
      RELAY_INTERVAL_MS: '20',
      CLUSTER_CONCURRENCY: '2',
      ...env,
    },
  });
  receivers.push(r);
  await waitFor(() => r.runtime.state === 'running', `replica ${name} connected to PostgreSQL`);
  return r;
}

/** A receiver on SQLite alone (no DATABASE_URL): the pipeline processes in-process. */
async function sqliteReceiver(env: Record<string, string> = {}): Promise<TestReceiver> {
  const r = await startTestReceiver({ env });
  receivers.push(r);
  expect(r.clustered).toBe(false);
  return r;
}

async function ack(
  r: { url: string },
  body: unknown,
  status = 'accepted',
  path = '/webhooks',
): Promise<void> {
  const res = await sendSigned(r.url, body, path);
  expect(res.status).toBe(200);
  expect(res.body.status).toBe(status);
}

const webhookId = (body: Record<string, unknown>) => (body.metadata as { webhook_id: string }).webhook_id;

/**
 * How long a due job (a handler retry, a registry poll) may take to be picked up before the test
 * calls it lost. The workers are configured to poll every 0.5–1 s (src/runtime/cluster/node.ts) and the
 * tests' backoff is 10–40 ms: this is a bound for a hang, far above either, not a performance figure.
 */
const DUE_JOB_BOUND_MS = 15_000;

const unfinished = "SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')";

/** Every event PostgreSQL holds is final, and `n` of them there are. */
const pgSettled = (n: number, timeoutMs?: number) =>
  waitFor(
    async () =>
      (await count(pool, 'SELECT count(*) AS n FROM events')) === n && (await count(pool, unfinished)) === 0,
    `${n} events processed in PostgreSQL`,
    timeoutMs,
  );

interface PgEventRow {
  id: string;
  dedup_key: string;
  status: string;
  attempts: number;
  last_error: string | null;
  next_attempt_at: Date | null;
  processed_at: Date | null;
}

async function pgEventsByKey(): Promise<Map<string, PgEventRow>> {
  const list = await rows<PgEventRow>(
    pool,
    'SELECT id, dedup_key, status, attempts, last_error, next_attempt_at, processed_at FROM events ORDER BY id',
  );
  return new Map(list.map((e) => [e.dedup_key, e]));
}

const proposalStatus = async (nu: number) =>
  (
    await rows<{ status: string }>(pool, 'SELECT status FROM proposals WHERE nu_proposta = $1', [String(nu)])
  )[0]?.status;

// --- "one life cycle, two stores": the same deliveries through SQLite mode and cluster mode ---------

const CNPJ = '11222333000181';
const dadosOf = (nu: number) => ({
  uuid: `b5f1c0de-0000-4000-8000-00000000${nu}`,
  nu_cnpj_conveniada: CNPJ,
});

interface Step {
  path?: string;
  body: Record<string, unknown>;
  status?: string;
  /** Before sending: wait until this registration is tracked (the registry webhook must not win the race against its tracking). */
  afterTracked?: string;
  /**
   * Before sending: wait until this registration is completed. In cluster mode a registry result
   * (work key r:<requestId>) and the proposal's next event (p:<nu>) are different keys, processed
   * concurrently: without the wait, the next event's message could show the averbação before or
   * after the result (docs/cluster-mode.md, differences from SQLite mode).
   */
  afterCompleted?: string;
}

/**
 * Proposal 9101: the whole happy path, its averbação completed by the registry webhook.
 * Proposal 9102: approved before its pre-approval (late), denied, then an averbação event after the
 * final status. Proposal 9103: first seen mid-way, its creation arriving late. Proposal ADE-77: a
 * number that is text. A repeated delivery, an unknown `evento` and an event without nu_proposta.
 */
function scenario(): Step[] {
  const ev = (evento: string, nu: number, dados: Record<string, unknown> = {}) =>
    delivery(evento, { nu_proposta: nu, dados: { ...dadosOf(nu), ...dados } });
  const happy = [
    ev('proposta.criada', 9101),
    ev('proposta.pre_aprovada', 9101, { vl_emprestimo: 14000.25 }),
    ev('proposta.aprovada', 9101),
    ev('averbacao.solicitada', 9101, { requestId: 'req-9101', correlationId: 'corr-9101' }),
  ];
  const rest = [
    'averbacao.aprovada',
    'formalizacao.iniciada',
    'formalizacao.concluida',
    'efetivacao.concluida',
    'pagamento.falha',
    'pagamento.realizado',
  ].map((evento) => ev(evento, 9101));
  const registry = { requestId: 'req-9101', status: 'completed', correlationId: 'corr-9101' };
  const odd = [
    ev('proposta.criada', 9102),
    ev('proposta.aprovada', 9102),
    ev('proposta.pre_aprovada', 9102),
    ev('proposta.negada', 9102),
    ev('averbacao.solicitada', 9102),
    ev('averbacao.aprovada', 9103),
    ev('proposta.criada', 9103),
    ev('proposta.reavaliada', 9103),
    // A proposal number that is not a number (kept as text by both stores).
    delivery('proposta.criada', { dados: { nu_proposta: 'ADE-77' } }),
    delivery('proposta.aprovada', { dados: { nu_proposta: 'ADE-77' } }),
    // A life-cycle event without nu_proposta: processed (work key e:<id>), moves nothing.
    {
      evento: 'proposta.criada',
      dados: { nu_cpf: '12345678909' },
      metadata: { webhook_id: `wh_nonu_${process.pid}` },
    },
  ];
  return [
    ...happy.map((body) => ({ body })),
    { body: happy[1]!, status: 'duplicate' },
    { body: registry, path: '/webhooks/registry', afterTracked: 'req-9101' },
    ...rest.map((body, i) => (i === 0 ? { body, afterCompleted: 'req-9101' } : { body })),
    ...odd.map((body) => ({ body })),
  ];
}

/** Sends the scenario's steps in order; `tracked` says whether a registration is tracked yet. */
async function play(
  r: TestReceiver,
  steps: Step[],
  statusOf: (requestId: string) => Promise<string | undefined>,
) {
  for (const step of steps) {
    const { afterTracked, afterCompleted } = step;
    if (afterTracked !== undefined)
      await waitFor(async () => (await statusOf(afterTracked)) !== undefined, `${afterTracked} tracked`);
    if (afterCompleted !== undefined)
      await waitFor(
        async () => (await statusOf(afterCompleted)) === 'completed',
        `${afterCompleted} completed`,
      );
    await ack(r, step.body, step.status ?? 'accepted', step.path);
  }
}

type Row = Record<string, unknown>;

/** The life-cycle tables with each store's types normalised and event ids replaced by dedup keys. */
function normalise(tables: {
  events: Row[];
  proposals: Row[];
  transitions: Row[];
  averbacoes: Row[];
}): Record<string, Row[]> {
  const keyOf = new Map(tables.events.map((e) => [String(e.id), e.dedup_key]));
  const key = (id: unknown) => (id === null ? null : (keyOf.get(String(id)) ?? `unknown:${String(id)}`));
  const text = (v: unknown) => (v === null ? null : String(v));
  const num = (v: unknown) => (v === null ? null : Number(v));
  return {
    events: tables.events.map((e) => ({
      dedup_key: e.dedup_key,
      kind: e.kind,
      evento: e.evento,
      nu_proposta: text(e.nu_proposta),
      request_id: e.request_id,
      registry_status: e.registry_status,
      status: e.status,
      attempts: num(e.attempts),
      duplicates: num(e.duplicates),
      last_error: e.last_error,
    })),
    proposals: tables.proposals.map((p) => ({
      nu_proposta: text(p.nu_proposta),
      uuid: p.uuid,
      nu_cpf: p.nu_cpf,
      nu_cnpj_conveniada: p.nu_cnpj_conveniada,
      vl_emprestimo: num(p.vl_emprestimo),
      no_conveniada: p.no_conveniada,
      stage: p.stage,
      status: p.status,
      last_evento: p.last_evento,
      first_event: key(p.first_event_id),
      last_event: key(p.last_event_id),
    })),
    transitions: tables.transitions.map((t) => ({
      nu_proposta: text(t.nu_proposta),
      event: key(t.event_id),
      evento: t.evento,
      from_status: t.from_status,
      to_status: t.to_status,
      applied: Boolean(t.applied),
      reason: t.reason,
    })),
    averbacoes: tables.averbacoes.map((a) => ({
      request_id: a.request_id,
      correlation_id: a.correlation_id,
      nu_proposta: text(a.nu_proposta),
      status: a.status,
      result_source: a.result_source,
      tracked_via: a.tracked_via,
      poll_attempts: num(a.poll_attempts),
      stale: Boolean(a.stale),
      result_body: a.result_body,
      result_event: key(a.result_event_id),
      polling: a.next_poll_at !== null,
      completed: a.completed_at !== null,
    })),
  };
}

/**
 * The outbox with each store's types normalised: the random `webhook-id`s and every time dropped,
 * event ids replaced by dedup keys; messages in their order-key lines, each line in id order (the
 * order a destination and the feed see them).
 */
function normaliseOutbox(events: Row[], messages: Row[], deliveries: Row[]): Row[] {
  const keyOf = new Map(events.map((e) => [String(e.id), e.dedup_key]));
  const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;
  const clean = (v: unknown, key = ''): unknown => {
    if (typeof v === 'string' && iso.test(v)) return '<time>';
    if (key === 'event_id') return keyOf.get(String(v)) ?? `unknown:${String(v)}`;
    if (Array.isArray(v)) return v.map((x) => clean(x));
    if (v !== null && typeof v === 'object')
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, clean(x, k)]));
    return v;
  };
  const byLine = [...messages].sort(
    (a, b) => String(a.order_key).localeCompare(String(b.order_key)) || Number(a.id) - Number(b.id),
  );
  return byLine.map((m) => {
    const { id: _id, created_at: _at, ...body } = JSON.parse(String(m.body)) as Row;
    return {
      type: m.type,
      event: keyOf.get(String(m.event_id)),
      evento: m.evento,
      nu_proposta: m.nu_proposta === null ? null : String(m.nu_proposta),
      request_id: m.request_id,
      order_key: m.order_key,
      body: clean(body),
      // Line up key-order with the message (the delivery rows of one message are one per destination).
      deliveries: deliveries
        .filter((d) => String(d.message_id) === String(m.id))
        .map((d) => [d.destination, d.order_key, d.status]),
    };
  });
}

const TABLE_QUERIES = {
  events: 'SELECT * FROM events ORDER BY id',
  proposals: 'SELECT * FROM proposals ORDER BY nu_proposta',
  // A proposal's transitions in the order they were recorded; proposals in number order.
  transitions: 'SELECT * FROM proposal_transitions ORDER BY nu_proposta, id',
  averbacoes: 'SELECT * FROM averbacoes ORDER BY request_id',
};

const OUTBOX_QUERIES = {
  messages: 'SELECT * FROM forward_messages ORDER BY id',
  deliveries: 'SELECT * FROM forward_deliveries ORDER BY id',
};

describe('one life cycle, two stores', () => {
  it('the same deliveries give the same proposals, transitions and averbações in SQLite mode and in cluster mode', async () => {
    const steps = scenario();
    const total = steps.filter((s) => s.status !== 'duplicate').length;

    // Forwarding on (a paused destination that wants everything: messages are stored, none sent)
    // and the change feed on: the outbox is compared too.
    const destinations = join(outboxDir.dir, 'destinations.json');
    writeFileSync(
      destinations,
      JSON.stringify({
        destinations: [{ name: 'crm', url: 'http://127.0.0.1:9/', secret: 'crm-secret', paused: true }],
      }),
    );
    const forwarding = { DESTINATIONS_FILE: destinations, FEED_ENABLED: 'true' };
    const lite = await sqliteReceiver(forwarding);
    await play(lite, steps, async (id) => lite.store.averbacoes.get(id)?.status);
    const liteDb = lite.store.db;
    await waitFor(
      () =>
        (liteDb.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n === total &&
        (liteDb.prepare(unfinished).get() as { n: number }).n === 0,
      'SQLite mode processed everything',
    );
    const sqlite = normalise({
      events: liteDb.prepare(TABLE_QUERIES.events).all() as Row[],
      proposals: liteDb.prepare(TABLE_QUERIES.proposals).all() as Row[],
      transitions: liteDb.prepare(TABLE_QUERIES.transitions).all() as Row[],
      averbacoes: liteDb.prepare(TABLE_QUERIES.averbacoes).all() as Row[],
    });
    const liteOutbox = normaliseOutbox(
      liteDb.prepare(TABLE_QUERIES.events).all() as Row[],
      liteDb.prepare(OUTBOX_QUERIES.messages).all() as Row[],
      liteDb.prepare(OUTBOX_QUERIES.deliveries).all() as Row[],
    );

    const node = await clusterReplica('replica-a', forwarding);
    await play(
      node,
      steps,
      async (id) =>
        (await rows<{ status: string }>(pool, 'SELECT status FROM averbacoes WHERE request_id = $1', [id]))[0]
          ?.status,
    );
    await pgSettled(total);
    const cluster = normalise({
      events: await rows(pool, TABLE_QUERIES.events),
      proposals: await rows(pool, TABLE_QUERIES.proposals),
      transitions: await rows(pool, TABLE_QUERIES.transitions),
      averbacoes: await rows(pool, TABLE_QUERIES.averbacoes),
    });

    expect(cluster).toEqual(sqlite);
    const clusterOutbox = normaliseOutbox(
      await rows(pool, TABLE_QUERIES.events),
      await rows(pool, OUTBOX_QUERIES.messages),
      await rows(pool, OUTBOX_QUERIES.deliveries),
    );
    expect(clusterOutbox).toEqual(liteOutbox);
    // Every kind of message is there, each waiting for the paused destination.
    expect(new Set(clusterOutbox.map((m) => m.type))).toEqual(
      new Set(['event.received', 'proposal.changed', 'averbacao.result']),
    );
    expect(clusterOutbox.every((m) => JSON.stringify(m.deliveries).includes('"pending"'))).toBe(true);

    // And what they agree on is the contract (§6), not a shared mistake.
    const byNu = (nu: string) => cluster.transitions!.filter((t) => t.nu_proposta === nu);
    expect(cluster.proposals!.map((p) => [p.nu_proposta, p.status])).toEqual([
      ['9101', 'paga'],
      ['9102', 'negada'],
      ['9103', 'averbada'],
      ['ADE-77', 'aprovada'],
    ]);
    expect(byNu('9101')).toHaveLength(10); // one per event of the proposal, the duplicate not counted
    expect(byNu('9101').every((t) => t.applied)).toBe(true);
    expect(byNu('9102').map((t) => [t.evento, t.applied, t.reason])).toEqual([
      ['proposta.criada', true, 'created'],
      ['proposta.aprovada', true, 'forward'],
      ['proposta.pre_aprovada', false, 'late'],
      ['proposta.negada', true, 'final'],
      ['averbacao.solicitada', false, 'after_final'],
    ]);
    expect(byNu('9103').map((t) => [t.evento, t.applied])).toEqual([
      ['averbacao.aprovada', true],
      ['proposta.criada', false],
    ]);
    expect(cluster.averbacoes).toEqual([
      expect.objectContaining({
        request_id: 'req-9101',
        status: 'completed',
        result_source: 'webhook',
        tracked_via: 'event',
        polling: false,
      }),
    ]);
    const unknown = cluster.events!.find((e) => e.evento === 'proposta.reavaliada');
    expect(unknown?.status).toBe('ignored');
    // The repeated delivery is one event, its copy counted once.
    expect(cluster.events!.filter((e) => e.duplicates === 1)).toHaveLength(1);
  });
});

// --- handler failures --------------------------------------------------------------------------------

describe('a handler that fails', () => {
  it('is retried until it succeeds; meanwhile the later events of its proposal wait, other proposals go on', async () => {
    const node = await clusterReplica('replica-a', { HANDLER_MAX_ATTEMPTS: '1000' });
    await installFailureTrigger(pool);
    const bodies = [
      'proposta.criada',
      'proposta.pre_aprovada',
      'proposta.aprovada',
      'averbacao.solicitada',
    ].map((evento) => delivery(evento, { nu_proposta: 9201 }));
    const failing = webhookId(bodies[1]!);
    await failEvent(pool, failing);
    for (const body of bodies) await ack(node, body);

    // Seen failing at least twice (a retry ran), in one snapshot with the events behind it.
    const held = await waitFor(
      async () => {
        const events = await pgEventsByKey();
        const f = events.get(failing);
        return f && f.status === 'failed' && f.attempts >= 2 ? events : undefined;
      },
      'the failing event retried',
      DUE_JOB_BOUND_MS,
    );
    expect(held.get(failing)!.last_error).toMatch(/injected failure for event/);
    expect(held.get(failing)!.next_attempt_at).not.toBeNull();
    expect(held.get(webhookId(bodies[0]!))!.status).toBe('done');
    for (const later of bodies.slice(2))
      expect(held.get(webhookId(later))).toMatchObject({ status: 'pending', attempts: 0 });

    // Another proposal is not held back by it.
    const other = delivery('proposta.criada', { nu_proposta: 9202 });
    await ack(node, other);
    await waitFor(async () => (await proposalStatus(9202)) === 'em_analise', 'proposal 9202 processed');
    const still = await pgEventsByKey();
    for (const later of bodies.slice(2)) expect(still.get(webhookId(later))!.status).toBe('pending');
    expect(await proposalStatus(9201)).toBe('em_analise');

    await dropFailureTrigger(pool); // the handler works again
    await pgSettled(5, DUE_JOB_BOUND_MS);
    const done = await pgEventsByKey();
    for (const body of bodies) expect(done.get(webhookId(body))!.status).toBe('done');
    expect(done.get(failing)!.attempts).toBeGreaterThanOrEqual(3);
    expect(done.get(failing)!.last_error).toBeNull();
    expect(await proposalStatus(9201)).toBe('averbacao_solicitada');
    const transitions = await rows<{ event_id: string; evento: string; applied: boolean }>(
      pool,
      "SELECT event_id, evento, applied FROM proposal_transitions WHERE nu_proposta = '9201' ORDER BY id",
    );
    // One row per event, recorded in the order of the events.
    expect(transitions.map((t) => [t.evento, t.applied])).toEqual([
      ['proposta.criada', true],
      ['proposta.pre_aprovada', true],
      ['proposta.aprovada', true],
      ['averbacao.solicitada', true],
    ]);
    expect(transitions.map((t) => Number(t.event_id))).toEqual(
      bodies.map((b) => Number(done.get(webhookId(b))!.id)),
    );
  });

  it('goes dead after HANDLER_MAX_ATTEMPTS and no longer holds its proposal back', async () => {
    const node = await clusterReplica('replica-a', { HANDLER_MAX_ATTEMPTS: '3' });
    await installFailureTrigger(pool);
    const bodies = [
      'proposta.criada',
      'proposta.pre_aprovada',
      'proposta.aprovada',
      'averbacao.solicitada',
    ].map((evento) => delivery(evento, { nu_proposta: 9211 }));
    const failing = webhookId(bodies[1]!);
    await failEvent(pool, failing);
    for (const body of bodies) await ack(node, body);

    // Each retry is a job due after its backoff: waited for one at a time.
    for (const attempts of [2, 3])
      await waitFor(
        async () => ((await pgEventsByKey()).get(failing)?.attempts ?? 0) >= attempts,
        `attempt ${attempts} of the failing event`,
        DUE_JOB_BOUND_MS,
      );
    await pgSettled(4);
    const events = await pgEventsByKey();
    expect(events.get(failing)).toMatchObject({ status: 'dead', attempts: 3, next_attempt_at: null });
    expect(events.get(failing)!.processed_at).not.toBeNull();
    expect(events.get(failing)!.last_error).toMatch(/injected failure/);
    for (const body of [bodies[0]!, bodies[2]!, bodies[3]!])
      expect(events.get(webhookId(body))).toMatchObject({ status: 'done', attempts: 1 });
    expect(await proposalStatus(9211)).toBe('averbacao_solicitada');
    const transitions = await rows<{ evento: string }>(
      pool,
      "SELECT evento FROM proposal_transitions WHERE nu_proposta = '9211' ORDER BY id",
    );
    expect(transitions.map((t) => t.evento)).toEqual([
      'proposta.criada',
      'proposta.aprovada',
      'averbacao.solicitada',
    ]);

    // The handler works again; `replay --status dead` (the real CLI, on PostgreSQL) requeues the
    // dead letter and turns its proposal: it is processed once more, recorded late.
    await dropFailureTrigger(pool);
    const cliEnv = { DATABASE_URL: url, WEBHOOK_SECRETS: 'unused-by-replay' };
    const replayed = await runCliAsync(['replay', '--status', 'dead', '--json'], cliEnv);
    expect(replayed.stderr).toBe('');
    expect(JSON.parse(replayed.stdout)).toEqual({ queued: [Number(events.get(failing)!.id)] });
    await waitFor(
      async () => (await pgEventsByKey()).get(failing)?.status === 'done',
      'the replayed dead letter processed',
      DUE_JOB_BOUND_MS,
    );
    const late = await rows<{ evento: string; applied: boolean; reason: string }>(
      pool,
      "SELECT evento, applied, reason FROM proposal_transitions WHERE nu_proposta = '9211' ORDER BY id",
    );
    expect(late.at(-1)).toEqual({ evento: 'proposta.pre_aprovada', applied: false, reason: 'late' });
    // Nothing left to replay; an unknown id is refused with one line, and no password anywhere.
    expect(JSON.parse((await runCliAsync(['replay', '--status', 'dead', '--json'], cliEnv)).stdout)).toEqual({
      queued: [],
    });
    const unknown = await runCliAsync(['replay', '999999'], cliEnv);
    expect(unknown.status).not.toBe(0);
    expect(unknown.stderr).toMatch(/no event 999999/);
  });
});

// --- exactly once ------------------------------------------------------------------------------------

const turnOptions = () => ({
  schedule: { graceMs: 60_000, intervalMs: 1000, maxIntervalMs: 2000, maxAgeMs: 3_600_000 },
  schedulePoll: async () => undefined,
  now: () => new Date(),
  maxAttempts: 5,
  backoff: { baseMs: 10, maxMs: 40 },
  queueTurns: recordingTurns().queueTurns,
  logger: memoryLogger(),
});

/** Runs one turn of `key` in a transaction of its own, committed or rolled back. */
async function turnOnce(key: string, end: 'COMMIT' | 'ROLLBACK'): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const n = await runTurns(sqlOf(client), [key], turnOptions());
    await client.query(end);
    return n;
  } finally {
    client.release();
  }
}

describe("pg-boss's queue gone", () => {
  it('(a restore without it, a server that lost its last commits) is created again: the relay and processing go on', async () => {
    const node = await clusterReplica('replica-a');
    await ack(node, delivery('proposta.criada', { nu_proposta: 9501 }));
    await pgSettled(1);
    // The queue's row and its jobs, gone.
    await pool.query("DELETE FROM pgboss.job WHERE name = 'consig_events'");
    await pool.query("DELETE FROM pgboss.queue WHERE name = 'consig_events'");
    await ack(node, delivery('proposta.pre_aprovada', { nu_proposta: 9501 }));
    await pgSettled(2, DUE_JOB_BOUND_MS);
    expect(await proposalStatus(9501)).toBe('pre_aprovada');
    expect(node.logs.lines.some((l) => l.msg === 'pg-boss queue missing: creating it again')).toBe(true);
  });
});

describe('exactly once', () => {
  it('a turn rolled back leaves its events pending; the same turn twice at once applies each event once', async () => {
    await migrateUrl(url);
    const app = await startTestApp();
    apps.push(app);
    const bodies = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'].map((evento) =>
      delivery(evento, { nu_proposta: 9301 }),
    );
    for (const body of bodies) await ack(app, body);
    const turns = recordingTurns();
    await drain(relayOf(pool, app.store.db, { replicaId: 'replica-a', queueTurns: turns.queueTurns }).relay);
    expect(turns.calls.flat()).toEqual(['p:9301']);

    // The turn dies before its commit: nothing of it stays.
    expect(await turnOnce('p:9301', 'ROLLBACK')).toBe(3);
    expect(await count(pool, "SELECT count(*) AS n FROM events WHERE status = 'pending'")).toBe(3);
    expect(await count(pool, 'SELECT count(*) AS n FROM proposal_transitions')).toBe(0);
    expect(await count(pool, 'SELECT count(*) AS n FROM proposals')).toBe(0);

    // Two runs of the turn at once (an expired claim running beside its retry): one does the work.
    const both = await Promise.all([turnOnce('p:9301', 'COMMIT'), turnOnce('p:9301', 'COMMIT')]);
    expect(both.sort()).toEqual([0, 3]);
    expect(await turnOnce('p:9301', 'COMMIT')).toBe(0);
    expect(await count(pool, 'SELECT count(*) AS n FROM proposal_transitions')).toBe(3);
    expect(await count(pool, "SELECT count(*) AS n FROM events WHERE status = 'done' AND attempts = 1")).toBe(
      3,
    );
    expect(await proposalStatus(9301)).toBe('aprovada');
  });

  it('two replicas on one database, every delivery sent to both: each event applied once, in order', async () => {
    const [a, b] = await Promise.all([clusterReplica('replica-a'), clusterReplica('replica-b')]);
    const flow = [
      'proposta.criada',
      'proposta.pre_aprovada',
      'proposta.aprovada',
      'averbacao.solicitada',
      'averbacao.aprovada',
    ];
    const proposals = [9311, 9312, 9313, 9314, 9315, 9316];
    const sent: string[] = [];
    for (const evento of flow)
      for (const nu of proposals) {
        const body = delivery(evento, { nu_proposta: nu });
        sent.push(webhookId(body));
        await Promise.all([ack(a, body), ack(b, body)]);
      }
    // Both relays first: the events are final once either replica's copy is relayed, the other's
    // duplicates and deliveries only when its relay has run.
    await spoolsRelayed([a, b]);
    await pgSettled(sent.length);
    const events = await rows<{ dedup_key: string; attempts: number; duplicates: number; status: string }>(
      pool,
      'SELECT dedup_key, attempts, duplicates, status FROM events ORDER BY id',
    );
    expect(events.map((e) => e.dedup_key).sort()).toEqual([...sent].sort());
    expect(events.every((e) => e.status === 'done' && e.attempts === 1 && e.duplicates === 1)).toBe(true);
    expect(await count(pool, 'SELECT count(*) AS n FROM proposal_transitions')).toBe(sent.length);
    // Each proposal's transitions in its events' order, all applied: order held across replicas.
    const transitions = await rows<{
      nu_proposta: string;
      evento: string;
      applied: boolean;
      event_id: string;
    }>(
      pool,
      'SELECT nu_proposta, evento, applied, event_id FROM proposal_transitions ORDER BY nu_proposta, id',
    );
    for (const nu of proposals) {
      const mine = transitions.filter((t) => t.nu_proposta === String(nu));
      expect(mine.map((t) => [t.evento, t.applied])).toEqual(flow.map((e) => [e, true]));
      const ids = mine.map((t) => Number(t.event_id));
      expect([...ids].sort((x, y) => x - y)).toEqual(ids);
      expect(await proposalStatus(nu)).toBe('averbada');
    }
    // Both replicas relayed: each one's deliveries are there.
    expect(
      (
        await rows<{ replica: string; n: string }>(
          pool,
          'SELECT replica, count(*) AS n FROM deliveries GROUP BY replica ORDER BY replica',
        )
      ).map((r) => [r.replica, Number(r.n)]),
    ).toEqual([
      ['replica-a', sent.length],
      ['replica-b', sent.length],
    ]);
  });
});

// --- registrations and polls ---------------------------------------------------------------------------

function serviceEnv(extra: Record<string, string>): Record<string, string> {
  return {
    SERVICE_BASE_URL: fake!.url,
    SERVICE_ACCESS_TOKEN: 'access-token-1',
    REGISTRY_POLL_INTERVAL_MS: '200',
    REGISTRY_POLL_MAX_INTERVAL_MS: '400',
    ...extra,
  };
}

interface PollJob {
  state: string;
  start_after: Date;
  data: { requestId: string };
}
const pollJobs = (requestId: string) =>
  rows<PollJob>(
    pool,
    'SELECT state, start_after, data FROM pgboss.job WHERE name = $1 AND singleton_key = $2 ORDER BY created_on',
    [POLL_QUEUE, `r:${requestId}`],
  );

interface AverbacaoRow {
  status: string;
  result_source: string | null;
  tracked_via: string;
  poll_attempts: number;
  next_poll_at: Date | null;
  last_poll_at: Date | null;
  last_poll_outcome: string | null;
  result_body: string | null;
  result_event_id: string | null;
  created_at: Date;
}
const averbacao = async (requestId: string) =>
  (await rows<AverbacaoRow>(pool, 'SELECT * FROM averbacoes WHERE request_id = $1', [requestId]))[0];

describe('registrations', () => {
  it('an event with dados.requestId starts tracking with a poll job; the polls store `poll` events and complete it', async () => {
    fake = await startFakeService();
    const reply = (status: string) => ({
      json: { requestId: 'req-9401', correlationId: 'corr-9401', status },
    });
    fake.on('GET', '/request/:id', reply('processing'), reply('completed'));
    const node = await clusterReplica('replica-a', serviceEnv({ REGISTRY_WEBHOOK_GRACE_MS: '200' }));
    await ack(
      node,
      delivery('averbacao.solicitada', { nu_proposta: 9401, dados: { requestId: 'req-9401' } }),
    );

    const tracked = await waitFor(() => averbacao('req-9401'), 'req-9401 tracked');
    expect(tracked.tracked_via).toBe('event');
    const [first] = await waitFor(async () => {
      const jobs = await pollJobs('req-9401');
      return jobs.length > 0 ? jobs : undefined;
    }, 'a poll job for req-9401');
    expect(first!.data).toEqual({ requestId: 'req-9401' });
    // Scheduled in the transaction that tracked it, at tracking + the webhook's grace period.
    expect(first!.start_after.getTime() - tracked.created_at.getTime()).toBe(200);

    // Each poll is a job due at next_poll_at: waited for one at a time.
    await waitFor(
      async () => ((await averbacao('req-9401'))?.poll_attempts ?? 0) >= 1,
      'the first poll of req-9401',
      DUE_JOB_BOUND_MS,
    );
    const done = await waitFor(
      async () => {
        const row = await averbacao('req-9401');
        return row?.status === 'completed' ? row : undefined;
      },
      'req-9401 completed by the second poll',
      DUE_JOB_BOUND_MS,
    );
    expect(done).toMatchObject({ result_source: 'poll', poll_attempts: 2, next_poll_at: null });
    expect(JSON.parse(done.result_body!)).toEqual({
      requestId: 'req-9401',
      correlationId: 'corr-9401',
      status: 'completed',
    });
    const polls = await rows<{ id: string; dedup_key: string; status: string; kind: string }>(
      pool,
      "SELECT id, dedup_key, status, kind FROM events WHERE kind = 'poll' ORDER BY id",
    );
    expect(polls.map((p) => [p.dedup_key, p.status])).toEqual([
      ['poll:req-9401:processing', 'done'],
      ['poll:req-9401:completed', 'done'],
    ]);
    expect(done.result_event_id).toBe(polls[1]!.id);
    const gets = fake.requestsTo('GET', '/request/');
    expect(gets.map((g) => g.path)).toEqual(['/request/req-9401', '/request/req-9401']);
    expect(gets[0]!.headers.authorization).toBe('Bearer access-token-1');
    // One job per poll, none after the final answer.
    await waitFor(
      async () => (await pollJobs('req-9401')).every((j) => j.state === 'completed'),
      'poll jobs done',
    );
    expect(await pollJobs('req-9401')).toHaveLength(2);
  });

  it('an answer PostgreSQL refuses to keep counts as a failed poll, as in SQLite mode: recorded and backed off, then asked again and kept', async () => {
    fake = await startFakeService();
    const reply = (status: string) => ({ json: { requestId: 'req-9471', status } });
    fake.on('GET', '/request/:id', reply('processing'), reply('completed'));
    const node = await clusterReplica('replica-a', serviceEnv({ REGISTRY_WEBHOOK_GRACE_MS: '200' }));
    // A refusal the test takes back: every poll answer's event fails to insert.
    await pool.query(`CREATE FUNCTION refuse_poll() RETURNS trigger LANGUAGE plpgsql AS
      $$BEGIN IF NEW.kind = 'poll' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END$$`);
    await pool.query(
      'CREATE TRIGGER refuse_poll BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_poll()',
    );
    try {
      await ack(
        node,
        delivery('averbacao.solicitada', { nu_proposta: 9471, dados: { requestId: 'req-9471' } }),
      );
      // The job used to fail here, and pg-boss ran it again (5 s, 10 s, …) with no attempt recorded.
      const refused = await waitFor(
        async () => {
          const row = await averbacao('req-9471');
          return (row?.poll_attempts ?? 0) >= 1 ? row : undefined;
        },
        'the first poll of req-9471 recorded',
        DUE_JOB_BOUND_MS,
      );
      expect(refused.poll_attempts).toBe(1);
      expect(refused.last_poll_outcome).toMatch(/^error:.*refused by the test/);
      expect(refused.next_poll_at!.getTime()).toBeGreaterThan(refused.last_poll_at!.getTime());
      expect(await rows(pool, "SELECT id FROM events WHERE kind = 'poll'")).toEqual([]);
    } finally {
      await pool.query('DROP TRIGGER refuse_poll ON events');
      await pool.query('DROP FUNCTION refuse_poll()');
    }
    const done = await waitFor(
      async () => {
        const row = await averbacao('req-9471');
        return row?.status === 'completed' ? row : undefined;
      },
      'req-9471 completed by a later poll',
      DUE_JOB_BOUND_MS,
    );
    expect(done).toMatchObject({ result_source: 'poll', next_poll_at: null });
    expect(fake.requestsTo('GET', '/request/').length).toBeGreaterThanOrEqual(2);
  });

  it('`track` (the real CLI, on PostgreSQL) declares a registration; its poll job completes it', async () => {
    fake = await startFakeService();
    fake.on('GET', '/request/:id', { json: { requestId: 'req-9451', status: 'completed' } });
    await clusterReplica('replica-a', serviceEnv({ REGISTRY_WEBHOOK_GRACE_MS: '100' }));
    // The first poll is the command's grace after the commit: long enough that the command's read of
    // the row (after its commit, in a process that may wait for the CPU) comes before the poll's answer.
    const cliEnv = {
      DATABASE_URL: url,
      WEBHOOK_SECRETS: 'unused-by-track',
      REGISTRY_WEBHOOK_GRACE_MS: '2000',
    };
    const tracked = await runCliAsync(['track', 'req-9451', '--proposal', '9451', '--json'], cliEnv);
    expect(tracked.stderr).toBe('');
    expect(JSON.parse(tracked.stdout)).toMatchObject({
      status: 'tracked',
      averbacao: { request_id: 'req-9451', nu_proposta: 9451, status: 'queued', tracked_via: 'declared' },
    });
    // One poll job, queued with the row.
    expect(await pollJobs('req-9451')).toHaveLength(1);
    const done = await waitFor(
      async () => {
        const row = await averbacao('req-9451');
        return row?.status === 'completed' ? row : undefined;
      },
      'req-9451 completed by its poll',
      DUE_JOB_BOUND_MS,
    );
    expect(done).toMatchObject({ result_source: 'poll', tracked_via: 'declared', next_poll_at: null });
    // Declared again: already tracked, nothing queued twice.
    const again = await runCliAsync(['track', 'req-9451', '--json'], cliEnv);
    expect(JSON.parse(again.stdout)).toMatchObject({ status: 'already_tracked' });
  });

  it('a registry webhook arriving first makes the scheduled poll a no-op', async () => {
    fake = await startFakeService();
    fake.on('GET', '/request/:id', { json: { requestId: 'req-9402', status: 'completed' } });
    // A long grace: the poll waits until the test makes it due (below).
    const node = await clusterReplica('replica-a', serviceEnv({ REGISTRY_WEBHOOK_GRACE_MS: '600000' }));
    await ack(
      node,
      delivery('averbacao.solicitada', { nu_proposta: 9402, dados: { requestId: 'req-9402' } }),
    );
    await waitFor(async () => (await pollJobs('req-9402')).length === 1, 'a poll job for req-9402');

    const registry = { requestId: 'req-9402', status: 'completed', correlationId: 'corr-9402' };
    await ack(node, registry, 'accepted', '/webhooks/registry');
    const done = await waitFor(async () => {
      const row = await averbacao('req-9402');
      return row?.status === 'completed' ? row : undefined;
    }, 'req-9402 completed by the webhook');
    expect(done).toMatchObject({ result_source: 'webhook', next_poll_at: null, poll_attempts: 0 });

    // The scheduled poll is brought forward (pg-boss's own update, which wakes the workers, as a
    // rescheduling does): it finds the registration final and asks nothing.
    const operator = await startEngine(url, { max: 2, logger: memoryLogger() });
    try {
      const moved = await operator.boss.update(POLL_QUEUE, undefined, {
        singletonKey: 'r:req-9402',
        startAfter: new Date(Date.now() - 1000),
      });
      expect(moved.updated).toBe(1);
    } finally {
      await operator.stop(2000);
    }
    await waitFor(async () => (await pollJobs('req-9402'))[0]?.state === 'completed', 'the poll job ran');
    expect(fake.requestsTo('GET', '/request/')).toHaveLength(0);
    expect(await averbacao('req-9402')).toMatchObject({
      status: 'completed',
      result_source: 'webhook',
      poll_attempts: 0,
      last_poll_at: null,
      result_body: JSON.stringify(registry),
    });
    expect(await count(pool, "SELECT count(*) AS n FROM events WHERE kind = 'poll'")).toBe(0);
    expect(await pollJobs('req-9402')).toHaveLength(1);
  });
});

describe('what each mode builds', () => {
  /** This process's descriptors open on the file at `path` (Linux): one per SQLite connection to it. */
  const connectionsTo = (path: string): number => {
    const file = realpathSync(path);
    return readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === file;
      } catch {
        return false; // closed since it was listed
      }
    }).length;
  };

  it('cluster mode builds only what it runs: no SQLite processing, no pipeline or lease connection on its spool', async () => {
    const alone = await sqliteReceiver();
    expect(alone.clustered).toBe(false);
    // SQLite mode: the store's, the pipeline's, the processing lease's and the delivery watch's.
    expect(connectionsTo(alone.dbPath)).toBe(4);
    const replica = await clusterReplica('spool-only');
    expect(replica.clustered).toBe(true);
    // Cluster mode: the store's (the relay reads the spool on it) and the delivery watch's; no
    // pipeline's or lease's: processing is on PostgreSQL.
    expect(connectionsTo(replica.dbPath)).toBe(2);
  });
});
