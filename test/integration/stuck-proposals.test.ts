import { join } from 'node:path';
import { isStuck, parseStuckAfter, stuckCutoffs } from '../../src/domain/stuck';
import {
  latestProposals,
  type ProposalKey,
  type ProposalListRow,
  stuckCounts,
  stuckProposals,
} from '../../src/core/proposal-lists';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openStore, type Store } from '../../src/sqlite/store';
import type { Db } from '../../src/sqlite/database';
import { startTestApp, type TestApp } from '../helpers/app';
import { delivery, postRaw, signed } from '../helpers/payloads';
import { tempDir } from '../helpers/tmp';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Inserts a proposal as the life-cycle handler leaves it, last changed `ageMs` before `now`. */
function seed(db: Db, nu: number | string, status: string, ageMs: number, now = new Date()): void {
  const at = new Date(now.getTime() - ageMs).toISOString();
  db.prepare(
    `INSERT INTO proposals (nu_proposta, nu_cpf, stage, status, last_evento, created_at, updated_at)
     VALUES (?, '12345678909', 'Averbação', ?, 'averbacao.solicitada', ?, ?)`,
  ).run(nu, status, at, at);
}

/** The value of one sample of the Prometheus text, e.g. `consig_proposals_stuck{status="aprovada"}`. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** The lists (core/proposal-lists.ts) on the SQLite file, as the commands and the console read them. */
function proposalLists(db: Db) {
  const sql = sqliteStoreSql(db);
  return {
    stuckCounts: (cutoffs: Parameters<typeof stuckCounts>[1]) => sql.read((q) => stuckCounts(q, cutoffs)),
    stuck: (cutoffs: Parameters<typeof stuckProposals>[1], page: Parameters<typeof stuckProposals>[2]) =>
      sql.read((q) => stuckProposals(q, cutoffs, page)),
    latest: (statuses: readonly string[], page: Parameters<typeof latestProposals>[2]) =>
      sql.read((q) => latestProposals(q, statuses, page)),
  };
}

describe('proposalLists on a real SQLite file', () => {
  const now = new Date('2026-03-10T12:00:00.000Z');
  const limits = parseStuckAfter('averbacao_solicitada=36h,aprovada=off');
  let tmp: ReturnType<typeof tempDir>;
  let store: Store;
  beforeEach(() => {
    tmp = tempDir();
    store = openStore(join(tmp.dir, 'consig.db'), { migrate: true });
  });
  afterEach(() => {
    store.close();
    tmp.cleanup();
  });

  it('counts, per status with a limit, exactly the proposals isStuck calls stuck', async () => {
    const ages = [HOUR, 20 * HOUR, 35 * HOUR, 36 * HOUR, 37 * HOUR, 3 * DAY, 8 * DAY, 400 * DAY];
    const statuses = ['em_analise', 'aprovada', 'averbacao_solicitada', 'formalizacao_iniciada', 'paga'];
    let nu = 1;
    for (const status of statuses) for (const age of ages) seed(store.db, nu++, status, age, now);
    const rows = store.db.prepare('SELECT status, updated_at FROM proposals').all() as {
      status: string;
      updated_at: string;
    }[];
    const expected: Record<string, number> = {};
    for (const c of stuckCutoffs(limits, now)) expected[c.status] = 0;
    for (const r of rows) if (isStuck(r, limits, now)) expected[r.status] = (expected[r.status] ?? 0) + 1;

    const counts = await proposalLists(store.db).stuckCounts(stuckCutoffs(limits, now));
    expect(counts).toEqual(expected);
    // 36h + more: 37h, 3d, 8d, 400d; exactly 36h is not yet stuck. 1d: everything from 35h up.
    expect(counts).toMatchObject({ averbacao_solicitada: 4, em_analise: 6, formalizacao_iniciada: 2 });
    expect(counts).not.toHaveProperty('aprovada'); // off
    expect(counts).not.toHaveProperty('paga'); // final
    expect(counts.pre_aprovada).toBe(0); // a limit, nobody there: 0, not absent
  });

  it('pages stuck proposals oldest first by keyset, across statuses, ties broken by nu_proposta', async () => {
    // Equal updated_at across statuses and an integer and a text key, to exercise the tie-break.
    const same = 10 * DAY;
    seed(store.db, 5, 'averbacao_solicitada', same, now);
    seed(store.db, 3, 'em_analise', same, now);
    seed(store.db, 'ABC-1', 'em_analise', same, now);
    for (let i = 0; i < 20; i++) {
      seed(store.db, 100 + i, i % 2 ? 'em_analise' : 'averbacao_solicitada', 2 * DAY + i * HOUR, now);
    }
    seed(store.db, 900, 'averbacao_solicitada', HOUR, now); // not stuck
    seed(store.db, 901, 'paga', 50 * DAY, now); // final
    seed(store.db, 902, 'aprovada', 50 * DAY, now); // off

    const lists = proposalLists(store.db);
    const cutoffs = stuckCutoffs(limits, now);
    const pages: ProposalListRow[][] = [];
    let after: ProposalKey | undefined;
    for (;;) {
      const page = await lists.stuck(cutoffs, { after, limit: 4 });
      if (page.length === 0) break;
      pages.push(page);
      after = page[page.length - 1];
    }
    const walked = pages.flat().map((r) => r.nu_proposta);
    expect(pages.slice(0, -1).every((p) => p.length === 4)).toBe(true);
    expect(walked.slice(0, 3)).toEqual([3, 5, 'ABC-1']); // integers before text, as SQLite orders them
    expect(walked.slice(3)).toEqual(Array.from({ length: 20 }, (_, i) => 119 - i));
    expect(new Set(walked).size).toBe(walked.length);
    // One page over everything is the same list.
    expect((await lists.stuck(cutoffs, { limit: 100 })).map((r) => r.nu_proposta)).toEqual(walked);
    // Only the requested statuses.
    const analysed = await lists.stuck(
      cutoffs.filter((c) => c.status === 'em_analise'),
      { limit: 100 },
    );
    expect(analysed.every((r) => r.status === 'em_analise')).toBe(true);
  });

  it('pages the latest proposals of given statuses newest first', async () => {
    for (let i = 0; i < 9; i++)
      seed(store.db, i + 1, ['paga', 'em_analise', 'aprovada'][i % 3] as string, i * HOUR, now);
    const lists = proposalLists(store.db);
    const first = await lists.latest(['paga', 'aprovada'], { limit: 3 });
    expect(first.map((r) => r.nu_proposta)).toEqual([1, 3, 4]);
    const last = first[first.length - 1] as ProposalKey;
    const next = await lists.latest(['paga', 'aprovada'], { before: last, limit: 10 });
    expect(next.map((r) => r.nu_proposta)).toEqual([6, 7, 9]);
    expect(first[0]).toEqual({
      nu_proposta: 1,
      nu_cpf: '12345678909', // as stored: the command masks it
      stage: 'Averbação',
      status: 'paga',
      last_evento: 'averbacao.solicitada',
      updated_at: now.toISOString(),
    });
  });

  it('reads the stuck count from the (status, updated_at) index alone, and pages without sorting', () => {
    const plan = (sql: string) =>
      (store.db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[]).map((p) => p.detail);
    expect(plan("SELECT count(*) AS n FROM proposals WHERE status = 'x' AND updated_at < 'y'")).toEqual([
      'SEARCH proposals USING COVERING INDEX proposals_status_updated (status=? AND updated_at<?)',
    ]);
    expect(
      plan(
        "SELECT * FROM proposals WHERE status = 'x' AND updated_at < 'y' AND (updated_at, nu_proposta) > ('a', 1) ORDER BY updated_at, nu_proposta LIMIT 5",
      ),
    ).toEqual([expect.stringMatching(/^SEARCH proposals USING (COVERING )?INDEX proposals_status_updated /)]);
  });
});

describe('/metrics: consig_proposals_stuck and consig_pipeline_lag_seconds', () => {
  let app: TestApp;
  afterEach(async () => {
    await app?.close();
  });

  it('count stuck proposals per status with a limit (STUCK_AFTER applied), at each scrape', async () => {
    app = await startTestApp({ STUCK_AFTER: 'averbacao_solicitada=36h,aprovada=off' });
    seed(app.store.db, 1, 'averbacao_solicitada', 37 * HOUR);
    seed(app.store.db, 2, 'averbacao_solicitada', 30 * HOUR); // under 36h
    seed(app.store.db, 3, 'formalizacao_iniciada', 8 * DAY);
    seed(app.store.db, 4, 'aprovada', 90 * DAY); // off
    seed(app.store.db, 5, 'paga', 90 * DAY); // final
    let text = await (await fetch(`${app.url}/metrics`)).text();
    expect(text).toContain('# TYPE consig_proposals_stuck gauge');
    expect(sample(text, 'consig_proposals_stuck{status="averbacao_solicitada"}')).toBe(1);
    expect(sample(text, 'consig_proposals_stuck{status="formalizacao_iniciada"}')).toBe(1);
    expect(sample(text, 'consig_proposals_stuck{status="em_analise"}')).toBe(0);
    expect(sample(text, 'consig_proposals_stuck{status="aprovada"}')).toBeUndefined();
    expect(sample(text, 'consig_proposals_stuck{status="paga"}')).toBeUndefined();

    // A proposal that moves on is no longer stuck at the next scrape.
    app.store.db
      .prepare("UPDATE proposals SET status = 'averbada', updated_at = ? WHERE nu_proposta = 1")
      .run(new Date().toISOString());
    text = await (await fetch(`${app.url}/metrics`)).text();
    expect(sample(text, 'consig_proposals_stuck{status="averbacao_solicitada"}')).toBe(0);
  });

  it('lag: the age of the oldest pending or failed event, dead letters aside; 0 when none', async () => {
    app = await startTestApp();
    const lag = async () =>
      sample(await (await fetch(`${app.url}/metrics`)).text(), 'consig_pipeline_lag_seconds');
    expect(await lag()).toBe(0);

    // No pipeline in this app: what is stored stays pending.
    const send = async (nu: number) => {
      const { raw, signature } = signed(delivery('proposta.criada', { nu_proposta: nu }));
      expect((await postRaw(`${app.url}/webhooks`, raw, { 'x-service-signature': signature })).status).toBe(
        200,
      );
    };
    await send(1);
    await send(2);
    await send(3);
    const setEvent = app.store.db.prepare('UPDATE events SET status = ?, received_at = ? WHERE id = ?');
    const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
    // As if received 2 h ago, 10 min ago and now (ids in the order received).
    setEvent.run('failed', ago(2 * HOUR), 1); // waiting for its retry
    setEvent.run('pending', ago(10 * 60_000), 2);
    const twoHours = (await lag()) as number;
    expect(twoHours).toBeGreaterThanOrEqual(7200);
    expect(twoHours).toBeLessThan(7260);

    setEvent.run('dead', ago(2 * HOUR), 1); // a dead letter waits for a person: consig_events{status="dead"}
    const tenMinutes = (await lag()) as number;
    expect(tenMinutes).toBeGreaterThanOrEqual(600);
    expect(tenMinutes).toBeLessThan(660);

    setEvent.run('done', ago(10 * 60_000), 2);
    expect(await lag()).toBeLessThan(60); // event 3, just received

    setEvent.run('done', ago(0), 3);
    expect(await lag()).toBe(0);

    // A status whose last row left reads 0 at the next scrape, not its last count (a dead-letter
    // alert must clear once the dead letters are replayed).
    const events = async (status: string) =>
      sample(await (await fetch(`${app.url}/metrics`)).text(), `consig_events{status="${status}"}`);
    expect(await events('dead')).toBe(1);
    setEvent.run('done', ago(0), 1);
    expect(await events('dead')).toBe(0);
    expect(await events('done')).toBe(3);
    expect(await events('invalid')).toBe(0);
    expect(
      sample(await (await fetch(`${app.url}/metrics`)).text(), 'consig_averbacoes{status="queued"}'),
    ).toBe(0);
  });
});
