import { existsSync } from 'node:fs';
import { startTestApp } from '../helpers/app';
import { ConsoleClient } from '../helpers/console-client';
import { FakeDestination } from '../helpers/destination';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';

/**
 * One person's data through `/admin/subjects/*` and `/console/subjects` (issue 45, contract §4,
 * §9): the real composition root on a real SQLite file, events processed by the real pipeline and
 * forwarded to a real destination; find, export and erase answer what `subject` prints, each use
 * is a row of `console_audit`, the refusals are the admin API's and the console's usual ones, and
 * after an erasure no row holds the CPF.
 */

const ADMIN = 'admin-token-subjects-0123';
const VIEWER = 'viewer-token-subjects-0123';
/** Erased through the admin API, kept, and erased through the console. */
const ANA = '11144477735';
const BRUNO = '98765432100';
const CARLA = '52998224725';

let r: TestReceiver;
let lender: FakeDestination;

const db = () => r.store.db;
const audits = (action: string) =>
  db()
    .prepare('SELECT role, session, person, action, target, detail, ip FROM console_audit WHERE action = ?')
    .all(action) as Record<string, string | null>[];

/** Rows holding `cpf` (its 11 digits or 000.000.000-00) in an event's or a message's body, or a proposal. */
function rowsHolding(cpf: string): number {
  const dotted = `${cpf.slice(0, 3)}.${cpf.slice(3, 6)}.${cpf.slice(6, 9)}-${cpf.slice(9)}`;
  let n = 0;
  for (const form of [cpf, dotted]) {
    const like = `%${form}%`;
    n += (
      db().prepare('SELECT count(*) AS n FROM events WHERE CAST(body AS TEXT) LIKE ?').get(like) as {
        n: number;
      }
    ).n;
    n += (
      db().prepare('SELECT count(*) AS n FROM forward_messages WHERE body LIKE ?').get(like) as { n: number }
    ).n;
    n += (db().prepare('SELECT count(*) AS n FROM proposals WHERE nu_cpf LIKE ?').get(like) as { n: number })
      .n;
  }
  return n;
}

async function admin(path: string, body: unknown, init: { raw?: string; token?: string } = {}) {
  const res = await fetch(`${r.url}/admin${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${init.token ?? ADMIN}`, 'content-type': 'application/json' },
    body: init.raw ?? JSON.stringify(body),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON answers are read loosely in tests
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

beforeAll(async () => {
  lender = await FakeDestination.start();
  r = await startTestReceiver({
    env: {
      ADMIN_TOKEN: ADMIN,
      VIEWER_TOKEN: VIEWER,
      FORWARD_URL: `http://127.0.0.1:${lender.port}/hook`,
      FORWARD_SECRET: 'forward-secret',
    },
  });
  const people: [number, string][] = [
    [701, ANA],
    [702, ANA],
    [703, BRUNO],
    [704, CARLA],
  ];
  for (const [nu, cpf] of people)
    for (const evento of ['proposta.criada', 'proposta.aprovada'])
      await r.send(delivery(evento, { nu_proposta: nu, dados: { nu_cpf: cpf } }));
  await eventually(
    () =>
      (db().prepare("SELECT count(*) AS n FROM events WHERE status = 'done'").get() as { n: number }).n === 8,
    'all eight events processed',
  );
  await eventually(() => lender.requests.length >= 8, 'forwarded');
});
afterAll(async () => {
  await r.stop();
  await lender.close();
});

describe('/admin/subjects', () => {
  it('find: the counts per place as `subject find --json` prints them, audited', async () => {
    const res = await admin('/subjects/find', { cpf: '111.444.777-35' });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.body).toMatchObject({
      action: 'find',
      log: {
        place: r.dbPath,
        proposals: 2,
        proposals_with_personal_data: 2,
        events: 4,
        events_with_body: 4,
        erasures: [],
      },
      spool: null,
      backups: [],
      journal: null,
    });
    expect(res.body.log.messages).toBeGreaterThan(0);
    expect(res.body.log.raw_copies).toBeGreaterThan(0);
    expect(res.body.log.recipients).toEqual(['destination:default']);
    expect(JSON.stringify(res.body)).not.toContain(ANA);
    const [row] = audits('subject_find');
    expect(row).toMatchObject({
      role: 'admin',
      session: null,
      person: 'admin-token',
      ip: '127.0.0.1',
      target: expect.stringMatching(/^subject:/),
    });
    expect(JSON.parse(row!.detail!)).toEqual({ proposals: 2, events: 4 });
  });

  it('export: the whole document, the CPF in full, not cached, audited', async () => {
    const res = await admin('/subjects/export', { cpf: ANA });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.body).toMatchObject({ format: 'consig-receiver/subject-export@1', subject: { cpf: ANA } });
    expect(res.body.legal_basis).toEqual(expect.any(String));
    const [log] = res.body.places;
    expect(log.place).toBe(r.dbPath);
    expect(log.proposals.map((p: { nu_proposta: number }) => p.nu_proposta).sort()).toEqual([701, 702]);
    expect(log.events[0].body.dados.nu_cpf).toBe(ANA);
    expect(audits('subject_export')).toHaveLength(1);
  });

  it.each([
    [{}, 'cpf: expected a CPF (a string)'],
    [{ cpf: 11144477735 }, 'cpf: expected a CPF (a string)'],
    // The tests' usual fixture: its check digits hold, but it is a known dummy the validator refuses.
    [{ cpf: '12345678909' }, 'cpf: not a valid CPF (its check digits do not match)'],
    [{ cpf: '123456789' }, 'cpf: expected a CPF: 11 digits, or 000.000.000-00'],
    [{ cpf: '12345678900' }, 'cpf: not a valid CPF (its check digits do not match)'],
  ])('a bad CPF (%j) is 400 naming the field, and nothing is recorded', async (body, message) => {
    const before = db().prepare('SELECT count(*) AS n FROM console_audit').get();
    for (const action of ['find', 'export', 'erase'])
      expect(await admin(`/subjects/${action}`, { reason: 'r', ...body })).toMatchObject({
        status: 400,
        body: { error: 'bad_request', message },
      });
    expect(db().prepare('SELECT count(*) AS n FROM console_audit').get()).toEqual(before);
  });

  it('erase without a reason, a malformed or oversized body, a wrong token: the usual refusals', async () => {
    expect(await admin('/subjects/erase', { cpf: ANA })).toMatchObject({
      status: 400,
      body: { error: 'bad_request', message: expect.stringMatching(/^reason: required/) },
    });
    expect(await admin('/subjects/erase', { cpf: ANA, reason: '   ' })).toMatchObject({ status: 400 });
    expect(await admin('/subjects/find', null, { raw: '{"cpf":' })).toMatchObject({
      status: 400,
      body: { error: 'entity.parse.failed' },
    });
    expect(await admin('/subjects/find', { cpf: ANA, pad: 'x'.repeat(8000) })).toMatchObject({
      status: 413,
      body: { error: 'entity.too.large' },
    });
    expect((await admin('/subjects/find', { cpf: ANA }, { token: 'wrong' })).status).toBe(401);
    expect(rowsHolding(ANA)).toBeGreaterThan(0);
    expect(audits('subject_erase')).toHaveLength(0);
  });

  it('erase: the summary, the journal, audited, and no row holds the CPF afterwards; others keep theirs', async () => {
    const res = await admin('/subjects/erase', { cpf: ANA, reason: 'request 2026-17 by e-mail' });
    expect(res.status).toBe(200);
    const erasure = res.body.log.erasure;
    expect(erasure).toMatchObject({ erasure_id: expect.stringMatching(/^era_/), proposals: 2, events: 4 });
    expect(erasure.notified).toEqual(['default']);
    expect(res.body.log).toMatchObject({ proposals: 2, proposals_with_personal_data: 0, raw_copies: 0 });
    expect(res.body.journal).toBe(`${r.dbPath}.erasures`);
    expect(existsSync(`${r.dbPath}.erasures`)).toBe(true);
    expect(rowsHolding(ANA)).toBe(0);
    expect(rowsHolding(BRUNO)).toBeGreaterThan(0);
    const [row] = audits('subject_erase');
    expect(row).toMatchObject({ person: 'admin-token', ip: '127.0.0.1', target: erasure.erasure_id });
    expect(JSON.parse(row!.detail!)).toMatchObject({ reason: 'request 2026-17 by e-mail' });
    expect(
      db().prepare('SELECT requested_by, reason FROM erasures WHERE erasure_id = ?').get(erasure.erasure_id),
    ).toEqual({ requested_by: 'admin-token', reason: 'request 2026-17 by e-mail' });
    // Found again: what is left is the legal-hold set, and the erasure.
    const again = await admin('/subjects/find', { cpf: ANA });
    expect(again.body.log).toMatchObject({ proposals: 2, proposals_with_personal_data: 0 });
    expect(again.body.log.erasures).toEqual([erasure.erasure_id]);
  });

  it('404 when ADMIN_TOKEN is unset, as every admin route', async () => {
    const bare = await startTestApp({ VIEWER_TOKEN: VIEWER });
    try {
      const res = await fetch(`${bare.url}/admin/subjects/find`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ cpf: ANA }),
      });
      expect(res.status).toBe(404);
    } finally {
      await bare.close();
    }
  });
});

describe('/console/subjects', () => {
  it('an admin finds a person: counts per place, the CPF masked, audited with the session', async () => {
    const c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
    const form = await c.get('/console/subjects');
    expect(form.status).toBe(200);
    expect(form.text).toContain('<h1>Personal data</h1>');
    expect(form.text).toContain('<a href="/console/subjects" aria-current="page">Personal data</a>');
    const csrf = await c.csrf('/console/subjects');
    const res = await c.post('/console/subjects', { _csrf: csrf, cpf: BRUNO });
    expect(res.status).toBe(200);
    expect(res.text).toContain('***.654.321-**: what the receiver holds');
    expect(res.text).toContain(`<th scope="row">log ${r.dbPath}</th><td class="num">1</td>`);
    expect(res.raw).not.toContain(BRUNO);
    const [row] = audits('subject_find').filter((a) => a.session !== null);
    expect(row).toMatchObject({ role: 'admin', person: null, ip: '127.0.0.1' });
  });

  it('an admin erases a person: the box must be ticked; then the summary and no row holds the CPF', async () => {
    const c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
    const csrf = await c.csrf('/console/subjects');
    const unticked = await c.post('/console/subjects/erase', { _csrf: csrf, cpf: CARLA, reason: 'ticket 9' });
    expect(unticked.status).toBe(400);
    expect(unticked.text).toContain('confirm: tick the box');
    const noReason = await c.post('/console/subjects/erase', { _csrf: csrf, cpf: CARLA, confirm: 'erase' });
    expect(noReason.status).toBe(400);
    expect(rowsHolding(CARLA)).toBeGreaterThan(0);
    const res = await c.post('/console/subjects/erase', {
      _csrf: csrf,
      cpf: CARLA,
      reason: 'ticket 9',
      confirm: 'erase',
    });
    expect(res.status).toBe(200);
    expect(res.text).toMatch(
      /\*\*\*\.982\.247-\*\*: erased \(era_[\w-]{22}\); what is left is the legal-hold set/,
    );
    expect(res.raw).not.toContain(CARLA);
    expect(rowsHolding(CARLA)).toBe(0);
    expect(rowsHolding(BRUNO)).toBeGreaterThan(0);
    const [row] = audits('subject_erase').filter((a) => a.session !== null);
    expect(row).toMatchObject({ role: 'admin', person: null, ip: '127.0.0.1' });
    expect(
      (
        db().prepare('SELECT requested_by FROM erasures WHERE erasure_id = ?').get(row!.target) as {
          requested_by: string;
        }
      ).requested_by,
    ).toBe(`console:${row!.session}`);
  });

  it('a viewer is refused (403, audited as refused: role), and sees no link', async () => {
    const c = new ConsoleClient(r.url);
    await c.signIn(VIEWER);
    expect((await c.get('/console/audit')).text).not.toContain('/console/subjects');
    expect((await c.get('/console/subjects')).status).toBe(403);
    const csrf = await c.csrf();
    expect((await c.post('/console/subjects', { _csrf: csrf, cpf: BRUNO })).status).toBe(403);
    const refused = db()
      .prepare(
        "SELECT role, target AS route FROM console_audit WHERE outcome = 'refused' AND reason = 'role'",
      )
      .all();
    expect(refused).toEqual(
      expect.arrayContaining([
        { role: 'viewer', route: 'GET /console/subjects' },
        { role: 'viewer', route: 'POST /console/subjects' },
      ]),
    );
  });

  it('a POST without the CSRF token is refused (403, audited) and finds nothing', async () => {
    const c = new ConsoleClient(r.url);
    await c.signIn(ADMIN);
    const before = audits('subject_find').length;
    const res = await c.post('/console/subjects', { cpf: BRUNO });
    expect(res.status).toBe(403);
    expect(res.text).toContain('CSRF token missing or invalid');
    expect(audits('subject_find')).toHaveLength(before);
    expect(
      db()
        .prepare("SELECT count(*) AS n FROM console_audit WHERE outcome = 'refused' AND reason = 'csrf'")
        .get(),
    ).toEqual({ n: 1 });
  });
});
