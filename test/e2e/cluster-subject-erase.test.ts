import { closeSync, openSync, readdirSync, readSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { countInFile } from '../../src/sqlite/scrub';
import { cpfForms } from '../../src/domain/subject';
import { pgBed } from '../helpers/cluster-bed';
import { count, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { bodyOf, FakeDestination, type Received } from '../helpers/destination';
import { delivery, SECRET } from '../helpers/payloads';
import { runCliAsync, type ServerProcess, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * Issue 45, item 10: `subject find|export|erase` in cluster mode, end to end. Two real `serve`
 * replicas (the built receiver, dist/: `npm run build` first) on one PostgreSQL, each on its own
 * spool, forwarding to a destination that asked for the CPF in full (and echoes what it is sent,
 * so the attempts' answers hold it too). Two people's deliveries go round-robin to both replicas;
 * the commands run as processes beside replica 1 (DATABASE_URL, and DATABASE_PATH = its spool)
 * while both replicas run. Then every PostgreSQL row, both spools' bytes, PostgreSQL's data files
 * and what the destination received are searched for A's CPF in both its forms.
 *
 * Replicas as processes (as cluster-freeze.test.ts runs them): the spools are files the commands
 * open beside live replicas, as an operator's would be. Measurements that the docs do not promise
 * (PostgreSQL's files after a plain VACUUM, replica 2's spool) are printed on one line
 * (`cluster-subject-erase: {...}`), not asserted; what docs/privacy.md promises is.
 */

const A = '52998224725';
const B = '16899535009';
const A_FORMS = cpfForms(A);
const B_FORMS = cpfForms(B);
const A_NUS = [71001, 71002];
const B_NUS = [72001, 72002];
const CNPJ = '11222333000181';
const DESTINATION_SECRET = `whsec_${Buffer.from('subject-test-lender-secret-01234').toString('base64')}`;

const bed = pgBed({ prefix: 'subject' });

let tmp: ReturnType<typeof tempDir>;
let destination: FakeDestination;
const fleet: ServerProcess[] = [];

beforeEach(async () => {
  tmp = tempDir('consig-subject-');
  // Echoes the body: the attempt's stored answer holds what was sent (the CPF in full).
  destination = await FakeDestination.start((req) => ({ status: 200, body: req.raw.toString('utf8') }));
});
afterEach(async () => {
  for (const s of fleet.splice(0)) s.child.kill('SIGKILL');
  await destination.close();
  tmp.cleanup();
});

const spoolOf = (name: string): string => join(tmp.dir, `${name}.db`);

function destinationsFile(): string {
  const file = join(tmp.dir, 'destinations.json');
  writeFileSync(
    file,
    JSON.stringify({
      destinations: [{ name: 'crm', url: destination.url, secret: DESTINATION_SECRET, full_cpf: true }],
    }),
  );
  return file;
}

async function replica(name: string): Promise<ServerProcess> {
  const s = await startServe({
    DATABASE_URL: bed.url,
    DATABASE_PATH: spoolOf(name),
    REPLICA_ID: name,
    CLUSTER_CONCURRENCY: '2',
    RELAY_INTERVAL_MS: '20',
    WEBHOOK_SECRETS: SECRET,
    DESTINATIONS_FILE: destinationsFile(),
    // Set, as an operator should: the replicas prune their spools of relayed rows older than a day.
    RETENTION_DAYS: '1',
    LOG_LEVEL: 'info',
  });
  fleet.push(s);
  await waitFor(
    async () => /^consig_cluster_connected 1$/m.test(await (await fetch(`${s.url}/metrics`)).text()),
    `${name} connected`,
  );
  return s;
}

async function relayBacklog(s: ServerProcess): Promise<number> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const m = /^consig_relay_backlog (\d+)$/m.exec(text);
  if (!m) throw new Error('no consig_relay_backlog');
  return Number(m[1]);
}

/** One person's story: two proposals, one with an averbação whose registry answer names the CPF (formatted). */
interface Step {
  body: unknown;
  path?: string;
}

function story(cpf: string, nus: readonly number[]): Step[] {
  const [first, second] = nus as [number, number];
  const dados = (nu: number, extra: Record<string, unknown> = {}) => ({
    nu_proposta: nu,
    nu_cpf: cpf,
    nu_cnpj_conveniada: CNPJ,
    ...extra,
  });
  const requestId = `req-${first}`;
  return [
    { body: delivery('proposta.criada', { nu_proposta: first, dados: dados(first) }) },
    { body: delivery('proposta.criada', { nu_proposta: second, dados: dados(second) }) },
    {
      body: delivery('proposta.pre_aprovada', {
        nu_proposta: first,
        dados: dados(first, { vl_emprestimo: 12000.5, st_proposta: 'pre_aprovada' }),
      }),
    },
    {
      body: delivery('proposta.pre_aprovada', {
        nu_proposta: second,
        dados: dados(second, { vl_emprestimo: 8000.25, st_proposta: 'pre_aprovada' }),
      }),
    },
    {
      body: delivery('averbacao.solicitada', {
        nu_proposta: first,
        dados: dados(first, { requestId, correlationId: `corr-${first}` }),
      }),
    },
    {
      body: {
        requestId,
        status: 'completed',
        correlationId: `corr-${first}`,
        servidor: { cpf: cpfForms(cpf)[1] },
      },
      path: '/webhooks/registry',
    },
  ];
}

/**
 * Sends `steps` in turn to `targets` round-robin (each answered 200), then waits for PostgreSQL and
 * the destination; returns the index of the replica each step went to.
 */
async function sendAndSettle(
  targets: readonly ServerProcess[],
  steps: readonly Step[],
  first = 0,
): Promise<number[]> {
  const before = await count(bed.pool, 'SELECT count(*) AS n FROM events');
  const went: number[] = [];
  for (const [i, step] of steps.entries()) {
    const to = (first + i) % targets.length;
    went.push(to);
    const answer = await sendSigned((targets[to] as ServerProcess).url, step.body, step.path);
    if (answer.status !== 200 || answer.body.status !== 'accepted')
      throw new Error(`step ${i}: ${answer.status} ${JSON.stringify(answer.body)}`);
  }
  await settled(targets, before + steps.length);
  return went;
}

async function settled(replicas: readonly ServerProcess[], events: number): Promise<void> {
  await waitFor(async () => {
    const backlogs = await Promise.all(replicas.map(relayBacklog));
    return backlogs.every((b) => b === 0);
  }, "every replica's spool relayed");
  await waitFor(
    async () =>
      (await count(bed.pool, 'SELECT count(*) AS n FROM events')) === events &&
      (await count(bed.pool, "SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')")) === 0,
    `${events} events processed`,
  );
  await forwarded();
}

/** Every forward delivery delivered, and every one answered at the destination. */
async function forwarded(): Promise<void> {
  await waitFor(
    async () =>
      (await count(bed.pool, "SELECT count(*) AS n FROM forward_deliveries WHERE status <> 'delivered'")) ===
        0 && (await count(bed.pool, 'SELECT count(*) AS n FROM forward_deliveries')) > 0,
    'every forward delivery delivered',
  );
}

/** The rows of every table of the cluster schema whose text (or bytes, for bytea columns) holds one of `forms`. */
async function rowsHolding(pool: Pool, forms: readonly string[]): Promise<Record<string, string[]>> {
  const tables = await rows<{ table_name: string }>(
    pool,
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
  );
  const byteaColumns = await rows<{ table_name: string; column_name: string }>(
    pool,
    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' AND data_type = 'bytea'",
  );
  const found: Record<string, string[]> = {};
  const patterns = forms.map((f) => `%${f}%`);
  const needles = forms.map((f) => Buffer.from(f, 'latin1'));
  for (const { table_name: t } of tables) {
    const bytea = byteaColumns.filter((c) => c.table_name === t).map((c) => `"${c.column_name}"`);
    // A row's text shows bytea as hex: its bytes are searched with position() instead.
    const byteaMatch = bytea.flatMap((c) => needles.map((_, i) => `position($${i + 2}::bytea IN ${c}) > 0`));
    const where = ['x::text LIKE ANY($1)', ...byteaMatch].join(' OR ');
    const hits = await rows<{ r: string }>(
      pool,
      `SELECT row_to_json(x)::text AS r FROM "${t}" x WHERE ${where} ORDER BY x::text`,
      [patterns, ...(bytea.length > 0 ? needles : [])],
    );
    if (hits.length > 0) found[t] = hits.map((h) => h.r);
  }
  return found;
}

/** Rows of one table holding A in each of the places the issue names, counted apart (for a failure's message). */
async function namedPlaces(pool: Pool, forms: readonly string[]): Promise<Record<string, number>> {
  const [digits, formatted] = forms as [string, string];
  const like = (col: string) => `(${col} LIKE '%${digits}%' OR ${col} LIKE '%${formatted}%')`;
  const places: Record<string, string> = {
    'events.body': `SELECT count(*) AS n FROM events WHERE position('${digits}'::bytea IN body) > 0 OR position('${formatted}'::bytea IN body) > 0`,
    'events.last_error': `SELECT count(*) AS n FROM events WHERE ${like('last_error')}`,
    'forward_messages.body': `SELECT count(*) AS n FROM forward_messages WHERE ${like('body::text')}`,
    'forward_attempts.answer/error': `SELECT count(*) AS n FROM forward_attempts WHERE ${like('answer')} OR ${like('error')}`,
    'forward_deliveries.last_error': `SELECT count(*) AS n FROM forward_deliveries WHERE ${like('last_error')}`,
    'averbacoes.result_body': `SELECT count(*) AS n FROM averbacoes WHERE ${like('result_body')}`,
    'proposals.*': `SELECT count(*) AS n FROM proposals x WHERE ${like('x::text')}`,
    'console_audit.detail/target': `SELECT count(*) AS n FROM console_audit WHERE ${like('detail')} OR ${like('target')}`,
  };
  const out: Record<string, number> = {};
  for (const [place, sql] of Object.entries(places)) out[place] = await count(pool, sql);
  return out;
}

function occurrences(buf: Buffer, needle: Buffer): number {
  let n = 0;
  for (let at = buf.indexOf(needle); at !== -1; at = buf.indexOf(needle, at + 1)) n += 1;
  return n;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/** Raw copies of `forms` in the files under `dir` (whole files read: PostgreSQL's test relations are small). */
function rawCopiesUnder(dir: string, forms: readonly string[]): number {
  const needles = forms.map((f) => Buffer.from(f, 'latin1'));
  let n = 0;
  for (const file of filesUnder(dir)) {
    if (statSync(file).size === 0) continue;
    const fd = openSync(file, 'r');
    try {
      const buf = Buffer.alloc(statSync(file).size);
      readSync(fd, buf, 0, buf.length, 0);
      for (const needle of needles) n += occurrences(buf, needle);
    } finally {
      closeSync(fd);
    }
  }
  return n;
}

/**
 * Raw copies of A's CPF in this test database's relation files (base/<oid>/, after a CHECKPOINT
 * wrote the dirty pages out) and in the server's WAL (pg_wal/: shared with the worker's other
 * files' databases, so reported only).
 */
async function pgFileCopies(pool: Pool): Promise<{ base: number; wal: number }> {
  await pool.query('CHECKPOINT');
  const [row] = await rows<{ oid: number }>(
    pool,
    'SELECT oid FROM pg_database WHERE datname = current_database()',
  );
  const dataDir = bed.pg.dataDir;
  return {
    base: rawCopiesUnder(join(dataDir, 'base', String(row?.oid)), A_FORMS),
    wal: rawCopiesUnder(join(dataDir, 'pg_wal'), A_FORMS),
  };
}

const spoolCopies = (path: string, forms: readonly string[] = A_FORMS): number =>
  countInFile(path, forms) + countInFile(`${path}-wal`, forms);

function commandEnv(spool: string): Record<string, string> {
  return { DATABASE_URL: bed.url, DATABASE_PATH: spool };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the commands' JSON is read loosely
async function command(args: string[], spool: string): Promise<any> {
  const out = await runCliAsync(args, commandEnv(spool));
  if (out.status !== 0) throw new Error(`${args.join(' ')} exited ${out.status}: ${out.stderr}${out.stdout}`);
  return args.includes('--json') || args[1] === 'export' ? JSON.parse(out.stdout) : out.stdout;
}

const holdsA = (r: Received): boolean => A_FORMS.some((f) => r.raw.toString('utf8').includes(f));

const proposalsOf = (nus: readonly number[]) =>
  rows(
    bed.pool,
    `SELECT nu_proposta::text AS nu, status, stage, vl_emprestimo::text AS amount, nu_cpf, nu_cnpj_conveniada,
       no_conveniada, personal_erased_at, erasure_id
     FROM proposals WHERE nu_proposta::text = ANY($1) ORDER BY 1`,
    [nus.map(String)],
  );

describe('subject erase in cluster mode: two replicas, one PostgreSQL (issue 45, item 10)', () => {
  jest.setTimeout(180_000);

  it('finds, exports and erases A everywhere PostgreSQL and the spool beside the command hold them, tells the destination once, keeps B, and erases a late event of A', async () => {
    const measured: Record<string, unknown> = {};
    const r1 = await replica('r1');
    const r2 = await replica('r2');
    // 1. Both people's deliveries, interleaved (A, B, B, A, A, B, …), round-robin to the two
    // replicas: each gets half of each person's. The registry answers after the averbações are
    // declared (another work key: processed in no set order with them otherwise).
    const a = story(A, A_NUS);
    const b = story(B, B_NUS);
    const lifecycle = a.slice(0, 5).flatMap((s, i) => (i % 2 === 0 ? [s, b[i] as Step] : [b[i] as Step, s]));
    const results = [a[5] as Step, b[5] as Step];
    const went = [
      ...(await sendAndSettle([r1, r2], lifecycle)),
      ...(await sendAndSettle([r1, r2], results, 1)),
    ];
    const sent = [...lifecycle, ...results];
    const aToR1 = sent.filter((s, i) => a.includes(s) && went[i] === 0).length;
    const aToR2 = sent.filter((s, i) => a.includes(s) && went[i] === 1).length;
    expect([aToR1, aToR2]).toEqual([3, 3]);
    // The destination asked for the CPF in full and got A's.
    expect(destination.requests.filter(holdsA).length).toBeGreaterThan(0);
    expect(await namedPlaces(bed.pool, A_FORMS)).toMatchObject({
      'events.body': 6,
      'forward_attempts.answer/error': expect.any(Number),
      'averbacoes.result_body': 1,
      'proposals.*': 2,
    });

    // 2. find and export, as processes beside replica 1.
    const found = await command(['subject', 'find', A, '--json'], spoolOf('r1'));
    const aEventsInPg = await count(
      bed.pool,
      `SELECT count(*) AS n FROM events WHERE convert_from(body, 'UTF8') LIKE '%${A}%' OR convert_from(body, 'UTF8') LIKE '%${A_FORMS[1]}%'`,
    );
    expect(aEventsInPg).toBe(a.length);
    expect(found.log).toMatchObject({
      proposals: 2,
      proposals_with_personal_data: 2,
      events: aEventsInPg,
      events_with_body: aEventsInPg,
      averbacoes: 1,
      recipients: ['destination:crm'],
      erasures: [],
      notices: [],
      raw_copies: null,
    });
    expect(found.log.messages).toBeGreaterThan(0);
    // Replica 1's spool: the deliveries of A it acknowledged.
    expect(found.spool).toMatchObject({ place: spoolOf('r1'), events: aToR1 });
    expect(found.spool.raw_copies).toBeGreaterThan(0);
    const exported = await command(['subject', 'export', A], spoolOf('r1'));
    expect(exported.format).toBe('consig-receiver/subject-export@1');
    expect(exported.places[0].events).toHaveLength(aEventsInPg);
    expect(exported.places[1].place).toBe(spoolOf('r1'));
    expect(exported.places[1].events).toHaveLength(aToR1);

    const bBefore = await rowsHolding(bed.pool, B_FORMS);
    expect(Object.keys(bBefore)).toEqual(
      expect.arrayContaining(['events', 'proposals', 'averbacoes', 'forward_messages', 'forward_attempts']),
    );
    const aProposalsBefore = await proposalsOf(A_NUS);
    measured.r2SpoolBeforeErase = spoolCopies(spoolOf('r2'));
    measured.r1SpoolBeforeErase = spoolCopies(spoolOf('r1'));
    measured.pgFilesBeforeErase = await pgFileCopies(bed.pool);
    const noticesBefore = destination.requests.filter((r) => bodyOf(r).type === 'subject.erased').length;
    expect(noticesBefore).toBe(0);

    // 3. The erasure, beside replica 1, both replicas running.
    const erased = await command(['subject', 'erase', A, '--reason', 't', '--yes', '--json'], spoolOf('r1'));
    expect(erased.log.erasure).toMatchObject({ proposals: 2, notified: ['crm'] });
    expect(erased.log.scrub).toMatchObject({ vacuum: 'plain' });
    expect(erased.spool).toMatchObject({ place: spoolOf('r1'), raw_copies: 0 });

    // 4. PostgreSQL: no row holds A's CPF, in any table, in either form; B's rows as they were.
    expect(await namedPlaces(bed.pool, A_FORMS)).toEqual({
      'events.body': 0,
      'events.last_error': 0,
      'forward_messages.body': 0,
      'forward_attempts.answer/error': 0,
      'forward_deliveries.last_error': 0,
      'averbacoes.result_body': 0,
      'proposals.*': 0,
      'console_audit.detail/target': 0,
    });
    expect(await rowsHolding(bed.pool, A_FORMS)).toEqual({});
    const aProposals = await proposalsOf(A_NUS);
    expect(aProposals).toEqual(
      aProposalsBefore.map((p) => ({
        ...p,
        nu_cpf: null,
        nu_cnpj_conveniada: null,
        no_conveniada: null,
        personal_erased_at: expect.any(Date),
        erasure_id: erased.log.erasure.erasure_id,
      })),
    );
    expect(aProposalsBefore.every((p) => p.nu_cpf === A && p.amount !== null)).toBe(true);
    // Replica 1's spool, file and WAL: no raw copy.
    expect(spoolCopies(spoolOf('r1'))).toBe(0);
    // The destination: exactly one subject.erased, naming A's proposals and no CPF.
    await forwarded();
    await waitFor(
      () => destination.requests.some((r) => bodyOf(r).type === 'subject.erased'),
      'the subject.erased notice at the destination',
    );
    const notices = destination.requests.filter((r) => bodyOf(r).type === 'subject.erased');
    expect(new Set(notices.map((n) => n.webhookId)).size).toBe(1);
    expect(notices.some(holdsA)).toBe(false);
    expect(FakeDestination.verifies(notices[0] as Received, DESTINATION_SECRET)).toBe(true);
    expect(bodyOf(notices[0] as Received).data).toMatchObject({
      erasure_id: erased.log.erasure.erasure_id,
      nu_propostas: expect.arrayContaining(A_NUS),
      request_ids: [`req-${A_NUS[0]}`],
    });
    const after = await command(['subject', 'find', A, '--json'], spoolOf('r1'));
    expect(after.log).toMatchObject({
      proposals: 2,
      proposals_with_personal_data: 0,
      events_with_body: aEventsInPg,
      erasures: [erased.log.erasure.erasure_id],
      notices: [{ erasure_id: erased.log.erasure.erasure_id, destination: 'crm', status: 'delivered' }],
    });
    expect(after.spool.raw_copies).toBe(0);
    // B: every row holding B's CPF exactly as it was.
    expect(await rowsHolding(bed.pool, B_FORMS)).toEqual(bBefore);
    measured.pgFilesAfterPlainVacuum = await pgFileCopies(bed.pool);

    // 5. Replica 2's spool: its relay has nothing left to send; what is left of A there. Measured,
    // not asserted here: the relay deletes nothing, only the retention pass does (relayed rows
    // received before the RETENTION_DAYS cutoff); the promise docs/privacy.md §6 makes is the
    // `it.failing` case below.
    await waitFor(async () => (await relayBacklog(r2)) === 0, "replica 2's relay caught up");
    measured.r2SpoolAfterEraseRelayed = spoolCopies(spoolOf('r2'));
    // What `prune` can do on demand: --days 1 is its least; the rows are younger than a day.
    const pruned = await command(['prune', '--days', '1', '--json'], spoolOf('r2'));
    measured.r2PruneDays1 = pruned.spool;
    measured.r2SpoolAfterPrune = spoolCopies(spoolOf('r2'));

    // 6. A late delivery of one of A's proposals, naming A's CPF, to replica 2.
    const late = delivery('proposta.aprovada', {
      nu_proposta: A_NUS[1],
      dados: { nu_proposta: A_NUS[1], nu_cpf: A, nu_cnpj_conveniada: CNPJ, st_proposta: 'aprovada' },
    });
    const requestsBeforeLate = destination.requests.length;
    await sendAndSettle([r2], [{ body: late }]);
    expect(await rowsHolding(bed.pool, A_FORMS)).toEqual({});
    const [lateEvent] = await rows<{ id: string; status: string }>(
      bed.pool,
      `SELECT id::text, status FROM events WHERE webhook_id = $1`,
      [(late.metadata as { webhook_id: string }).webhook_id],
    );
    expect(lateEvent?.status).toBe('done');
    const lateMessages = await rows<{ webhook_id: string; type: string }>(
      bed.pool,
      'SELECT webhook_id, type FROM forward_messages WHERE event_id = $1',
      [lateEvent?.id],
    );
    expect(lateMessages.length).toBeGreaterThan(0);
    const lateIds = new Set(lateMessages.map((m) => m.webhook_id));
    const lateForwarded = destination.requests
      .slice(requestsBeforeLate)
      .filter((r) => lateIds.has(r.webhookId));
    expect(new Set(lateForwarded.map((r) => r.webhookId))).toEqual(lateIds);
    expect(lateForwarded.filter(holdsA)).toEqual([]);
    // Erased as a whole, not only the CPF: the employer and its CNPJ are gone from the body and the messages.
    const personal = ['Empresa Exemplo', CNPJ];
    const [lateBody] = await rows<{ b: string }>(
      bed.pool,
      "SELECT convert_from(body, 'UTF8') AS b FROM events WHERE id = $1",
      [lateEvent?.id],
    );
    expect(personal.filter((p) => lateBody?.b.includes(p))).toEqual([]);
    expect(lateForwarded.filter((r) => personal.some((p) => r.raw.toString('utf8').includes(p)))).toEqual([]);
    // The proposal moved on (the loan's facts are the legal-hold set), its personal fields still empty.
    expect(await proposalsOf([A_NUS[1] as number])).toEqual([
      expect.objectContaining({ status: 'aprovada', nu_cpf: null, personal_erased_at: expect.any(Date) }),
    ]);
    expect(await rowsHolding(bed.pool, B_FORMS)).toEqual(bBefore);
    measured.r2SpoolAfterLateEvent = spoolCopies(spoolOf('r2'));
    measured.pgFilesAfterLateEvent = await pgFileCopies(bed.pool);
    measured.subjectErasedNoticesBeforeVacuumRun = destination.requests.filter(
      (r) => bodyOf(r).type === 'subject.erased',
    ).length;

    // 7. Run again with --vacuum (VACUUM FULL), beside replica 2 this time: its spool is the one
    // beside the command, erased at once (§6), which is what an operator can do for each replica
    // today. It is a second erasure: PostgreSQL records it and the destination is told again.
    const again = await command(
      ['subject', 'erase', A, '--reason', 't', '--yes', '--vacuum', '--json'],
      spoolOf('r2'),
    );
    expect(again.log.scrub).toMatchObject({ vacuum: 'full' });
    measured.secondErasure = again.log.erasure;
    measured.r2SpoolAfterEraseBesideIt = spoolCopies(spoolOf('r2'));
    expect(measured.r2SpoolAfterEraseBesideIt).toBe(0);
    measured.pgFilesAfterVacuumFull = await pgFileCopies(bed.pool);
    expect(await rowsHolding(bed.pool, A_FORMS)).toEqual({});
    await forwarded();
    measured.subjectErasedNoticesAfterVacuumRun = new Set(
      destination.requests.filter((r) => bodyOf(r).type === 'subject.erased').map((r) => r.webhookId),
    ).size;
    // VACUUM FULL rewrites each table the erasure touched into new files: no dead version is left there.
    expect((measured.pgFilesAfterVacuumFull as { base: number }).base).toBe(0);
    console.log(`cluster-subject-erase: ${JSON.stringify(measured)}`);
  });

  /**
   * docs/privacy.md §6 "Spools": a spool keeps relayed deliveries until RETENTION_DAYS (a failover
   * to a standby that lagged is repaired from them), so an erasure run beside one replica must reach
   * the others' spools: each replica applies PostgreSQL's erasures to its own. Found by this file's
   * first version: replica 2's spool held 9 raw copies of A's CPF before the erasure and 9 after it
   * (src/sqlite/spool.ts prunes relayed rows only in its retention pass).
   */
  it("replica 2's spool holds no raw copy of A's CPF soon after the erasure ran beside replica 1 (docs/privacy.md §6)", async () => {
    const r1 = await replica('r1');
    const r2 = await replica('r2');
    await sendAndSettle([r1, r2], story(A, A_NUS).slice(0, 4));
    const r2Spool = spoolOf('r2');
    expect(spoolCopies(r2Spool)).toBeGreaterThan(0);
    const erased = await command(['subject', 'erase', A, '--reason', 't', '--yes', '--json'], spoolOf('r1'));
    expect(erased.log.erasure?.proposals).toBe(2);
    expect(await rowsHolding(bed.pool, A_FORMS)).toEqual({});
    // Replica 2 applies PostgreSQL's erasures to its own spool (subject-places.ts
    // applyErasuresToSpool, every 10 s while connected), then truncates its WAL.
    await waitFor(async () => spoolCopies(r2Spool) === 0, "replica 2's spool erased", 60_000);
  });
});
