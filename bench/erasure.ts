import { spawn, spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import Database from '../src/sqlite/sqlite-driver';
import { countInFile } from '../src/sqlite/scrub';
import { cpfForms } from '../src/domain/subject';
import { fixed, percentile } from '../rigs/harness';
import { prefillDatabase, SUBJECT_NU } from './prefill';
import type { ClusterHarness, LoadResult } from './protocol';
import { RECEIVER_BIN } from './run-options';

/**
 * The erasure figures (issue 45), run by run.ts:
 *
 * 1. Erasure under load (item 8: "never costs the 200"): `serve` (SQLite mode, FULL) on a log of
 *    one person's 10 000 events over 100 proposals among other people's, under the ingest rows'
 *    load (c=50): the answers' p50/p99 over a window without an erasure, then over a window with
 *    `subject erase` running as a process of its own on the same file, started as the window
 *    starts, then a window after it. The receiver and the load share core 0, the erase has core 1
 *    (cluster row 1's layout): what the erase costs the answers is its locks, not its CPU. After
 *    the erase the file's raw bytes must hold no copy of the CPF (sqlite/scrub.ts `countInFile`).
 * 2. Find on a large log: `subject find` as a process on a log of `findEvents` events (the person
 *    ~100 of them over 4 proposals), twice: the first run hashes the whole log (the subject index
 *    pass), the second finds the index built. Beside it, in this process, what the lookup is made
 *    of: the raw scan of the file, and the events query by subject hash.
 */

export interface ErasureSpec {
  concurrency: number;
  warmupMs: number;
  windowMs: number;
  /** Row 1: the log's events (the subject's among them), the subject's events and proposals. */
  events: number;
  subjectEvents: number;
  subjectProposals: number;
  /** Row 2: the large log's events, 0 skips the row. */
  findEvents: number;
}

/** The person erased (a valid CPF; the load's deliveries are 123.456.789-09's, the others' prefill.ts cpfOf). */
const CPF = '52998224725';

export interface ErasureUnderLoad {
  events: number;
  subjectEvents: number;
  /** `subject find` before the receiver starts: the index of the prefilled log built. */
  indexSeconds: number;
  without: LoadResult;
  with: LoadResult;
  after: LoadResult;
  /** The answers of the window `with` that overlapped the erase (it started with the window). */
  during: Answers;
  steps: EraseSteps | null;
  /** Events the erase's own index pass had to hash first (ingested since the first find). */
  unindexedAtErase: number;
  erase: { seconds: number; endedInWindow: boolean; summary: Record<string, unknown>; walTruncated: boolean };
  /** Copies of the CPF in the file and its WAL after the erase (countInFile). */
  rawCopies: number;
  pinned: boolean;
}

export interface FindOnLargeLog {
  events: number;
  fileMb: number;
  first: CliRun;
  second: CliRun;
  /** Events hashed by the first run's index pass per second (its time: first − second). */
  indexRate: number;
  found: { proposals: number; events: number };
  /** In this process: countInFile over the file and its WAL, as find's raw count does. */
  rawScanSeconds: number;
  /** `SELECT … FROM events WHERE subject_hash = ?` as core/subject-find.ts writes it, and with `AND subject_hash <> ''`. */
  hashQueryMs: { asWritten: number; plan: string; withNonEmpty: number; planNonEmpty: string };
}

export interface Answers {
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** The 5 slowest 200s: [ms from the erase's start to the answer, latency ms]. */
  slowest: [number, number][];
  /** Answers other than 200: [ms from the erase's start to the answer, latency ms, status]. */
  failed: [number, number, number][];
}

/** The answers of `r` (kept by the load generator) that were in flight at some moment of [0, toMs]. */
function answersUpTo(r: LoadResult, toMs: number): Answers {
  const all = (r.answers ?? []).filter(([at, ms]) => at - ms <= toMs);
  const hit = all.filter(([, , status]) => status === 200).map(([at, ms]): [number, number] => [at, ms]);
  const sorted = Float64Array.from(hit.map(([, ms]) => ms)).sort();
  return {
    count: hit.length,
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted.length > 0 ? (sorted[sorted.length - 1] as number) : Number.NaN,
    slowest: stalls(hit),
    failed: all.filter(([, , status]) => status !== 200),
  };
}

/** The 5 slowest answers, one per stall (answers within 100 ms of a slower one's are the same stall). */
function stalls(answers: [number, number][]): [number, number][] {
  const picked: [number, number][] = [];
  for (const a of [...answers].sort((x, y) => y[1] - x[1])) {
    if (picked.length === 5) break;
    if (picked.every(([at]) => Math.abs(at - a[0]) > 100)) picked.push(a);
  }
  return picked;
}

/** When the erase reached each step, seen from outside every 100 ms (ms from its start). */
export interface EraseSteps {
  /** Its index pass done: fewer than one batch of events left without a hash. */
  indexed: number | null;
  /** Its first transaction committed: the erasure recorded. */
  recorded: number | null;
  /** Its last: the erasure completed (then the scrub: WAL truncation, raw scan, find again). */
  completed: number | null;
}

function watchSteps(db: string): { stop(): EraseSteps } {
  const conn = new Database(db, { readonly: true, fileMustExist: true });
  const steps: EraseSteps = { indexed: null, recorded: null, completed: null };
  const unindexed = conn.prepare('SELECT count(*) AS n FROM events WHERE subject_hash IS NULL');
  const erasure = conn.prepare('SELECT completed_at FROM erasures ORDER BY id DESC LIMIT 1');
  const started = performance.now();
  const timer = setInterval(() => {
    const at = performance.now() - started;
    try {
      if (steps.indexed === null && (unindexed.get() as { n: number }).n < 500) steps.indexed = at;
      const row = erasure.get() as { completed_at: string | null } | undefined;
      if (row !== undefined) steps.recorded ??= at;
      if (row?.completed_at != null) steps.completed ??= at;
    } catch {
      // busy: the next tick
    }
  }, 100);
  return {
    stop: () => {
      clearInterval(timer);
      conn.close();
      return steps;
    },
  };
}

interface CliRun {
  seconds: number;
  code: number | null;
  stdout: string;
  stderr: string;
}

const canPin = (): boolean =>
  availableParallelism() >= 2 && spawnSync('taskset', ['-c', '0', 'true']).status === 0;

/** The receiver's CLI as a process (on `cpus` when given), timed from spawn to exit. */
function cli(h: ClusterHarness, args: string[], cpus: string | null): Promise<CliRun> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if (!/^(DATABASE_|CLUSTER_|REPLICA_ID|LOG_LEVEL)/.test(k)) env[k] = v;
  const argv = [...(cpus === null ? [] : ['taskset', '-c', cpus]), process.execPath, RECEIVER_BIN, ...args];
  const started = performance.now();
  const child = h.track(spawn(argv[0] as string, argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] }));
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  return new Promise((resolve) =>
    child.once('close', (code) =>
      resolve({ seconds: (performance.now() - started) / 1000, code, stdout, stderr }),
    ),
  );
}

/** The `log` place of a `subject … --json` run, or null (the run's error pushed). */
function logPlace(run: CliRun, what: string, errors: string[]): Record<string, unknown> | null {
  try {
    if (run.code !== 0) throw new Error(`exit ${run.code}`);
    return (JSON.parse(run.stdout) as { log: Record<string, unknown> }).log;
  } catch (err) {
    errors.push(`${what}: ${(err as Error).message}; ${(run.stdout + run.stderr).slice(-500)}`);
    return null;
  }
}

function rawCopies(db: string): number {
  return countInFile(db, cpfForms(CPF)) + countInFile(`${db}-wal`, cpfForms(CPF));
}

function unindexed(db: string): number {
  const conn = new Database(db, { readonly: true, fileMustExist: true });
  try {
    conn.pragma('busy_timeout = 5000');
    return (
      conn.prepare('SELECT count(*) AS n FROM events WHERE subject_hash IS NULL').get() as { n: number }
    ).n;
  } finally {
    conn.close();
  }
}

/** Row 1: see the module's comment. */
export async function runErasureUnderLoad(
  h: ClusterHarness,
  spec: ErasureSpec,
  errors: string[],
): Promise<ErasureUnderLoad> {
  const db = join(h.dir, 'erasure.db');
  const subject = { cpf: CPF, events: spec.subjectEvents, proposals: spec.subjectProposals };
  prefillDatabase(db, spec.events, { many: true, subject });
  const pin = canPin();
  const index = await cli(h, ['--database', db, 'subject', 'find', CPF, '--json'], pin ? '1' : null);
  const before = logPlace(index, 'erasure: the first subject find', errors);
  if (before !== null && (before.proposals !== subject.proposals || before.events !== subject.events))
    errors.push(`erasure: find saw ${before.proposals} proposals, ${before.events} events of the subject`);
  const receiver = await h.startReceiver('erasure', {}, db);
  try {
    const cpus = pin ? '0' : undefined;
    if (pin) spawnSync('taskset', ['-a', '-p', '-c', '0', String(receiver.pid)], { stdio: 'ignore' });
    // Each window a load process of its own without a warm-up in it (the warm-up is a run before
    // them): its sockets open as its window starts. A warm-up then a long window would leave the
    // sockets idle while the window's bodies are signed, past the server's keep-alive timeout (5 s).
    const load = (name: string, durationMs: number, onWindow?: () => void) =>
      h.runLoad({
        keepAnswers: onWindow !== undefined,
        port: receiver.port,
        concurrency: spec.concurrency,
        warmupMs: 0,
        durationMs,
        idPrefix: `erasure_${name}`,
        ...(cpus === undefined ? {} : { cpus }),
        ...(onWindow === undefined ? {} : { onWindow }),
      });
    if (spec.warmupMs > 0) await load('warmup', spec.warmupMs);
    const without = await load('without', spec.windowMs);
    const unindexedAtErase = unindexed(db);
    let erase: Promise<CliRun> | null = null;
    let watch: ReturnType<typeof watchSteps> | null = null;
    const args = ['--database', db, 'subject', 'erase', CPF, '--reason', 'bench', '--yes', '--json'];
    const withErase = await load('with', spec.windowMs, () => {
      erase = cli(h, args, pin ? '1' : null);
      watch = watchSteps(db);
    });
    if (erase === null) throw new Error('erasure: the load generator never started its window');
    const ran: CliRun = await erase;
    const steps = (watch as ReturnType<typeof watchSteps> | null)?.stop() ?? null;
    const during = answersUpTo(withErase, ran.seconds * 1000);
    delete withErase.answers;
    const after = await load('after', spec.windowMs);
    if (!receiver.alive()) throw new Error('erasure: the receiver died during the row');
    const place = logPlace(ran, 'erasure: subject erase', errors);
    const copies = rawCopies(db);
    if (copies !== 0)
      errors.push(`erasure: ${copies} raw copies of the CPF left in the file after the erase`);
    for (const [name, r] of [
      ['without', without],
      ['with', withErase],
      ['after', after],
    ] as const) {
      const bad = Object.values(r.non200).reduce((a, b) => a + b, 0) + r.socketErrors;
      if (bad > 0)
        errors.push(
          `erasure: ${bad} answers other than 200 in the window ${name}: ${r.errorSamples.join(' | ')}`,
        );
    }
    const scrub = place?.scrub as { walTruncated?: boolean } | undefined;
    return {
      events: spec.events,
      subjectEvents: spec.subjectEvents,
      indexSeconds: index.seconds,
      without,
      with: withErase,
      after,
      during,
      steps,
      unindexedAtErase,
      erase: {
        seconds: ran.seconds,
        // The erase started with the window (its signing done): it ended inside it when it took less.
        endedInWindow: ran.seconds * 1000 <= spec.windowMs,
        summary: (place?.erasure as Record<string, unknown> | undefined) ?? {},
        walTruncated: scrub?.walTruncated === true,
      },
      rawCopies: copies,
      pinned: pin,
    };
  } finally {
    await receiver.stop();
  }
}

/** Row 2: see the module's comment. */
export async function runFindOnLargeLog(
  h: ClusterHarness,
  spec: ErasureSpec,
  errors: string[],
): Promise<FindOnLargeLog> {
  const db = join(h.dir, 'find.db');
  const subject = { cpf: CPF, events: 100, proposals: 4 };
  prefillDatabase(db, spec.findEvents, { many: true, subject });
  const cpus = canPin() ? '0' : null;
  const args = ['--database', db, 'subject', 'find', CPF, '--json'];
  const first = await cli(h, args, cpus);
  const second = await cli(h, args, cpus);
  const found = { proposals: -1, events: -1 };
  for (const [run, what] of [
    [first, 'first'],
    [second, 'second'],
  ] as const) {
    const place = logPlace(run, `find: the ${what} subject find`, errors);
    if (place === null) continue;
    Object.assign(found, { proposals: place.proposals, events: place.events });
    if (place.proposals !== subject.proposals || place.events !== subject.events)
      errors.push(
        `find: the ${what} run saw ${place.proposals} proposals, ${place.events} events of the subject`,
      );
  }
  const started = performance.now();
  rawCopies(db);
  const rawScanSeconds = (performance.now() - started) / 1000;
  return {
    events: spec.findEvents,
    fileMb: statSync(db).size / 1e6,
    first,
    second,
    indexRate: spec.findEvents / Math.max(first.seconds - second.seconds, 1e-3),
    found,
    rawScanSeconds,
    hashQueryMs: hashQuery(db),
  };
}

/** The events query by subject hash, as written and with the partial index's condition spelled out. */
function hashQuery(db: string): FindOnLargeLog['hashQueryMs'] {
  const conn = new Database(db, { readonly: true, fileMustExist: true });
  try {
    const { hash } = conn
      .prepare('SELECT subject_hash AS hash FROM proposals WHERE nu_proposta = ?')
      .get(SUBJECT_NU) as { hash: string };
    const time = (sql: string) => {
      const plan = conn
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all(hash)
        .map((r) => (r as { detail: string }).detail)
        .join('; ');
      const statement = conn.prepare(sql);
      // The best of 3: the first read may find the file's pages out of the OS cache.
      let ms = Infinity;
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        statement.all(hash);
        ms = Math.min(ms, performance.now() - started);
      }
      return { ms, plan };
    };
    const select = 'SELECT id, kind, evento, nu_proposta, request_id, status, received_at, body FROM events';
    const asWritten = time(`${select} WHERE subject_hash = ?`);
    const nonEmpty = time(`${select} WHERE subject_hash = ? AND subject_hash <> ''`);
    return {
      asWritten: asWritten.ms,
      plan: asWritten.plan,
      withNonEmpty: nonEmpty.ms,
      planNonEmpty: nonEmpty.plan,
    };
  } finally {
    conn.close();
  }
}

export interface ErasureFigures {
  underLoad: ErasureUnderLoad;
  find: FindOnLargeLog | null;
  /** Each row's wall time, s. */
  seconds: { underLoad: number; find: number };
}

export async function runErasureFigures(
  h: ClusterHarness,
  spec: ErasureSpec,
  errors: string[],
): Promise<ErasureFigures> {
  const log = (text: string) => process.stderr.write(text);
  log(`bench: erasure under load, ${spec.subjectEvents} of ${spec.events} events the subject's ...`);
  let started = performance.now();
  const underLoad = await runErasureUnderLoad(h, spec, errors);
  const seconds = { underLoad: (performance.now() - started) / 1000, find: 0 };
  log(` p99 ${fixed(underLoad.without.p99Ms, 1)} → ${fixed(underLoad.with.p99Ms, 1)} ms\n`);
  if (spec.findEvents === 0) return { underLoad, find: null, seconds };
  log(`bench: subject find on a log of ${spec.findEvents} events ...`);
  started = performance.now();
  const find = await runFindOnLargeLog(h, spec, errors);
  seconds.find = (performance.now() - started) / 1000;
  log(` ${fixed(find.first.seconds, 1)} s, then ${fixed(find.second.seconds, 2)} s\n`);
  return { underLoad, find, seconds };
}

const sec = (ms: number | null | undefined) => (ms == null ? '?' : `${fixed(ms / 1000, 2)} s`);

export function erasureReport({ underLoad: u, find: f, seconds }: ErasureFigures, spec: ErasureSpec): string {
  const bad = (r: LoadResult) => Object.values(r.non200).reduce((a, b) => a + b, 0) + r.socketErrors;
  const window = (name: string, r: LoadResult) =>
    `  ${name.padEnd(8)} ${Math.round(r.rps)} req/s, p50 ${fixed(r.p50Ms, 2)} ms, p99 ${fixed(r.p99Ms, 2)} ms, ` +
    `max ${fixed(r.maxMs, 1)} ms, non-200 ${bad(r)}`;
  const s = u.erase.summary;
  const lines = [
    `erasure under load (issue 45 item 8): serve (FULL) on ${u.events} events, ${u.subjectEvents} of them one person's ` +
      `over ${spec.subjectProposals} proposals; c=${spec.concurrency}, ${spec.windowMs / 1000} s windows` +
      (u.pinned ? '; receiver and load on core 0, the erase on core 1' : ' (unpinned)') +
      `; row ${fixed(seconds.underLoad, 0)} s`,
    window('without', u.without),
    window('with', u.with),
    window('after', u.after),
    `  during the erase (${u.during.count} answers in flight while it ran): p50 ${fixed(u.during.p50Ms, 2)} ms, ` +
      `p99 ${fixed(u.during.p99Ms, 2)} ms, max ${fixed(u.during.maxMs, 1)} ms; slowest ` +
      u.during.slowest.map(([at, ms]) => `${fixed(ms, 0)} ms at +${fixed(at / 1000, 2)} s`).join(', ') +
      (u.during.failed.length === 0
        ? ''
        : `; answers other than 200: ${u.during.failed.length}, from +${fixed((u.during.failed[0]?.[0] ?? 0) / 1000, 2)} s ` +
          `to +${fixed((u.during.failed.at(-1)?.[0] ?? 0) / 1000, 2)} s, status ${[...new Set(u.during.failed.map((f) => f[2]))].join('/')}, ` +
          `after ${fixed(Math.min(...u.during.failed.map((f) => f[1])), 0)}–${fixed(Math.max(...u.during.failed.map((f) => f[1])), 0)} ms`),
    `  p99 with / without ${fixed(u.with.p99Ms / u.without.p99Ms, 2)}× (during the erase / without ` +
      `${fixed(u.during.p99Ms / u.without.p99Ms, 2)}×), p50 ${fixed(u.with.p50Ms / u.without.p50Ms, 2)}×; ` +
      `req/s ${fixed(u.with.rps / u.without.rps, 2)}×`,
    `  the erase's steps, seen every 100 ms: index pass done +${sec(u.steps?.indexed)}, erasure recorded ` +
      `+${sec(u.steps?.recorded)}, completed +${sec(u.steps?.completed)} (then the WAL truncated, the file scanned), exit +${fixed(u.erase.seconds, 2)} s`,
    `  subject erase: ${fixed(u.erase.seconds, 2)} s (${u.erase.endedInWindow ? 'inside the window' : 'LONGER than the window: --erasure-window'}), ` +
      `${s.events ?? '?'} events, ${s.proposals ?? '?'} proposals, ${s.messages ?? '?'} messages erased; ` +
      `its index pass first hashed ${u.unindexedAtErase} events ingested since; WAL truncated: ${u.erase.walTruncated}`,
    `  raw copies of the CPF in the file and its WAL after the erase: ${u.rawCopies} (must be 0); ` +
      `the first find (index of the prefilled log) ${fixed(u.indexSeconds, 2)} s`,
  ];
  if (f !== null)
    lines.push(
      '',
      `subject find on a log of ${f.events} events (${fixed(f.fileMb, 0)} MB; the person ${f.found.events} events over ` +
        `${f.found.proposals} proposals), as a process${canPin() ? ' on core 0' : ''}; row ${fixed(seconds.find, 0)} s`,
      `  first run (the index pass hashes the whole log) ${fixed(f.first.seconds, 2)} s; second run (index built) ` +
        `${fixed(f.second.seconds, 2)} s; index pass ≈ first − second = ${Math.round(f.indexRate)} events/s`,
      `  in the lookup: the raw scan of the file ${fixed(f.rawScanSeconds, 2)} s; events by subject hash as written ` +
        `${fixed(f.hashQueryMs.asWritten, 1)} ms (${f.hashQueryMs.plan}), with AND subject_hash <> '' ` +
        `${fixed(f.hashQueryMs.withNonEmpty, 1)} ms (${f.hashQueryMs.planNonEmpty})`,
    );
  return lines.join('\n');
}
