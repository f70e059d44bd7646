import type { Pool } from 'pg';
import type { HandlerEvent, HandlerRouter } from '../../src/domain/event-router';
import { count, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import { clusterBed } from '../helpers/cluster-bed';
import type { TestReceiver } from '../helpers/receiver';

/**
 * A partner's own handlers in cluster mode (`configureHandlers`): awaited inside each event's
 * savepoint of the turn's transaction, after the life cycle, so what they write with `ctx.sql`
 * commits exactly once with the event, or rolls back with it (and with the life cycle's effects)
 * when one throws. Real replicas on a real PostgreSQL this file starts.
 */

const bed = clusterBed({ prefix: 'handlers' });
let pool: Pool;
beforeEach(async () => {
  pool = bed.pool;
  await pool.query(
    'CREATE TABLE my_outbox (event_id bigint PRIMARY KEY, nu_proposta text, kind text NOT NULL)',
  );
});

function replica(
  configureHandlers: (router: HandlerRouter) => void,
  env: Record<string, string> = {},
): Promise<TestReceiver> {
  return bed.replica({ REPLICA_ID: 'a', ...env }, { configureHandlers });
}

const finished = (pool: Pool, n: number) =>
  waitFor(
    async () => (await count(pool, "SELECT count(*) AS n FROM events WHERE status IN ('done', 'dead')")) >= n,
    `${n} events finished`,
  );

it('a handler writes with ctx.sql once per event, named handlers before onAny, and sees the event as SQLite mode does', async () => {
  const seen: HandlerEvent[] = [];
  const order: string[] = [];
  const r = await replica((router) => {
    router
      .on('pagamento.realizado', async (event, { sql }) => {
        order.push(`named:${event.id}`);
        await sql.query('INSERT INTO my_outbox VALUES ($1, $2, $3)', [
          event.id,
          event.nuProposta,
          'notify-accounting',
        ]);
      })
      .onAny((event) => {
        order.push(`any:${event.id}`);
        seen.push(event);
      });
  });
  const paid = delivery('pagamento.realizado', { nu_proposta: 4242, webhook_id: 'wh-paid-1', tentativa: 2 });
  expect((await sendSigned(r.url, paid)).status).toBe(200);
  expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4243 }))).status).toBe(200);
  await finished(pool, 2);

  expect(await rows(pool, 'SELECT nu_proposta, kind FROM my_outbox')).toEqual([
    { nu_proposta: '4242', kind: 'notify-accounting' },
  ]);
  const [paidId] = (
    await rows<{ id: string }>(pool, "SELECT id FROM events WHERE evento = 'pagamento.realizado'")
  ).map((e) => Number(e.id));
  expect(order.filter((o) => o.endsWith(`:${paidId}`))).toEqual([`named:${paidId}`, `any:${paidId}`]);
  expect(seen.find((e) => e.id === paidId)).toMatchObject({
    kind: 'event',
    evento: 'pagamento.realizado',
    nuProposta: 4242,
    webhookId: 'wh-paid-1',
    tentativa: 2,
    attempts: 0,
    dados: expect.objectContaining({ nu_proposta: 4242 }),
  });
});

describe('one handler API (configureHandlers): one definition, run unchanged in both modes', () => {
  /** The partner's table, created by the same statement in either store. */
  const MY_TABLE =
    'CREATE TABLE my_table (nu text NOT NULL, evento text NOT NULL, status text, note text NOT NULL, at text NOT NULL)';

  /**
   * The README's example: one definition. Its partner system refuses each proposal's first
   * approval once (the event retries; its row is written once, by the attempt that succeeded).
   */
  function myHandlers(calls: string[]) {
    const refused = new Set<string>();
    return (router: HandlerRouter) => {
      router.on(['proposta.criada', 'proposta.aprovada'], async (event, { sql, now }) => {
        const nu = String(event.nuProposta);
        calls.push(`${event.evento}:${nu}`);
        // The built-in handlers ran first, in the same transaction: the proposal's status is there.
        const { rows } = await sql.query<{ status: string }>(
          'SELECT status FROM proposals WHERE nu_proposta = $1',
          [nu],
        );
        await sql.query(
          "INSERT INTO my_table (nu, evento, status, note, at) VALUES ($1, $2, $3, 'costs $1', $4)",
          [nu, event.evento, rows[0]?.status ?? null, now.toISOString()],
        );
        if (event.evento === 'proposta.aprovada' && !refused.has(nu)) {
          refused.add(nu);
          throw new Error('the partner system is busy');
        }
      });
    };
  }

  const deliveries = (nu: number) =>
    ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'].map((evento) =>
      delivery(evento, { nu_proposta: nu }),
    );
  const expected = [
    { nu: '7301', evento: 'proposta.criada', status: 'em_analise', note: 'costs $1' },
    { nu: '7301', evento: 'proposta.aprovada', status: 'aprovada', note: 'costs $1' },
  ];

  it('a SQLite receiver and a cluster replica: the same rows, a handler that threw once retried and its row written once', async () => {
    const sqliteCalls: string[] = [];
    const lite = await bed.sqliteReceiver({}, { configureHandlers: myHandlers(sqliteCalls) });
    lite.store.db.exec(MY_TABLE);
    const clusterCalls: string[] = [];
    await pool.query(MY_TABLE);
    const replica = await bed.replica({ REPLICA_ID: 'a' }, { configureHandlers: myHandlers(clusterCalls) });

    for (const body of deliveries(7301)) {
      expect((await lite.send(body)).status).toBe(200);
      expect((await sendSigned(replica.url, body)).status).toBe(200);
    }
    await finished(pool, 3);
    await waitFor(
      () =>
        (
          lite.store.db.prepare("SELECT count(*) AS n FROM events WHERE status = 'done'").get() as {
            n: number;
          }
        ).n === 3,
      'the SQLite receiver done',
    );

    const fromSqlite = lite.store.db
      .prepare('SELECT nu, evento, status, note, at FROM my_table ORDER BY rowid')
      .all() as Record<string, unknown>[];
    const fromPostgres = await rows<Record<string, unknown>>(
      pool,
      'SELECT nu, evento, status, note, at FROM my_table ORDER BY at',
    );
    for (const written of [fromSqlite, fromPostgres]) {
      expect(written.map(({ at: _at, ...rest }) => rest)).toEqual(expected);
      expect(written.every((r) => /^\d{4}-\d\d-\d\dT/.test(r.at as string))).toBe(true);
    }
    // Each mode called the handler once per event, twice for the approval that threw once.
    const called = ['proposta.criada:7301', 'proposta.aprovada:7301', 'proposta.aprovada:7301'];
    expect(sqliteCalls).toEqual(called);
    expect(clusterCalls).toEqual(called);
    // The failed attempt rolled back with the built-in effects: one transition per event.
    const liteTransitions = lite.store.db.prepare('SELECT count(*) AS n FROM proposal_transitions').get() as {
      n: number;
    };
    expect(liteTransitions.n).toBe(3);
    expect(await count(pool, 'SELECT count(*) AS n FROM proposal_transitions')).toBe(3);
    // The same failure log line in both modes (domain/handler-failure.ts).
    const retryLine = (r: TestReceiver) => r.logs.lines.find((l) => l.msg === 'handler failed: will retry');
    for (const r of [lite, replica])
      expect(retryLine(r)).toMatchObject({
        evento: 'proposta.aprovada',
        nu_proposta: 7301,
        attempts: 1,
        next_attempt_at: expect.any(String),
        err: 'the partner system is busy',
      });
  });
});

it("a handler's error names a CPF: masked in the log line and in last_error, in both modes (issue 45)", async () => {
  const throwing = (router: HandlerRouter) =>
    router.on('proposta.criada', () => {
      throw new Error('cpf 52998224725 not found');
    });
  const env = { HANDLER_MAX_ATTEMPTS: '1' };
  const lite = await bed.sqliteReceiver(env, { configureHandlers: throwing });
  const replica = await bed.replica({ REPLICA_ID: 'a', ...env }, { configureHandlers: throwing });
  const body = delivery('proposta.criada', { nu_proposta: 4545 });
  expect((await lite.send(body)).status).toBe(200);
  expect((await sendSigned(replica.url, body)).status).toBe(200);
  await finished(pool, 1);
  const liteDead = () =>
    lite.store.db.prepare("SELECT last_error FROM events WHERE status = 'dead'").all() as {
      last_error: string;
    }[];
  await waitFor(() => liteDead().length === 1, 'the SQLite receiver’s event dead');
  const masked = 'cpf ***.982.247-** not found';
  expect(liteDead()).toEqual([{ last_error: masked }]);
  expect(await rows(pool, "SELECT last_error FROM events WHERE status = 'dead'")).toEqual([
    { last_error: masked },
  ]);
  for (const r of [lite, replica]) {
    const line = r.logs.lines.find(
      (l) => l.msg === 'handler failed for the last time: event is dead (replayable)',
    );
    expect(line).toMatchObject({ nu_proposta: 4545, err: masked });
    expect(r.logs.raw).not.toContain('52998224725');
  }
});
