import type { Pool } from 'pg';
import type { Job } from 'pg-boss';
import { EVENTS_QUEUE, type TurnData, startEngine } from '../../src/postgres/pg-queues';
import { runTurns } from '../../src/runtime/cluster/turn';
import { HandlerRouter } from '../../src/domain/event-router';
import { holdKeys } from '../../src/postgres/pg-locks';
import { migratePostgres } from '../../src/postgres/pg-migrate';
import type { NamedStatement } from '../../src/core/effects';
import { type BossDb, type PgSql, sqlOf, sqlOfBossDb } from '../../src/postgres/pg-sql';
import {
  count,
  failEvent,
  dropFailureTrigger,
  installFailureTrigger,
  memoryLogger,
  rows,
  waitFor,
} from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import { pgBed } from '../helpers/cluster-bed';
import { createTestDatabase, withClient, migrateUrl } from '../helpers/postgres';

/**
 * A batch of turns (src/runtime/cluster/turn.ts runTurns), run directly in a transaction of the test's:
 * every event of the batch first runs under one savepoint; when one throws, the batch runs again
 * event by event. What must hold either way: the failing event alone is recorded as failed, the
 * others commit in their proposals' order, and nothing the first pass did (effects, log lines,
 * metrics, messages) is left behind or counted twice. Failures are provoked for real, by a trigger.
 */

const bed = pgBed({ prefix: 'batch' });
let url: string;
let pool: Pool;
beforeEach(async () => {
  ({ url, pool } = bed);
  await migratePostgres(pool);
});

interface Stored {
  id: string;
  key: string;
}

/** Stores deliveries as pending events, in this order (what the relay writes). */
async function store(bodies: Record<string, unknown>[]): Promise<Stored[]> {
  const out: Stored[] = [];
  for (const body of bodies) {
    const key = (body.metadata as { webhook_id: string }).webhook_id;
    const { nu_proposta: nu, requestId } = body.dados as { nu_proposta?: unknown; requestId?: string };
    const raw = Buffer.from(JSON.stringify(body));
    const [row] = await rows<{ id: string }>(
      pool,
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, tentativa, received_at, body,
         body_bytes, status)
       VALUES ($1, $1, 'event', $2, $3, $4, 1, now(), $5, $6, 'pending') RETURNING id`,
      [key, body.evento, nu === undefined ? null : String(nu), requestId ?? null, raw, raw.length],
    );
    out.push({ id: row!.id, key });
  }
  return out;
}

/** Stores a registry result (interface §4.4) as a pending event. */
async function storeRegistry(requestId: string, status: string, correlationId: string): Promise<Stored> {
  const key = `registry:${requestId}:${status}`;
  const raw = Buffer.from(JSON.stringify({ requestId, status, correlationId }));
  const [row] = await rows<{ id: string }>(
    pool,
    `INSERT INTO events (dedup_key, kind, request_id, registry_status, received_at, body, body_bytes, status)
     VALUES ($1, 'registry', $2, $3, now(), $4, $5, 'pending') RETURNING id`,
    [key, requestId, status, raw, raw.length],
  );
  return { id: row!.id, key };
}

/** The named statements a batch prepared, by name (recorded on their way to the connection). */
const preparedSeen = new Map<string, NamedStatement>();

/** One batch of turns in a transaction of its own, with everything it reports recorded. */
async function batch(keys: string[], handlers?: HandlerRouter) {
  const logger = memoryLogger();
  const processed: [string, string][] = [];
  const errors: string[] = [];
  const turns: { keys: string[]; startAfter: Date | undefined }[] = [];
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const sql = sqlOf(client);
    const recording: PgSql = {
      ...sql,
      query: (text, values) => sql.query(text, values),
      prepared: (statement, values) => {
        preparedSeen.set(statement.name, statement);
        return sql.prepared(statement, values);
      },
    };
    const finished = await runTurns(recording, keys, {
      schedule: { graceMs: 60_000, intervalMs: 1000, maxIntervalMs: 2000, maxAgeMs: 3_600_000 },
      schedulePoll: async () => undefined,
      now: () => new Date(),
      maxAttempts: 5,
      backoff: { baseMs: 10, maxMs: 40 },
      queueTurns: async (_sql: PgSql, k: readonly string[], startAfter?: Date) =>
        void turns.push({ keys: [...k], startAfter }),
      logger,
      onProcessed: (evento, outcome) => void processed.push([evento, outcome]),
      onError: (err) => void errors.push(err.message),
      outbox: { destinations: [], feedEnabled: true },
      handlers,
    });
    await client.query('COMMIT');
    return { finished, logger, processed, errors, turns };
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

const statusOf = async (ids: string[]) =>
  (
    await rows<{ status: string; attempts: number }>(
      pool,
      'SELECT status, attempts FROM events WHERE id = ANY($1::bigint[]) ORDER BY id',
      [ids],
    )
  ).map((e) => [e.status, e.attempts]);

const transitionsOf = async (nu: number) =>
  rows<{ event_id: string; evento: string; from_status: string | null; applied: boolean }>(
    pool,
    'SELECT event_id, evento, from_status, applied FROM proposal_transitions WHERE nu_proposta = $1 ORDER BY id',
    [String(nu)],
  );

it('one event of a batch fails: it alone is recorded, the others commit in order, nothing is counted twice', async () => {
  await installFailureTrigger(pool);
  const a = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada', 'averbacao.solicitada'].map(
    (evento) => delivery(evento, { nu_proposta: 8101 }),
  );
  const b = ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'].map((evento) =>
    delivery(evento, { nu_proposta: 8102 }),
  );
  // A life-cycle event without nu_proposta: work key e:<id>, logs a warning, moves nothing.
  const noNu = delivery('proposta.criada');
  delete (noNu.dados as { nu_proposta?: unknown }).nu_proposta;
  // Interleaved, as a busy relay writes them.
  const [a1, b1, a2, b2, c, a3, b3, a4] = await store([
    a[0]!,
    b[0]!,
    a[1]!,
    b[1]!,
    noNu,
    a[2]!,
    b[2]!,
    a[3]!,
  ]);
  await failEvent(pool, a2!.key);

  const first = await batch(['p:8101', 'p:8102', `e:${c!.id}`]);

  expect(first.finished).toBe(5);
  expect(await statusOf([a1!.id, a2!.id, a3!.id, a4!.id])).toEqual([
    ['done', 1],
    ['failed', 1],
    ['pending', 0],
    ['pending', 0],
  ]);
  expect(await statusOf([b1!.id, b2!.id, b3!.id, c!.id])).toEqual([
    ['done', 1],
    ['done', 1],
    ['done', 1],
    ['done', 1],
  ]);
  expect((await transitionsOf(8101)).map((t) => t.event_id)).toEqual([a1!.id]);
  expect((await transitionsOf(8102)).map((t) => t.event_id)).toEqual([b1!.id, b2!.id, b3!.id]);
  // Each outcome reported once: the first pass's reports went with its savepoint.
  expect(first.processed.filter(([, o]) => o === 'done')).toHaveLength(5);
  expect(first.processed.filter(([, o]) => o !== 'done')).toEqual([['proposta.pre_aprovada', 'retry']]);
  expect(first.errors).toEqual([expect.stringMatching(/injected failure/)]);
  // The failure's line and an effect's, each once (the first pass's went with its savepoint).
  expect(first.logger.lines.map((l) => l.message).sort()).toEqual([
    'handler failed: will retry',
    'life-cycle event without nu_proposta: nothing to move',
  ]);
  // The failure's log line: the same fields as SQLite mode's (domain/handler-failure.ts).
  expect(first.logger.lines.find((l) => l.message === 'handler failed: will retry')!.fields).toEqual({
    event_id: Number(a2!.id),
    evento: 'proposta.pre_aprovada',
    nu_proposta: 8101,
    attempts: 1,
    next_attempt_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    err: expect.stringMatching(/injected failure/),
  });
  // The failing key is queued again for its retry, once; the others are not.
  expect(first.turns).toEqual([{ keys: ['p:8101'], startAfter: expect.any(Date) }]);
  // Messages only for the events that committed, in their order.
  const messages = await rows<{ event_id: string }>(
    pool,
    "SELECT event_id FROM forward_messages WHERE type = 'proposal.changed' ORDER BY id",
  );
  expect(messages.map((m) => m.event_id).sort()).toEqual([a1!.id, b1!.id, b2!.id, b3!.id].sort());
  expect(
    messages.filter((m) => [b1!.id, b2!.id, b3!.id].includes(m.event_id)).map((m) => m.event_id),
  ).toEqual([b1!.id, b2!.id, b3!.id]);

  // The handler works again; once the retry is due, the rest of proposal 8101 follows, in order.
  await dropFailureTrigger(pool);
  await new Promise((r) => setTimeout(r, 60));
  const second = await batch(['p:8101']);
  expect(second.finished).toBe(3);
  expect(second.processed).toEqual([
    ['proposta.pre_aprovada', 'done'],
    ['proposta.aprovada', 'done'],
    ['averbacao.solicitada', 'done'],
  ]);
  expect(await statusOf([a1!.id, a2!.id, a3!.id, a4!.id])).toEqual([
    ['done', 1],
    ['done', 2],
    ['done', 1],
    ['done', 1],
  ]);
  expect((await transitionsOf(8101)).map((t) => [t.event_id, t.applied])).toEqual([
    [a1!.id, true],
    [a2!.id, true],
    [a3!.id, true],
    [a4!.id, true],
  ]);
  expect(await count(pool, "SELECT count(*) AS n FROM proposals WHERE status = 'averbacao_solicitada'")).toBe(
    1,
  );
});

it('a partner handler runs once per event when a later event of the batch fails (no run thrown away)', async () => {
  await installFailureTrigger(pool);
  const [a1, a2, b1] = await store([
    delivery('proposta.criada', { nu_proposta: 8401 }),
    delivery('proposta.pre_aprovada', { nu_proposta: 8401 }),
    delivery('proposta.criada', { nu_proposta: 8402 }),
  ]);
  await failEvent(pool, b1!.key);
  await pool.query('CREATE TABLE my_seen (event_id bigint PRIMARY KEY)');
  // A side effect outside the transaction (a counter in memory) and one inside it (a row).
  const runs = new Map<number, number>();
  const router = new HandlerRouter().onAny(async (event, { sql }) => {
    runs.set(event.id, (runs.get(event.id) ?? 0) + 1);
    await sql.query('INSERT INTO my_seen VALUES ($1)', [event.id]);
  });

  const first = await batch(['p:8401', 'p:8402'], router);

  expect(first.finished).toBe(2);
  expect(await statusOf([a1!.id, a2!.id, b1!.id])).toEqual([
    ['done', 1],
    ['done', 1],
    ['failed', 1],
  ]);
  // The events that succeeded ran their handler once; the failing one's life cycle threw before it.
  expect([...runs]).toEqual([
    [Number(a1!.id), 1],
    [Number(a2!.id), 1],
  ]);
  expect(
    (await rows<{ event_id: string }>(pool, 'SELECT event_id FROM my_seen ORDER BY 1')).map(
      (r) => r.event_id,
    ),
  ).toEqual([a1!.id, a2!.id]);
});

it.each([
  ['in one pass', false],
  ['in the careful pass, after an event threw', true],
])(
  "a batch runs its events in id order across its keys, as SQLite mode's one sequence does (%s)",
  async (_name, fail) => {
    await installFailureTrigger(pool);
    // Ids a < b < c < d: two proposals interleaved; keys handed over in the opposite order.
    const [a, b, c, d] = await store([
      delivery('proposta.criada', { nu_proposta: 7001 }),
      delivery('proposta.criada', { nu_proposta: 7002 }),
      delivery('proposta.pre_aprovada', { nu_proposta: 7001 }),
      delivery('proposta.pre_aprovada', { nu_proposta: 7002 }),
    ]);
    if (fail) await failEvent(pool, d!.key);
    await batch(['p:7002', 'p:7001']);
    const order = await rows<{ event_id: string }>(
      pool,
      'SELECT event_id FROM proposal_transitions ORDER BY id',
    );
    expect(order.map((t) => t.event_id)).toEqual((fail ? [a, b, c] : [a, b, c, d]).map((e) => e!.id));
    expect(await statusOf([a!.id, b!.id, c!.id, d!.id])).toEqual([
      ['done', 1],
      ['done', 1],
      ['done', 1],
      fail ? ['failed', 1] : ['done', 1],
    ]);
  },
);

it('a turn waits for a transaction adding events to its key, then runs them too (postgres/pg-locks.ts)', async () => {
  // What the crash test found: pg-boss absorbs the producer's turn into one already queued, and
  // that one must not load the key's events before the producer commits.
  const [first] = await store([delivery('proposta.criada', { nu_proposta: 8201 })]);
  const producer = await pool.connect();
  try {
    await producer.query('BEGIN');
    await holdKeys(sqlOf(producer), ['p:8201']);
    const body = delivery('proposta.pre_aprovada', { nu_proposta: 8201 });
    const raw = Buffer.from(JSON.stringify(body));
    const key = (body.metadata as { webhook_id: string }).webhook_id;
    const {
      rows: [late],
    } = await producer.query<{ id: string }>(
      `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, tentativa, received_at, body, body_bytes,
         status)
       VALUES ($1, $1, 'event', 'proposta.pre_aprovada', '8201', 1, now(), $2, $3, 'pending') RETURNING id`,
      [key, raw, raw.length],
    );
    const running = batch(['p:8201']);
    await waitFor(
      () => count(pool, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"),
      'the turn waiting for the producer',
    );
    await producer.query('COMMIT');
    const done = await running;
    expect(done.finished).toBe(2);
    expect(await statusOf([first!.id, late!.id])).toEqual([
      ['done', 1],
      ['done', 1],
    ]);
  } finally {
    producer.release();
  }
});

it('a replayed event in a batch changes nothing, and the next event moves on from the status as it is', async () => {
  const [x1, x2] = await store(
    ['proposta.criada', 'proposta.pre_aprovada'].map((evento) => delivery(evento, { nu_proposta: 8201 })),
  );
  expect((await batch(['p:8201'])).finished).toBe(2);
  // A replay of the first event (its transition is recorded already), then a new event.
  await pool.query("UPDATE events SET status = 'pending' WHERE id = $1", [x1!.id]);
  const [x3] = await store([delivery('proposta.aprovada', { nu_proposta: 8201 })]);

  expect((await batch(['p:8201'])).finished).toBe(2);
  expect((await transitionsOf(8201)).map((t) => [t.event_id, t.from_status, t.applied])).toEqual([
    [x1!.id, null, true],
    [x2!.id, 'em_analise', true],
    [x3!.id, 'pre_aprovada', true],
  ]);
  expect(await statusOf([x1!.id, x2!.id, x3!.id])).toEqual([
    ['done', 2],
    ['done', 1],
    ['done', 1],
  ]);
  const [proposal] = await rows<{ status: string; last_event_id: string }>(
    pool,
    "SELECT status, last_event_id FROM proposals WHERE nu_proposta = '8201'",
  );
  expect(proposal).toEqual({ status: 'aprovada', last_event_id: x3!.id });
});

it("pg-boss's transaction runs the turn's named prepared statements (pg-sql.ts sqlOfBossDb)", async () => {
  const silent = { error: () => undefined, warn: () => undefined };
  const engine = await startEngine(url, { max: 3, logger: silent });
  try {
    const seen = new Promise<{ n: number; prepared: string[] }>((resolve, reject) => {
      void engine.boss.work(
        EVENTS_QUEUE,
        { transactional: true, batchSize: 1, pollingIntervalSeconds: 0.5 },
        async (_jobs: Job<TurnData>[], tx: BossDb) => {
          try {
            const sql = sqlOfBossDb(tx);
            const [row] = await sql.prepared<{ n: number }>(
              { name: 'consig_test_probe', text: 'SELECT $1::int AS n' },
              [7],
            );
            const names = await sql.query<{ name: string }>(
              "SELECT name FROM pg_prepared_statements WHERE name = 'consig_test_probe'",
            );
            resolve({ n: row!.n, prepared: names.map((r) => r.name) });
          } catch (err) {
            reject(err as Error);
          }
        },
      );
    });
    await engine.queueTurns(sqlOf(pool), ['p:probe']);
    expect(await seen).toEqual({ n: 7, prepared: ['consig_test_probe'] });
  } finally {
    await engine.stop(5000);
  }
});

it('the prepared statements keep an index plan even when their generic plan is made on empty tables', async () => {
  // Every kind of statement a turn prepares: a life cycle (created, moved), a registration tracked
  // from an event, registry results (a status, a correlation id filled in, the final result), the
  // outbox read-back, and a failure (an event retried, each in its savepoint).
  await installFailureTrigger(pool);
  const bodies = [
    'proposta.criada',
    'proposta.pre_aprovada',
    'averbacao.solicitada',
    'proposta.aprovada',
  ].map((evento) =>
    delivery(evento, {
      nu_proposta: 8301,
      dados: evento === 'averbacao.solicitada' ? { requestId: 'req-8301' } : {},
    }),
  );
  const stored = await store(bodies);
  await failEvent(pool, stored[3]!.key);
  await batch(['p:8301']);
  await storeRegistry('req-8301', 'processing', 'corr-8301');
  await storeRegistry('req-8301', 'completed', 'corr-8301');
  await batch(['r:req-8301']);
  expect(await count(pool, "SELECT count(*) AS n FROM averbacoes WHERE status = 'completed'")).toBe(1);
  expect([...preparedSeen.keys()].sort()).toEqual(
    expect.arrayContaining([
      'consig_effects_averbacao_state',
      'consig_effects_fill',
      'consig_effects_pg_create',
      'consig_effects_pg_move',
      'consig_effects_proposal_status',
      'consig_effects_set_final',
      'consig_effects_set_status',
      'consig_effects_track',
      'consig_step_done',
      'consig_step_failed',
      'consig_kick_lock_exclusive',
      'consig_outbox_effects',
    ]),
  );

  // A connection keeps the generic plan it made at a statement's sixth run until the table is next
  // analysed: made on a new, empty database, it must still find rows by index once tables are large.
  const empty = await createTestDatabase(bed.pg, 'plans');
  await migrateUrl(empty);
  const plans = await withClient(empty, async (c) => {
    await c.query('SET plan_cache_mode = force_generic_plan');
    const out: Record<string, string> = {};
    for (const [i, statement] of [...preparedSeen.values()].entries()) {
      await c.query(`PREPARE probe_${i} AS ${statement.text}`);
      const [{ n }] = (
        await c.query<{ n: number }>(
          'SELECT cardinality(parameter_types) AS n FROM pg_prepared_statements WHERE name = $1',
          [`probe_${i}`],
        )
      ).rows as [{ n: number }];
      const args = n > 0 ? `(${Array<string>(n).fill('NULL').join(', ')})` : '';
      const plan = await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE probe_${i}${args}`);
      out[statement.name] = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
    }
    return out;
  });
  for (const [name, plan] of Object.entries(plans))
    expect([name, plan]).toEqual([name, expect.not.stringMatching(/Seq Scan/)]);
});
