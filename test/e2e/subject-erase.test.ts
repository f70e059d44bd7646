import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from '../../src/sqlite/sqlite-driver';
import { bodyOf, FakeDestination, type Received } from '../helpers/destination';
import { delivery, HAPPY_PATH, postRaw, SECRET, signed } from '../helpers/payloads';
import { runCliAsync, type ServerProcess, startServe } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * Issue 45, item 10, in SQLite mode, with real processes only: `serve` as a child process on a
 * temporary SQLite file, forwarding to real HTTP destinations (FakeDestination), and `backup`,
 * `subject find|export|erase` as child processes of the built CLI beside it. docs/privacy.md says
 * what `subject erase` promises; each step below checks one of those promises from outside: the
 * file's raw bytes (no SQL), the destinations' requests, the process's log.
 *
 * Person A (52998224725) has proposals 100001, 100003, 100005; person B (16899535009) 200002 and
 * 200004, and every proposal of the trickle sent during the erasure (200100…). Destinations: `crm`
 * (every type, CPF in full), `dw` (`proposal.changed` only, CPF masked) and `late`, whose filter
 * lets through B's proposals only (nu_proposta ≥ 200000): it was never sent A's data, so it must
 * not be told of A's erasure.
 */

jest.setTimeout(240_000);

const A = '52998224725';
const A_FORMATTED = '529.982.247-25';
const B = '16899535009';
const A_PROPOSALS = [100001, 100003, 100005];
const B_PROPOSALS = [200002, 200004];
/** The proposal of A whose averbação gets a registry result (naming A in the formatted form). */
const A_REGISTERED = 100003;
const requestIdOf = (nu: number) => `req-${nu}`;

const SECRETS = {
  crm: `whsec_${Buffer.from('crm-secret-0123456789').toString('base64')}`,
  dw: `whsec_${Buffer.from('dw-secret-0123456789').toString('base64')}`,
  late: `whsec_${Buffer.from('late-secret-0123456789').toString('base64')}`,
};

/** The life cycle each proposal goes through (interface §6.2), in order. */
const LIFE_CYCLE = HAPPY_PATH;

let tmp: ReturnType<typeof tempDir>;
let dataDir: string;
let dbPath: string;
let destinations: Record<'crm' | 'dw' | 'late', FakeDestination>;
let servers: ServerProcess[] = [];
/** What the steps hand on to the restores (step 7). */
let env: Record<string, string>;
let erasureId = '';
/** cp copies of the two backups, taken before the erasure, that the receiver does not know about. */
let pristine: { beforeKey: string; afterKey: string };

// One temporary directory and one set of destinations for the file: the tests below are the steps of
// one story, in order (jest runs a file's tests one after the other), each starting where the one
// before left the files.
beforeAll(async () => {
  tmp = tempDir('consig-subject-e2e-');
  dataDir = join(tmp.dir, 'data');
  dbPath = join(dataDir, 'consig.db');
  for (const d of ['data', 'backups', 'outside', 'logs']) mkdirSync(join(tmp.dir, d));
  destinations = {
    crm: await FakeDestination.start(),
    dw: await FakeDestination.start(),
    late: await FakeDestination.start(),
  };
  servers = [];
});

afterAll(async () => {
  for (const s of servers) s.child.kill('SIGKILL');
  await Promise.all(servers.map((s) => s.exited));
  for (const d of Object.values(destinations)) await d.close();
  tmp.cleanup();
});

/** The receiver's environment (the commands' too): the file, the three destinations. */
function environment(): Record<string, string> {
  const file = join(tmp.dir, 'destinations.json');
  writeFileSync(
    file,
    JSON.stringify({
      destinations: [
        { name: 'crm', url: destinations.crm.url, secret: SECRETS.crm, full_cpf: true },
        { name: 'dw', url: destinations.dw.url, secret: SECRETS.dw, types: ['proposal.changed'] },
        {
          name: 'late',
          url: destinations.late.url,
          secret: SECRETS.late,
          filter: { 'data.nu_proposta': { $gte: 200000 } },
        },
      ],
    }),
  );
  return { DATABASE_PATH: dbPath, DESTINATIONS_FILE: file };
}

async function serve(env: Record<string, string>): Promise<ServerProcess> {
  const s = await startServe({
    ...env,
    WEBHOOK_SECRETS: SECRET,
    ADMIN_TOKEN: 'subject-admin-token-0123456789',
    LOG_LEVEL: 'info',
  });
  servers.push(s);
  return s;
}

/** Stops `s` with SIGTERM and keeps what it logged in `logs/<name>.log`; the exit code. */
async function stop(s: ServerProcess, name: string): Promise<number | null> {
  s.child.kill('SIGTERM');
  const { code } = await s.exited;
  writeFileSync(join(tmp.dir, 'logs', `${name}.log`), s.output());
  return code;
}

let minute = 0;
/** A delivery with a timestamp later than every one before it (the service's order). */
function next(evento: string, nu: number, cpf: string, dados: Record<string, unknown> = {}) {
  minute += 1;
  const body = delivery(evento, { nu_proposta: nu, dados: { nu_cpf: cpf, ...dados } });
  const hh = String(10 + Math.floor(minute / 60)).padStart(2, '0');
  const mm = String(minute % 60).padStart(2, '0');
  return { ...body, timestamp: `2026-11-21T${hh}:${mm}:00-03:00` };
}

async function post(url: string, body: unknown, path = '/webhooks') {
  const { raw, signature } = signed(body);
  return postRaw(`${url}${path}`, raw, {
    'content-type': 'application/json',
    'x-service-signature': signature,
  });
}

/** A read-only query on the log, its connection closed at once (it must not hold the WAL). */
function query<T>(text: string, ...params: unknown[]): T[] {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    return db.prepare(text).all(...params) as T[];
  } finally {
    db.close();
  }
}

/** The rows of the log that hold `forms` of a CPF, by SQL: the logical view. */
const TEXT_COLUMNS: [string, string][] = [
  ['events', 'body'],
  ['events', 'last_error'],
  ['forward_messages', 'body'],
  ['forward_attempts', 'answer'],
  ['forward_attempts', 'error'],
  ['forward_deliveries', 'last_error'],
  ['proposals', 'nu_cpf'],
  ['averbacoes', 'result_body'],
  ['console_audit', 'target'],
  ['console_audit', 'detail'],
];

/** Occurrences of each form in every text column of {@link TEXT_COLUMNS} (SQL `replace`), summed. */
function logicalCount(forms: readonly string[]): number {
  let n = 0;
  for (const [table, column] of TEXT_COLUMNS)
    for (const form of forms) {
      const [row] = query<{ n: number }>(
        `SELECT coalesce(sum((length(CAST(${column} AS TEXT)) - length(replace(CAST(${column} AS TEXT), ?, ''))) / ?), 0) AS n
         FROM ${table}`,
        form,
        form.length,
      );
      n += row?.n ?? 0;
    }
  return n;
}

/** Events whose body names the CPF in either form, by a raw SQL LIKE scan. */
const eventsNaming = (forms: readonly string[]) =>
  query<{ id: number }>(
    `SELECT id FROM events WHERE ${forms.map(() => 'CAST(body AS TEXT) LIKE ?').join(' OR ')} ORDER BY id`,
    ...forms.map((f) => `%${f}%`),
  ).map((r) => r.id);

/** Copies of A's CPF, in either form, in a file's raw bytes (0 for no file). */
function rawCount(path: string, forms: readonly string[] = [A, A_FORMATTED]): number {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch {
    return 0;
  }
  let n = 0;
  for (const form of forms)
    for (let at = bytes.indexOf(form, 0, 'latin1'); at !== -1; at = bytes.indexOf(form, at + 1, 'latin1'))
      n += 1;
  return n;
}

/**
 * Where the copies of A's CPF in a SQLite file lie: in the unallocated gap of a b-tree page (between
 * its cell pointers and its cell content, which no row reaches), or anywhere else (a row, a freeblock,
 * a free page: what `secure_delete` zeroes and an erasure rewrites).
 */
function copiesIn(path: string): { gap: number; elsewhere: number } {
  const bytes = readFileSync(path);
  const pageSize = bytes.readUInt16BE(16) === 1 ? 65536 : bytes.readUInt16BE(16);
  const found = { gap: 0, elsewhere: 0 };
  for (const form of [A, A_FORMATTED])
    for (let at = bytes.indexOf(form, 0, 'latin1'); at !== -1; at = bytes.indexOf(form, at + 1, 'latin1')) {
      const page = Math.floor(at / pageSize) * pageSize;
      const header = page === 0 ? 100 : page;
      const type = bytes[header] as number;
      const cells = bytes.readUInt16BE(header + 3);
      const content = page + (bytes.readUInt16BE(header + 5) || 65536);
      const pointersEnd = header + (type === 2 || type === 5 ? 12 : 8) + 2 * cells;
      const btree = [2, 5, 10, 13].includes(type);
      if (btree && at >= pointersEnd && at + form.length <= content) found.gap += 1;
      else found.elsewhere += 1;
    }
  return found;
}

/**
 * What `secure_delete` does not zero (docs/privacy.md §6): when SQLite rebalances a b-tree page (a
 * row that grows on update, e.g. an event marked done, no longer fits), it rebuilds the page with
 * its cells at the end and leaves the gap between the cell pointers and the cells as it was. A copy
 * of the person's CPF found there survives the rewrite of every row, the checkpoint and the
 * truncation (about one run in three here; seen: 1 copy in a leaf of `events`). The erasure's count
 * says so (it reads the bytes) and tells the operator to run it again with `--vacuum`, which clears
 * it (the last test). The log's file is therefore held to: no copy outside such gaps.
 */
function expectNoCopyOutsideGaps(path: string): void {
  expect({ path, ...copiesIn(path), gap: 0 }).toEqual({ path, gap: 0, elsewhere: 0 });
}

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** Waits until `check` holds (polling; `what` names it on a timeout). */
async function until(check: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Every event processed, every forward delivered, and each destination answered as many. */
async function settled(events: number): Promise<void> {
  await until(() => {
    const [e] = query<{ n: number; open: number }>(
      "SELECT count(*) AS n, count(*) FILTER (WHERE status NOT IN ('done', 'ignored')) AS open FROM events",
    );
    const forwards = query<{ destination: string; n: number; open: number }>(
      "SELECT destination, count(*) AS n, count(*) FILTER (WHERE status <> 'delivered') AS open FROM forward_deliveries GROUP BY destination",
    );
    return (
      e?.n === events &&
      e.open === 0 &&
      forwards.every(
        (f) =>
          f.open === 0 && destinations[f.destination as keyof typeof destinations].accepted().length >= f.n,
      )
    );
  }, `${events} events processed and every message delivered`);
}

/** Checkpoints the log's WAL with truncation from a connection of the test's, retried while `serve` holds it. */
async function truncateWal(): Promise<void> {
  const db = new Database(dbPath, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 2000');
    await until(() => {
      const [r] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number }[];
      return r?.busy === 0;
    }, 'wal_checkpoint(TRUNCATE) to complete');
  } finally {
    db.close();
  }
}

const hasA = (text: string) => text.includes(A) || text.includes(A_FORMATTED);
const noticesAt = (d: FakeDestination) => d.requests.filter((r) => bodyOf(r).type === 'subject.erased');

it('subject find, export and erase beside a live serve: 0 raw copies anywhere, B whole, destinations told', async () => {
  env = environment();
  const first = await serve(env);

  // 2. Both people's proposals through the whole life cycle; one registry result naming A.
  const originals = new Map<number, unknown[]>();
  let sent = 0;
  for (const [cpf, nus] of [
    [A, A_PROPOSALS],
    [B, B_PROPOSALS],
  ] as const)
    for (const nu of nus)
      for (const evento of LIFE_CYCLE) {
        const body = next(
          evento,
          nu,
          cpf,
          evento.startsWith('averbacao.') ? { requestId: requestIdOf(nu) } : {},
        );
        originals.set(nu, [...(originals.get(nu) ?? []), body]);
        expect((await post(first.url, body)).status).toBe(200);
        sent += 1;
        if (evento === 'averbacao.solicitada' && nu === A_REGISTERED) {
          // The registration is tracked once its request is processed; then the registry's answer.
          await until(
            () => query('SELECT 1 FROM averbacoes WHERE request_id = ?', requestIdOf(nu)).length === 1,
            'the averbação tracked',
          );
          const result = {
            requestId: requestIdOf(nu),
            status: 'completed',
            servidor: { cpf: A_FORMATTED, nome: 'Fulano' },
          };
          expect((await post(first.url, result, '/webhooks/registry')).status).toBe(200);
          sent += 1;
        }
      }
  await settled(sent);
  expect(
    query<{ nu_proposta: number; status: string }>('SELECT nu_proposta, status FROM proposals ORDER BY 1'),
  ).toEqual([...A_PROPOSALS, ...B_PROPOSALS].map((nu) => ({ nu_proposta: nu, status: 'paga' })));
  // `late` got B's data and none of A's; crm got A's CPF in full (full_cpf), dw masked.
  expect(destinations.late.requests.length).toBeGreaterThan(0);
  expect(new Set(destinations.late.requests.map((r) => bodyOf(r).data.nu_proposta as number))).toEqual(
    new Set(B_PROPOSALS),
  );
  expect(destinations.late.requests.some((r) => hasA(r.raw.toString('latin1')))).toBe(false);
  expect(destinations.crm.requests.some((r) => r.raw.includes(A))).toBe(true);
  expect(destinations.dw.requests.length).toBeGreaterThan(0);

  // 3. A backup while serve runs, before any `subject` command (the log has no subject key yet), and
  // one after `subject find` (it has one). A copy of each, taken with cp, that the receiver does not
  // know about: the restores of step 7.
  const backups = [join(tmp.dir, 'backups', 'before-key.db'), join(tmp.dir, 'backups', 'after-key.db')];
  pristine = {
    beforeKey: join(tmp.dir, 'outside', 'before-key.db'),
    afterKey: join(tmp.dir, 'outside', 'after-key.db'),
  };
  const backup = async (i: 0 | 1) => {
    const r = await runCliAsync(['backup', backups[i] as string], env);
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    copyFileSync(backups[i] as string, i === 0 ? pristine.beforeKey : pristine.afterKey);
  };
  await backup(0);
  const findBefore = await runCliAsync(['subject', 'find', A, '--json'], env);
  expect({ status: findBefore.status, stderr: findBefore.stderr }).toEqual({ status: 0, stderr: '' });
  expect(hasA(findBefore.stdout)).toBe(false);
  await backup(1);
  const exportFile = join(tmp.dir, 'outside', 'person.json');
  const exported = await runCliAsync(['subject', 'export', A, '--out', exportFile], env);
  expect({ status: exported.status, stderr: exported.stderr }).toEqual({ status: 0, stderr: '' });
  expect(statSync(exportFile).mode & 0o777).toBe(0o600);
  const statement = JSON.parse(readFileSync(exportFile, 'utf8'));
  expect(statement).toMatchObject({ format: 'consig-receiver/subject-export@1', subject: { cpf: A } });
  const [logPlace] = statement.places;
  // Every event whose body names A (either form), by the test's own LIKE scan, and no other.
  const namingA = eventsNaming([A, A_FORMATTED]);
  expect(namingA).toHaveLength(A_PROPOSALS.length * LIFE_CYCLE.length + 1);
  expect(logPlace.events.map((e: { id: number }) => e.id).sort((x: number, y: number) => x - y)).toEqual(
    namingA,
  );
  expect(logPlace.proposals.map((p: { nu_proposta: number }) => p.nu_proposta).sort()).toEqual(A_PROPOSALS);
  // find counts what export lists (taken in between, with nothing arriving meanwhile).
  const found = JSON.parse(findBefore.stdout).log;
  expect(found).toMatchObject({
    proposals: A_PROPOSALS.length,
    proposals_with_personal_data: A_PROPOSALS.length,
    events: namingA.length,
    events_with_body: namingA.length,
    averbacoes: logPlace.averbacoes.length,
    messages: logPlace.messages.length,
    recipients: ['destination:crm', 'destination:dw'],
    erasures: [],
    notices: [],
  });
  expect(found.raw_copies).toBeGreaterThan(0);
  expect(logPlace.averbacoes.map((a: { request_id: string }) => a.request_id).sort()).toEqual(
    A_PROPOSALS.map(requestIdOf),
  );
  // The export is the operator's to hand over and delete (docs/privacy.md §1); it leaves the machine.
  rmSync(exportFile);
  const bBefore = logicalCount([B]);
  expect(bBefore).toBeGreaterThan(0);

  // 4. The erasure, while serve keeps receiving a trickle of B's new proposals.
  const erasing = runCliAsync(['subject', 'erase', A, '--reason', 'test', '--yes', '--json'], env, 120_000);
  let erased = false;
  void erasing.then(() => (erased = true));
  const trickle: number[] = [];
  for (let nu = 200100; !erased; nu += 1) {
    trickle.push((await post(first.url, next('proposta.criada', nu, B))).status);
    await new Promise((r) => setTimeout(r, 20));
  }
  const erasure = await erasing;
  expect({ status: erasure.status, stderr: erasure.stderr }).toEqual({ status: 0, stderr: '' });
  expect(hasA(erasure.stdout)).toBe(false);
  expect(trickle.length).toBeGreaterThan(0);
  expect(trickle.filter((s) => s !== 200)).toEqual([]);
  const report = JSON.parse(erasure.stdout);
  expect(report.log.erasure.notified).toEqual(['crm', 'dw']);
  expect(report.log.scrub.walTruncated).toBe(true);
  // report.log.raw_copies is 0 but for the gaps of expectNoCopyOutsideGaps: the file is checked below.
  expect(report.backups.map((b: { place: string; raw_copies: number }) => [b.place, b.raw_copies])).toEqual(
    [...backups].sort().map((b) => [b, 0]),
  );
  erasureId = report.log.erasure.erasure_id;
  expect(erasureId).toMatch(/^era_/);
  sent += trickle.length;
  await settled(sent);

  // 5. Not one raw copy of A's CPF: the log and its WAL, both backups, the erasure journal, every
  // other file in the data directory, and what serve has logged so far.
  const rawCopies = () =>
    Object.fromEntries(
      [...filesUnder(dataDir), ...backups].map((f) => [f.slice(tmp.dir.length + 1), rawCount(f)]),
    );
  const { 'data/consig.db': _log, ...files } = rawCopies();
  expect(Object.keys(files)).toEqual(
    expect.arrayContaining(['data/consig.db-wal', 'data/consig.db.erasures']),
  );
  expect(Object.values(files).every((n) => n === 0) ? {} : files).toEqual({});
  expectNoCopyOutsideGaps(dbPath);
  expect(hasA(first.output())).toBe(false);
  expect(readFileSync(`${dbPath}.erasures`, 'utf8')).toContain(erasureId);
  // Nothing of A by SQL either; B untouched: before, plus each trickle proposal's CPF in its event's
  // body, its proposal, and its two messages (event.received carries the payload, proposal.changed
  // the proposal).
  expect(logicalCount([A, A_FORMATTED])).toBe(0);
  expect(logicalCount([B])).toBe(bBefore + 4 * trickle.length);
  // B's bytes are all there (every logical copy is in the file's bytes, after a checkpoint).
  await truncateWal();
  expect(rawCount(dbPath, [B])).toBeGreaterThanOrEqual(logicalCount([B]));
  // The legal-hold set: A's proposals keep their number, status and amount, without the CPF.
  expect(
    query(
      `SELECT nu_proposta, status, vl_emprestimo, nu_cpf, no_conveniada, erasure_id FROM proposals
       WHERE nu_proposta IN (${A_PROPOSALS.join(', ')}) ORDER BY 1`,
    ),
  ).toEqual(
    A_PROPOSALS.map((nu) => ({
      nu_proposta: nu,
      status: 'paga',
      vl_emprestimo: 15000.5,
      nu_cpf: null,
      no_conveniada: null,
      erasure_id: erasureId,
    })),
  );
  // One `subject.erased` to crm and to dw, signed with each one's secret, naming A's proposals and
  // registration, no CPF; none to late, which never had A's data.
  await until(
    () => noticesAt(destinations.crm).length >= 1 && noticesAt(destinations.dw).length >= 1,
    'the notices delivered',
  );
  for (const name of ['crm', 'dw'] as const) {
    const notices = noticesAt(destinations[name]);
    expect(notices).toHaveLength(1);
    const notice = notices[0] as Received;
    expect(FakeDestination.verifies(notice, SECRETS[name])).toBe(true);
    expect(hasA(notice.raw.toString('latin1'))).toBe(false);
    expect(bodyOf(notice)).toEqual({
      id: notice.webhookId,
      type: 'subject.erased',
      created_at: expect.any(String),
      data: {
        erasure_id: erasureId,
        nu_propostas: A_PROPOSALS,
        request_ids: A_PROPOSALS.map(requestIdOf),
      },
    });
  }
  expect(noticesAt(destinations.late)).toEqual([]);
  const findAfter = await runCliAsync(['subject', 'find', A, '--json'], env);
  expect(JSON.parse(findAfter.stdout).log).toMatchObject({
    proposals: A_PROPOSALS.length,
    proposals_with_personal_data: 0,
    erasures: [erasureId],
    notices: [
      { erasure_id: erasureId, destination: 'crm', status: 'delivered' },
      { erasure_id: erasureId, destination: 'dw', status: 'delivered' },
    ],
    // 0 but for the gaps of expectNoCopyOutsideGaps (TODO there), which find counts as they are.
    raw_copies: copiesIn(dbPath).gap + rawCount(`${dbPath}-wal`),
  });

  // 6. A redelivery of one of A's original deliveries, same bytes and signature: a duplicate,
  // stored nowhere.
  const original = (originals.get(A_REGISTERED) as unknown[])[0];
  const again = await post(first.url, original);
  expect({ status: again.status, outcome: again.body.status }).toEqual({ status: 200, outcome: 'duplicate' });
  expect(rawCount(`${dbPath}-wal`)).toBe(0);
  expectNoCopyOutsideGaps(dbPath);
  // A new (late) event of A's erased proposal, naming A: answered 200 and stored as it came (its clear
  // bytes go into the WAL with the insert), then erased by processing before anything else reads it
  // (core/event-step.ts). Physically, the clear copy stays in the WAL's frames until a checkpoint
  // copies the page's last version (erased, the old cell zeroed by secure_delete) into the file and
  // truncation drops the frames; nothing checkpoints with truncation on its own, so it is the test's
  // checkpoint below that clears it.
  const late = next('pagamento.realizado', A_REGISTERED, A);
  const lateAnswer = await post(first.url, late);
  expect(lateAnswer.status).toBe(200);
  sent += 1;
  await settled(sent);
  expect(logicalCount([A, A_FORMATTED])).toBe(0);
  expect(eventsNaming([A, A_FORMATTED])).toEqual([]);
  expect(query('SELECT nu_cpf FROM proposals WHERE nu_proposta = ?', A_REGISTERED)).toEqual([
    { nu_cpf: null },
  ]);
  await truncateWal();
  expect(rawCount(`${dbPath}-wal`)).toBe(0);
  expectNoCopyOutsideGaps(dbPath);
  // Nothing any destination received since the erasure names A (the late event's messages included).
  const sinceErasure = Object.values(destinations).flatMap((d) =>
    d.requests.filter((r) => bodyOf(r).data?.event_id === lateAnswer.body.event_id),
  );
  expect(sinceErasure.length).toBeGreaterThan(0);
  expect(sinceErasure.filter((r) => hasA(r.raw.toString('latin1')))).toEqual([]);
  expect(await stop(first, 'serve-1')).toBe(0);
  expect(hasA(first.output())).toBe(false);
});

/** Step 7: stops nothing; puts `from` in place of the log (no -wal, -shm) and starts serve on it. */
async function restore(from: string): Promise<ServerProcess> {
  copyFileSync(from, dbPath);
  rmSync(`${dbPath}-wal`, { force: true });
  rmSync(`${dbPath}-shm`, { force: true });
  return serve(env);
}

/** serve's verdict on the erasure journal beside a restored copy: one of its two log lines. */
const JOURNAL_LINE = /privacy: (re-applied an erasure|an erasure of the journal cannot be re-applied)/;

it('7. a restored copy made after the log had its subject key: serve erases A again from the journal', async () => {
  expect(rawCount(pristine.afterKey)).toBeGreaterThan(0);
  const second = await restore(pristine.afterKey);
  await until(() => /privacy: re-applied an erasure/.test(second.output()), 'serve to re-apply the erasure');
  expect(query('SELECT erasure_id FROM erasures')).toEqual([{ erasure_id: erasureId }]);
  expect(logicalCount([A, A_FORMATTED])).toBe(0);
  // The restored copy's ledger says crm and dw had A's data: the notice goes again, under the same
  // webhook-id (the destination deduplicates on it), and late is still not told.
  await until(
    () => noticesAt(destinations.crm).length >= 2 && noticesAt(destinations.dw).length >= 2,
    'the notices sent again',
  );
  for (const name of ['crm', 'dw'] as const) {
    const [firstNotice, resent] = noticesAt(destinations[name]) as [Received, Received];
    expect(resent.webhookId).toBe(firstNotice.webhookId);
    expect(bodyOf(resent).data).toEqual(bodyOf(firstNotice).data);
  }
  expect(noticesAt(destinations.late)).toEqual([]);
  expect(await stop(second, 'serve-2')).toBe(0);
  expect(rawCount(`${dbPath}-wal`)).toBe(0);
  expectNoCopyOutsideGaps(dbPath);
  expect(hasA(second.output())).toBe(false);
});

// Found by this file's first version: the log had no subject key until a `subject` command made
// one, so a backup taken before that came back unerasable by the journal. serve now makes the key
// when it starts processing (subject-places.ts reapplyJournal), and every backup carries it.
it('7. a restored copy of the backup taken before any subject command: serve erases A again from the journal', async () => {
  const third = await restore(pristine.beforeKey);
  try {
    await until(() => JOURNAL_LINE.test(third.output()), "serve's verdict on the erasure journal");
    expect(third.output()).toMatch(/privacy: re-applied an erasure/);
  } finally {
    expect(await stop(third, 'serve-3')).toBe(0);
  }
  expect(rawCount(`${dbPath}-wal`)).toBe(0);
  expectNoCopyOutsideGaps(dbPath);
});

it('7. whatever the journal could do, `subject erase` by CPF on the restored copy leaves no raw copy', async () => {
  const fourth = await restore(pristine.beforeKey);
  await until(() => JOURNAL_LINE.test(fourth.output()), "serve's verdict on the erasure journal");
  // Either line names the erasure (the operator's cue to erase the person again by CPF).
  expect(fourth.output()).toContain(erasureId);
  expect(await stop(fourth, 'serve-4')).toBe(0);
  const byCpf = await runCliAsync(
    ['subject', 'erase', A, '--reason', 'restored copy', '--yes', '--json'],
    env,
  );
  expect({ status: byCpf.status, stderr: byCpf.stderr }).toEqual({ status: 0, stderr: '' });
  expect(rawCount(`${dbPath}-wal`)).toBe(0);
  expectNoCopyOutsideGaps(dbPath);
  expect(JSON.parse(byCpf.stdout).log.raw_copies).toBe(copiesIn(dbPath).gap);
  // --vacuum rewrites the file (serve is stopped: nothing waits on it): not one copy left.
  const vacuumed = await runCliAsync(
    ['subject', 'erase', A, '--reason', 'restored copy', '--yes', '--vacuum', '--json'],
    env,
  );
  expect({ status: vacuumed.status, stderr: vacuumed.stderr }).toEqual({ status: 0, stderr: '' });
  expect(JSON.parse(vacuumed.stdout).log.raw_copies).toBe(0);
  expect(rawCount(dbPath) + rawCount(`${dbPath}-wal`)).toBe(0);
  // Nothing serve logged in any of its lives names A.
  for (const log of filesUnder(join(tmp.dir, 'logs')))
    expect({ log, a: rawCount(log) }).toEqual({ log, a: 0 });
});
