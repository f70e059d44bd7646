import Database from '../../src/sqlite/sqlite-driver';
import { EVENTOS, type Evento } from '../../src/domain/catalogue';
import { replay } from '../../src/domain/lifecycle';
import { delivery } from '../helpers/payloads';
import { tempDir } from '../helpers/tmp';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { eventById, eventsByStatus } from '../helpers/events';

let r: TestReceiver | undefined;
afterEach(async () => {
  await r?.stop();
  r = undefined;
});

const HAPPY: Evento[] = [
  'proposta.criada',
  'proposta.pre_aprovada',
  'proposta.aprovada',
  'averbacao.solicitada',
  'averbacao.aprovada',
  'formalizacao.iniciada',
  'formalizacao.concluida',
  'efetivacao.concluida',
  'pagamento.falha',
  'pagamento.realizado',
];

function shuffle<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

const q = <T>(rec: TestReceiver, sql: string, ...params: unknown[]) =>
  rec.store.db.prepare(sql).all(...params) as T[];
const one = <T>(rec: TestReceiver, sql: string, ...params: unknown[]) =>
  rec.store.db.prepare(sql).get(...params) as T;

/** A receiver in `dir` whose handler throws for the proposals `fails` names: their events stay failed. */
const failingReceiver = (dir: string, fails: (nuProposta: string) => boolean) =>
  startTestReceiver({
    dir,
    env: { HANDLER_MAX_ATTEMPTS: '1000' },
    configureHandlers: (router) =>
      router.onAny((event) => {
        if (fails(String(event.nuProposta))) throw new Error('not now');
      }),
  });

describe('the life cycle through HTTP', () => {
  it.each([1, 2, 3, 4, 5])(
    'shuffled with duplicates (seed %i): right final status, one transition per distinct event',
    async (seed) => {
      r = await startTestReceiver();
      const nu = 5000 + seed;
      const bodies = HAPPY.map((evento, i) =>
        delivery(evento, { nu_proposta: nu, webhook_id: `wh_${seed}_${i}` }),
      );
      const withDuplicates = shuffle([...bodies, ...bodies.slice(0, 4), bodies[9] as object], seed);
      for (const body of withDuplicates) expect((await r.send(body)).status).toBe(200);
      const rec = r;
      await eventually(
        () => one<{ n: number }>(rec, "SELECT count(*) AS n FROM events WHERE status = 'pending'").n === 0,
        'all events processed',
      );
      const transitions = q<{ evento: Evento; applied: number; event_id: number }>(
        r,
        'SELECT evento, applied, event_id FROM proposal_transitions WHERE nu_proposta = ? ORDER BY id',
        nu,
      );
      expect(transitions).toHaveLength(HAPPY.length);
      expect(new Set(transitions.map((t) => t.event_id)).size).toBe(HAPPY.length);
      // The pipeline processed them in the order received (first copy of each): the pure machine
      // over that order predicts exactly which ones applied.
      const order = q<{ evento: Evento }>(
        r,
        'SELECT evento FROM events WHERE nu_proposta = ? ORDER BY id',
        nu,
      ).map((e) => e.evento);
      const predicted = replay(order);
      expect(transitions.map((t) => [t.evento, t.applied === 1])).toEqual(
        predicted.transitions.map((t) => [t.evento, t.applied]),
      );
      expect(
        one<{ status: string }>(r, 'SELECT status FROM proposals WHERE nu_proposta = ?', nu).status,
      ).toBe(predicted.status);
      expect(predicted.status).toBe('paga');
      expect(one<{ n: number }>(r, "SELECT count(*) AS n FROM events WHERE status != 'done'").n).toBe(0);
    },
  );

  it('fills the proposal from dados, CPF padded back to 11 digits', async () => {
    r = await startTestReceiver();
    await r.send(
      delivery('proposta.aprovada', {
        nu_proposta: 77,
        dados: { nu_cpf: 1234567890, uuid: 'u-77', vl_emprestimo: '1500.25' },
      }),
    );
    const rec = r;
    await eventually(() => rec.store.proposals.get(77) !== undefined, 'proposal 77');
    expect(r.store.proposals.get(77)).toMatchObject({
      nu_cpf: '01234567890',
      uuid: 'u-77',
      vl_emprestimo: 1500.25,
      stage: 'Proposta',
      status: 'aprovada',
    });
  });

  it('unknown eventos are ignored and never reach a handler; registry results are processed', async () => {
    const seen: string[] = [];
    r = await startTestReceiver({
      configureHandlers: (router) =>
        router.onAny((e) => {
          seen.push(e.evento ?? e.kind);
        }),
    });
    await r.send(delivery('proposta.reativada'));
    await r.send({ requestId: 'req-9', status: 'completed' }, '/webhooks/registry');
    await r.send(delivery('proposta.criada', { nu_proposta: 9 }));
    await eventually(() => seen.length === 2, 'two events handled');
    expect(seen.sort()).toEqual(['proposta.criada', 'registry']);
  });
});

describe('retries and the dead letter', () => {
  it('a handler that fails twice then succeeds: retried with backoff, done, effect applied once', async () => {
    let calls = 0;
    r = await startTestReceiver({
      configureHandlers: (router) =>
        router.on('proposta.criada', () => {
          calls += 1;
          if (calls <= 2) throw new Error(`flaky #${calls}`);
        }),
    });
    const res = await r.send(delivery('proposta.criada', { nu_proposta: 31 }));
    const rec = r;
    await eventually(() => eventById(rec.store.db, res.body.event_id)?.status === 'done', 'event done');
    expect(eventById(r.store.db, res.body.event_id)).toMatchObject({
      attempts: 3,
      last_error: null,
      next_attempt_at: null,
    });
    expect(calls).toBe(3);
    // The failure's log line: the same fields as cluster mode's (domain/handler-failure.ts).
    const retried = r.logs.lines.filter((l) => l.msg === 'handler failed: will retry');
    expect(retried).toHaveLength(2);
    expect(retried[0]).toMatchObject({
      event_id: res.body.event_id,
      evento: 'proposta.criada',
      nu_proposta: 31,
      attempts: 1,
      next_attempt_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      err: 'flaky #1',
    });
    // The life-cycle effect of the rolled-back attempts did not stick: one transition only.
    expect(
      one<{ n: number }>(r, 'SELECT count(*) AS n FROM proposal_transitions WHERE nu_proposta = 31').n,
    ).toBe(1);
    const metrics = await (await fetch(`${r.url}/metrics`)).text();
    expect(metrics).toContain(
      'consig_pipeline_events_processed_total{evento="proposta.criada",outcome="retry"} 2',
    );
    expect(metrics).toContain('consig_pipeline_handler_failures_total{evento="proposta.criada"} 2');
  });

  it('a handler that always fails ends dead after HANDLER_MAX_ATTEMPTS; replay brings it back', async () => {
    let broken = true;
    const errors: string[] = [];
    r = await startTestReceiver({
      env: { HANDLER_MAX_ATTEMPTS: '3', ADMIN_TOKEN: 'admin-token-0123456789' },
      configureHandlers: (router) =>
        router
          .on('proposta.criada', () => {
            if (broken) throw new Error('downstream is down');
          })
          .onError((err) => errors.push(err.message)),
    });
    const res = await r.send(delivery('proposta.criada', { nu_proposta: 32 }));
    const rec = r;
    const id = res.body.event_id as number;
    await eventually(() => eventById(rec.store.db, id)?.status === 'dead', 'event dead');
    expect(eventById(r.store.db, id)).toMatchObject({ attempts: 3, last_error: 'downstream is down' });
    expect(errors).toHaveLength(3);
    expect(
      r.logs.lines.some((l) => l.msg === 'handler failed for the last time: event is dead (replayable)'),
    ).toBe(true);
    expect(r.store.proposals.get(32)).toBeUndefined();

    broken = false;
    const replayRes = await fetch(`${r.url}/admin/events/${id}/replay`, {
      method: 'POST',
      headers: { authorization: 'Bearer admin-token-0123456789' },
    });
    expect(replayRes.status).toBe(202);
    await eventually(() => eventById(rec.store.db, id)?.status === 'done', 'replayed event done');
    expect(r.store.proposals.get(32)?.status).toBe('em_analise');
  });
});

describe('the one handler API in SQLite mode (configureHandlers)', () => {
  it("masks the CPF in a handler's error: in the log line and in the event's last_error (issue 45)", async () => {
    r = await startTestReceiver({
      env: { HANDLER_MAX_ATTEMPTS: '2' },
      configureHandlers: (router) =>
        router.on('proposta.criada', () => {
          throw new Error('cpf 52998224725 not found (also 529.982.247-25)');
        }),
    });
    const res = await r.send(delivery('proposta.criada', { nu_proposta: 45 }));
    const rec = r;
    const id = res.body.event_id as number;
    await eventually(() => eventById(rec.store.db, id)?.status === 'dead', 'event dead');
    const masked = 'cpf ***.982.247-** not found (also ***.982.247-**)';
    expect(eventById(r.store.db, id)).toMatchObject({ attempts: 2, last_error: masked });
    const failures = r.logs.lines.filter((l) => String(l.msg).startsWith('handler failed'));
    expect(failures.map((l) => [l.msg, l.err])).toEqual([
      ['handler failed: will retry', masked],
      ['handler failed for the last time: event is dead (replayable)', masked],
    ]);
    expect(r.logs.raw).not.toMatch(/52998224725|529\.982\.247-25/);
  });

  it("runs PostgreSQL's $n statements in the event's transaction, in order with the built-in path", async () => {
    const seen: unknown[] = [];
    r = await startTestReceiver({
      env: { FEED_ENABLED: 'true' },
      configureHandlers: (router) =>
        router.on(['proposta.criada', 'proposta.aprovada'], async (event, { sql, now }) => {
          const { rows } = await sql.query<{ nu: string; flag: number; at: string; note: string }>(
            "INSERT INTO my_seen (nu, flag, at, note) VALUES ($1, $2, $3, 'costs $1 or $2') RETURNING nu, flag, at, note",
            [String(event.nuProposta), true, now],
          );
          seen.push(rows[0]);
          // Repeated placeholders, and a statement that returns nothing.
          await sql.query('UPDATE my_seen SET nu = $1 || $1 WHERE nu = $1', [String(event.nuProposta)]);
        }),
    });
    r.store.db.exec(
      'CREATE TABLE my_seen (nu TEXT NOT NULL, flag INTEGER NOT NULL, at TEXT NOT NULL, note TEXT)',
    );
    // criada and aprovada take the partner's path, pre_aprovada (no partner handler) the turn's.
    for (const evento of ['proposta.criada', 'proposta.pre_aprovada', 'proposta.aprovada'])
      expect((await r.send(delivery(evento, { nu_proposta: 61 }))).status).toBe(200);
    const rec = r;
    await eventually(
      () => one<{ n: number }>(rec, "SELECT count(*) AS n FROM events WHERE status = 'done'").n === 3,
      'three events done',
    );
    expect(seen).toEqual([
      { nu: '61', flag: 1, at: expect.stringMatching(/^\d{4}-/), note: 'costs $1 or $2' },
      { nu: '61', flag: 1, at: expect.stringMatching(/^\d{4}-/), note: 'costs $1 or $2' },
    ]);
    expect(q<{ nu: string }>(r, 'SELECT nu FROM my_seen')).toEqual([{ nu: '6161' }, { nu: '6161' }]);
    // In the order received, every transition applied.
    expect(
      q<{ evento: string; applied: number }>(
        r,
        'SELECT evento, applied FROM proposal_transitions WHERE nu_proposta = 61 ORDER BY id',
      ),
    ).toEqual([
      { evento: 'proposta.criada', applied: 1 },
      { evento: 'proposta.pre_aprovada', applied: 1 },
      { evento: 'proposta.aprovada', applied: 1 },
    ]);
    // Forwarding ran last for them too: one proposal.changed message per event.
    expect(
      one<{ n: number }>(r, "SELECT count(*) AS n FROM forward_messages WHERE type = 'proposal.changed'").n,
    ).toBe(3);
  });
});

describe('restart', () => {
  it('a retry not due yet holds its proposal back after a restart, as before it; the sweep runs it when due', async () => {
    const tmp = tempDir();
    try {
      // A receiver whose handler fails proposal 62's events: its first event is failed, retried later.
      const first = await failingReceiver(tmp.dir, (nu) => nu === '62');
      await first.send(delivery('proposta.criada', { nu_proposta: 62, webhook_id: 'wh_later_1' }));
      await first.send(delivery('proposta.pre_aprovada', { nu_proposta: 62, webhook_id: 'wh_later_2' }));
      await eventually(() => eventsByStatus(first.store.db).failed === 1, 'the first event failed');
      // A restart; while stopped, its retry put ten minutes away, as a longer backoff would have.
      // (Set on the closed file: the running receiver retries every few ms and would overwrite it.)
      await first.close();
      const later = new Date(Date.now() + 600_000).toISOString();
      const file = new Database(first.dbPath);
      file.prepare("UPDATE events SET next_attempt_at = ? WHERE status = 'failed'").run(later);
      const HELD = "SELECT status, attempts FROM events WHERE nu_proposta = '62' ORDER BY id";
      const before = file.prepare(HELD).all() as { status: string; attempts: number }[];
      file.close();
      const held = (rec: TestReceiver) => q<{ status: string; attempts: number }>(rec, HELD);
      expect(before.map((e) => e.status)).toEqual(['failed', 'pending']);

      r = await startTestReceiver({ dir: tmp.dir });
      const again = r;
      // Another proposal's event processed: the restarted pipeline has had its turns.
      await again.send(delivery('proposta.criada', { nu_proposta: 63 }));
      await eventually(
        () =>
          one<{ status: string }>(again, "SELECT status FROM events WHERE nu_proposta = '63'")?.status ===
          'done',
        "the other proposal's event done",
      );
      expect(held(again)).toEqual(before);
      // Due now: the sweep lets the proposal go, in order.
      again.store.db
        .prepare("UPDATE events SET next_attempt_at = ? WHERE status = 'failed'")
        .run(new Date(0).toISOString());
      await eventually(() => eventsByStatus(again.store.db).done === 3, 'proposal 62 processed once due');
      expect(held(again).map((e) => e.status)).toEqual(['done', 'done']);
    } finally {
      await r?.stop();
      r = undefined;
      tmp.cleanup();
    }
  });

  it('events left pending by a stopped receiver are processed at the next start', async () => {
    const tmp = tempDir();
    try {
      // A receiver whose handler cannot run stores the deliveries but leaves them pending/failed.
      const first = await failingReceiver(tmp.dir, () => true);
      for (const evento of EVENTOS.slice(0, 5)) await first.send(delivery(evento, { nu_proposta: 61 }));
      await first.close();
      r = await startTestReceiver({ dir: tmp.dir });
      const rec = r;
      await eventually(() => eventsByStatus(rec.store.db).done === 5, 'backlog processed');
      expect(
        one<{ n: number }>(r, 'SELECT count(*) AS n FROM proposal_transitions WHERE nu_proposta = 61').n,
      ).toBe(5);
    } finally {
      await r?.stop();
      r = undefined;
      tmp.cleanup();
    }
  });
});
