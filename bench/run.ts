import { type DrainResult, runPipelineDrain } from './pipeline-drain';
import { prefillDatabase } from './prefill';
import { type PollerIdleResult, runPollerIdle } from './poller-idle';
import { type ChildProcess, execFileSync, fork, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { get } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import Database from '../src/store/sqlite-driver';
import type { LoadMessage, LoadResult, LoadSpec } from './protocol';

/**
 * `npm run bench`: the same signed load against a bare node:http server, a verify-only Express 5
 * route and the real receiver (and two informative variants of it), at each concurrency. Every
 * server and the load generator run in child processes of their own; this process only directs
 * them, checks the receiver's database against its 200s, and prints the table.
 */

const HOST = '127.0.0.1';
const PATH = '/webhooks';
const DIST = resolve(__dirname, '..');
const RECEIVER_BIN = join(DIST, 'src', 'cli', 'bin.js');
const ROOT = resolve(DIST, '..');

/** `abc1234` or `abc1234+dirty` (uncommitted changes under src/ or migrations/): what was measured. */
function sourceVersion(): string {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = git('status', '--porcelain', '--', 'src', 'migrations') !== '';
    return `${git('rev-parse', '--short', 'HEAD')}${dirty ? '+dirty' : ''}`;
  } catch {
    return 'unknown';
  }
}

type Kind = 'bare' | 'express' | 'receiver';

interface Target {
  name: string;
  kind: Kind;
  description: string;
  env?: Record<string, string>;
  /** Runs only when named in --only. */
  optional?: boolean;
  /** The database starts with this many events already stored (the growth figure). */
  prefill?: 'growth';
  /** Only at these concurrencies (default: all of --concurrency). */
  concurrencies?: readonly number[];
  /** The receiver's CLI to run (default: this build's). */
  bin?: string;
}

const TARGETS: readonly Target[] = [
  { name: 'bare', kind: 'bare', description: 'node:http, reads the body, 200' },
  { name: 'express-verify', kind: 'express', description: 'Express 5 + raw-body + verifySignature, 200' },
  {
    name: 'receiver',
    kind: 'receiver',
    description: 'consig-receiver, SQLITE_SYNCHRONOUS=FULL, group commit (defaults)',
    env: { SQLITE_SYNCHRONOUS: 'FULL' },
  },
  {
    name: 'receiver-normal',
    kind: 'receiver',
    description: 'consig-receiver, SQLITE_SYNCHRONOUS=NORMAL',
    env: { SQLITE_SYNCHRONOUS: 'NORMAL' },
  },
  {
    name: 'receiver-batch1',
    kind: 'receiver',
    description: 'consig-receiver, FULL, GROUP_COMMIT_MAX_BATCH=1 (group commit off)',
    env: { SQLITE_SYNCHRONOUS: 'FULL', GROUP_COMMIT_MAX_BATCH: '1' },
  },
  {
    name: 'receiver-1m',
    kind: 'receiver',
    description: 'consig-receiver, FULL, database pre-filled with --growth events (default 1 000 000)',
    env: { SQLITE_SYNCHRONOUS: 'FULL' },
    prefill: 'growth',
    concurrencies: [50],
  },
  {
    name: 'receiver-warnlog',
    kind: 'receiver',
    description: 'consig-receiver, FULL, LOG_LEVEL=warn (no per-delivery log line; --only)',
    env: { SQLITE_SYNCHRONOUS: 'FULL', LOG_LEVEL: 'warn' },
    optional: true,
  },
];

interface Options {
  durationMs: number;
  warmupMs: number;
  concurrencies: number[];
  rounds: number;
  targets: Target[];
  json: boolean;
  pipelineEvents: number;
  pollerTracked: number;
  quick: boolean;
  growthEvents: number;
  cpuProfDir: string | null;
  /** The commit measured (see sourceVersion). */
  source: string;
  /** --baseline: a git revision built and measured beside this build, for the before/after ratio. */
  baseline: string | null;
}

interface RunResult extends LoadResult {
  target: string;
  /** Receiver only: mean `consig_commit_batch_size`, mean commit time, rows in `events`. */
  batchAvg: number | null;
  commitAvgMs: number | null;
  rows: number | null;
  /** Server CPU time (user + system, all threads) per 200 answer, warm-up included; Linux only. */
  cpuUsPerReq: number | null;
  /** Peak resident set of the server process (VmHWM), MB; Linux only. */
  peakRssMb: number | null;
}

class BenchError extends Error {}

// ---------------------------------------------------------------------------------------------
// Options

const USAGE = `usage: npm run bench -- [options]
  --duration <s>       measured seconds per target and concurrency (default 4)
  --warmup <s>         warm-up seconds before each measurement (default 1)
  --quick              short run: --warmup 0.3 --duration 1
  --concurrency <list> comma-separated (default 1,50)
  --rounds <n>         repeat the whole matrix n times, interleaved; report each row's median-req/s round
  --only <list>        targets to run, comma-separated (${TARGETS.map((t) => t.name).join(', ')})
  --cpu-prof <dir>     write a V8 CPU profile of each receiver process into <dir>
  --pipeline <n>       events in the pipeline backlog drained after the HTTP rows (default 100000,
                       --quick 20000, 0 skips it)
  --poller <n>         tracked registrations waiting while the idle poller is measured (default 10000, 0 skips)
  --growth <n>         events pre-filled for receiver-1m (default 1000000, --quick 100000)
  --baseline <rev>     also build git revision <rev> (its src/ and migrations/, this checkout's
                       node_modules) and run it as receiver-baseline: receiver / receiver-baseline
                       is the before/after ratio of a change, measured in the same run
  --json               print the results as JSON instead of the table`;

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      quick: { type: 'boolean', default: false },
      concurrency: { type: 'string' },
      rounds: { type: 'string' },
      only: { type: 'string' },
      'cpu-prof': { type: 'string' },
      pipeline: { type: 'string' },
      poller: { type: 'string' },
      growth: { type: 'string' },
      baseline: { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const seconds = (name: string, value: string | undefined, fallback: number, min: number) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < min)
      throw new BenchError(`--${name}: expected seconds ≥ ${min}, got ${value}`);
    return Math.round(n * 1000);
  };
  const quick = values.quick ?? false;
  const concurrencies = (values.concurrency ?? '1,50').split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isSafeInteger(n) || n < 1 || n > 1000)
      throw new BenchError(`--concurrency: expected integers from 1 to 1000, got ${s}`);
    return n;
  });
  const rounds = Number(values.rounds ?? '1');
  if (!Number.isSafeInteger(rounds) || rounds < 1 || rounds > 20)
    throw new BenchError(`--rounds: expected an integer from 1 to 20, got ${values.rounds}`);
  let targets = TARGETS.filter((t) => !t.optional);
  if (values.only !== undefined) {
    const names = values.only.split(',').map((s) => s.trim());
    for (const n of names)
      if (!TARGETS.some((t) => t.name === n))
        throw new BenchError(`--only: unknown target ${n} (${TARGETS.map((t) => t.name).join(', ')})`);
    targets = TARGETS.filter((t) => names.includes(t.name));
  }
  return {
    durationMs: seconds('duration', values.duration, quick ? 1000 : 4000, 0.1),
    warmupMs: seconds('warmup', values.warmup, quick ? 300 : 1000, 0),
    concurrencies,
    rounds,
    targets,
    json: values.json ?? false,
    pipelineEvents: (() => {
      const n = Number(values.pipeline ?? (quick ? 20_000 : 100_000));
      if (!Number.isSafeInteger(n) || n < 0)
        throw new BenchError(`--pipeline: expected an event count, got ${values.pipeline}`);
      return n;
    })(),
    pollerTracked: (() => {
      const n = Number(values.poller ?? 10_000);
      if (!Number.isSafeInteger(n) || n < 0)
        throw new BenchError(`--poller: expected a count, got ${values.poller}`);
      return n;
    })(),
    quick,
    growthEvents: (() => {
      const n = Number(values.growth ?? (quick ? 100_000 : 1_000_000));
      if (!Number.isSafeInteger(n) || n < 1)
        throw new BenchError(`--growth: expected an event count, got ${values.growth}`);
      return n;
    })(),
    cpuProfDir: values['cpu-prof'] === undefined ? null : resolve(values['cpu-prof']),
    source: sourceVersion(),
    baseline: values.baseline === undefined ? null : verifiedRevision(values.baseline),
  };
}

function verifiedRevision(rev: string): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', '--verify', `${rev}^{commit}`], {
      cwd: ROOT,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    throw new BenchError(`--baseline: ${rev} is not a commit of this repository`);
  }
}

/**
 * Builds revision `rev` into `dir` (its sources, this checkout's node_modules and compiler) and
 * returns its CLI: the "before" of a change, measured in the same run as the "after".
 */
function buildBaseline(rev: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  const paths = ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'migrations', 'bench'];
  const archive = execFileSync('git', ['archive', '--format=tar', rev, ...paths], {
    cwd: ROOT,
    maxBuffer: 512 * 1024 * 1024,
  });
  execFileSync('tar', ['-x', '-C', dir], { input: archive });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: dir, stdio: 'pipe' });
  } catch (err) {
    const out = (err as { stdout?: Buffer }).stdout?.toString() ?? '';
    throw new BenchError(`--baseline: ${rev} does not build:\n${out.slice(0, 2000)}`);
  }
  const bin = join(dir, 'dist', 'src', 'cli', 'bin.js');
  if (!existsSync(bin)) throw new BenchError(`--baseline: ${rev} has no ${bin} after building`);
  return bin;
}

/** `receiver-baseline` right after `receiver`, so that --rounds interleaves the two. */
function withBaseline(targets: Target[], rev: string, bin: string): Target[] {
  const baseline: Target = {
    name: 'receiver-baseline',
    kind: 'receiver',
    description: `consig-receiver built from ${rev}, FULL, group commit (defaults): the "before"`,
    env: { SQLITE_SYNCHRONOUS: 'FULL' },
    bin,
  };
  const i = targets.findIndex((t) => t.name === 'receiver');
  return i < 0 ? [...targets, baseline] : [...targets.slice(0, i + 1), baseline, ...targets.slice(i + 1)];
}

// ---------------------------------------------------------------------------------------------
// Children and clean-up

const children = new Set<ChildProcess>();
let tempRoot: string | null = null;

function cleanUp(): void {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  children.clear();
  if (tempRoot !== null) {
    rmSync(tempRoot, { recursive: true, force: true });
    tempRoot = null;
  }
}

process.on('exit', cleanUp);
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
  ['SIGHUP', 129],
] as const) {
  process.on(signal, () => {
    process.stderr.write(`\nbench: ${signal}, stopping\n`);
    cleanUp();
    process.exit(code);
  });
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((done) => {
    const timer = setTimeout(() => done(false), ms);
    child.once('exit', () => {
      clearTimeout(timer);
      done(true);
    });
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  // The receiver drains and closes SQLite on SIGTERM (and writes its CPU profile, if asked).
  if (!(await exited(child, 15_000))) {
    child.kill('SIGKILL');
    await exited(child, 5_000);
  }
}

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once('error', fail);
    probe.listen(0, HOST, () => {
      const address = probe.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      probe.close(() => done(port));
    });
  });
}

function httpGet(port: number, path: string, timeoutMs = 2000): Promise<{ status: number; body: string }> {
  return new Promise((done, fail) => {
    const req = get({ host: HOST, port, path, agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
      );
      res.on('error', fail);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', fail);
  });
}

function tail(file: string, lines = 15): string {
  if (!existsSync(file)) return '(no output)';
  return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
}

interface Server {
  child: ChildProcess;
  port: number;
  logPath: string;
  dbPath: string | null;
}

let runCounter = 0;

/** Starts a target with a fresh directory (and database); retries on a port taken meanwhile. */
async function startServer(
  target: Target,
  concurrency: number,
  secret: string,
  options: Options,
): Promise<Server> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOnce(target, concurrency, secret, options);
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt >= 3) throw err;
    }
  }
}

class PortTaken extends BenchError {}

async function startServerOnce(
  target: Target,
  concurrency: number,
  secret: string,
  options: Options,
): Promise<Server> {
  if (tempRoot === null) throw new BenchError('internal: no temp dir');
  runCounter += 1;
  const dir = join(tempRoot, `${String(runCounter).padStart(2, '0')}-${target.name}-c${concurrency}`);
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const logPath = join(dir, 'server.log');
  const log = openSync(logPath, 'w');
  // The receiver reads many variables: start it from an environment without any of them.
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!CONFIG_VARIABLE.test(k)) env[k] = v;
  Object.assign(env, { PORT: String(port), HOST, WEBHOOK_SECRETS: secret });
  let args: string[];
  let dbPath: string | null = null;
  if (target.kind === 'receiver') {
    dbPath = join(dir, 'consig.db');
    if (target.prefill === 'growth') copyFileSync(prefilledDatabase(options.growthEvents), dbPath);
    Object.assign(env, { DATABASE_PATH: dbPath, LOG_LEVEL: 'info' }, target.env);
    const profile =
      options.cpuProfDir === null
        ? []
        : ['--cpu-prof', '--cpu-prof-dir', join(options.cpuProfDir, `${target.name}-c${concurrency}`)];
    args = [...profile, target.bin ?? RECEIVER_BIN, 'serve'];
  } else {
    args = [join(__dirname, target.kind === 'bare' ? 'server-bare.js' : 'server-express.js')];
  }
  const child = track(spawn(process.execPath, args, { env, stdio: ['ignore', log, log] }));
  closeSync(log);

  // Ready: the receiver's /readyz answers 200 (it probes a write); the others answer anything.
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const why = tail(logPath);
      if (why.includes('EADDRINUSE')) throw new PortTaken(`port ${port} taken`);
      throw new BenchError(
        `${target.name} exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${why}`,
      );
    }
    try {
      const r = await httpGet(port, '/readyz', 1000);
      if (target.kind !== 'receiver' || r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop(child);
      throw new BenchError(`${target.name} not ready after 20 s:\n${tail(logPath)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, port, logPath, dbPath };
}

const CONFIG_VARIABLE =
  /^(PORT|HOST|DATABASE_PATH|WEBHOOK_SECRETS?|SIGNATURE_HEADER|MAX_BODY_BYTES|SERVICE_.*|REGISTRY_.*|QUEUE_CONCURRENCY|HANDLER_MAX_ATTEMPTS|ADMIN_TOKEN|LOG_LEVEL|SQLITE_.*|GROUP_COMMIT_.*|SHUTDOWN_TIMEOUT_MS)$/;

async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const child = track(
    fork(join(__dirname, 'load.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  const limitMs = spec.warmupMs + spec.durationMs + 60_000;
  try {
    return await new Promise<LoadResult>((done, fail) => {
      const timer = setTimeout(() => fail(new BenchError('load generator timed out')), limitMs);
      child.once('message', (m: LoadMessage) => {
        clearTimeout(timer);
        if (m.type === 'result') done(m.result);
        else fail(new BenchError(`load generator: ${m.message}`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        fail(new BenchError(`load generator exited (${code}) without a result`));
      });
      child.send(spec);
    });
  } finally {
    await stop(child);
  }
}

/** Peak resident set (VmHWM) of a process in MB, from /proc (null elsewhere). */
function peakRss(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m?.[1] === undefined ? null : Number(m[1]) / 1024;
  } catch {
    return null;
  }
}

let prefilledPath: string | null = null;

/** Builds the pre-filled database once per run; each growth row starts from a copy of it. */
function prefilledDatabase(events: number): string {
  if (prefilledPath !== null) return prefilledPath;
  if (tempRoot === null) throw new BenchError('internal: no temp dir');
  const path = join(tempRoot, `prefill-${events}.db`);
  process.stderr.write(`(pre-filling ${events} events ... `);
  const { seconds } = prefillDatabase(path, events);
  process.stderr.write(`${seconds.toFixed(1)} s) `);
  prefilledPath = path;
  return path;
}

/** user + system CPU of a process, in µs, from /proc (null elsewhere). */
function cpuMicros(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of proc_pid_stat(5), in clock ticks (USER_HZ, 100 on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return null;
  }
}

function metric(text: string, name: string): number | null {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
  return m?.[1] === undefined ? null : Number(m[1]);
}

function ratio(a: number | null, b: number | null): number | null {
  return a === null || b === null || b === 0 ? null : a / b;
}

async function runOne(
  target: Target,
  concurrency: number,
  secret: string,
  options: Options,
  errors: string[],
): Promise<RunResult> {
  const server = await startServer(target, concurrency, secret, options);
  const label = `${target.name} c=${concurrency}`;
  let load: LoadResult;
  let batchAvg: number | null = null;
  let commitAvgMs: number | null = null;
  let rows: number | null = null;
  let cpuUsPerReq: number | null = null;
  let peakRssMb: number | null = null;
  try {
    const cpuBefore = cpuMicros(server.child.pid);
    load = await runLoad({
      host: HOST,
      port: server.port,
      path: PATH,
      concurrency,
      warmupMs: options.warmupMs,
      durationMs: options.durationMs,
      secret,
      idPrefix: `${target.name}_c${concurrency}_${runCounter}`,
    });
    const cpuAfter = cpuMicros(server.child.pid);
    peakRssMb = peakRss(server.child.pid);
    if (cpuBefore !== null && cpuAfter !== null && load.ok200Total > 0)
      cpuUsPerReq = (cpuAfter - cpuBefore) / load.ok200Total;
    if (server.child.exitCode !== null || server.child.signalCode !== null)
      throw new BenchError(`${label}: the server died during the run:\n${tail(server.logPath)}`);
    if (target.kind === 'receiver') {
      const m = await httpGet(server.port, '/metrics');
      if (m.status !== 200) throw new BenchError(`${label}: GET /metrics answered ${m.status}`);
      const sum = metric(m.body, 'consig_commit_batch_size_sum');
      const count = metric(m.body, 'consig_commit_batch_size_count');
      batchAvg = ratio(sum, count);
      const seconds = ratio(
        metric(m.body, 'consig_commit_seconds_sum'),
        metric(m.body, 'consig_commit_seconds_count'),
      );
      commitAvgMs = seconds === null ? null : seconds * 1000;
    }
  } finally {
    await stop(server.child);
  }
  if (server.dbPath !== null) {
    const db = new Database(server.dbPath, { readonly: true, fileMustExist: true });
    try {
      rows = (db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
    } finally {
      db.close();
    }
    const prefilled = target.prefill === 'growth' ? options.growthEvents : 0;
    rows -= prefilled;
    if (rows !== load.ok200Total)
      errors.push(`${label}: ${rows} new rows in events but ${load.ok200Total} answers 200 (must be equal)`);
  }
  const bad = Object.values(load.non200).reduce((a, b) => a + b, 0) + load.socketErrors;
  if (bad > 0)
    errors.push(
      `${label}: ${bad} requests without a 200 (${JSON.stringify(load.non200)}, socket errors ${load.socketErrors}); e.g. ${load.errorSamples.join(' | ')}`,
    );
  if (load.measured === 0) errors.push(`${label}: no 200 answer in the measured window`);
  return { target: target.name, ...load, batchAvg, commitAvgMs, rows, cpuUsPerReq, peakRssMb };
}

// ---------------------------------------------------------------------------------------------
// Report

interface Summary {
  receiverOverExpressC50: number | null;
  receiverOverBareC50: number | null;
  receiverOverBareC1: number | null;
  normalOverFullC50: number | null;
  fullOverBatch1C50: number | null;
  /** Growth: receiver with --growth events stored / empty receiver, c=50 (target ≥ 0.9). */
  growthOverEmptyC50: number | null;
  /** receiver / receiver-baseline (--baseline): the change's effect on ingest throughput. */
  overBaselineC50: number | null;
  overBaselineC1: number | null;
  /** Highest peak RSS of any receiver run (target ≤ 200 MB). */
  receiverPeakRssMb: number;
  receiverP50C1: number | null;
  targetThroughputMet: boolean | null;
  targetLatencyMet: boolean | null;
}

function summarize(results: RunResult[]): Summary {
  const find = (name: string, c: number) => results.find((r) => r.target === name && r.concurrency === c);
  const rps = (name: string, c: number) => find(name, c)?.rps ?? null;
  const receiverOverExpressC50 = ratio(rps('receiver', 50), rps('express-verify', 50));
  const receiverP50C1 = find('receiver', 1)?.p50Ms ?? null;
  return {
    receiverOverExpressC50,
    receiverOverBareC50: ratio(rps('receiver', 50), rps('bare', 50)),
    receiverOverBareC1: ratio(rps('receiver', 1), rps('bare', 1)),
    normalOverFullC50: ratio(rps('receiver-normal', 50), rps('receiver', 50)),
    fullOverBatch1C50: ratio(rps('receiver', 50), rps('receiver-batch1', 50)),
    growthOverEmptyC50: ratio(rps('receiver-1m', 50), rps('receiver', 50)),
    overBaselineC50: ratio(rps('receiver', 50), rps('receiver-baseline', 50)),
    overBaselineC1: ratio(rps('receiver', 1), rps('receiver-baseline', 1)),
    receiverPeakRssMb: Math.max(
      ...results
        .filter((r) => r.target.startsWith('receiver') && r.peakRssMb !== null)
        .map((r) => r.peakRssMb as number),
      0,
    ),
    receiverP50C1,
    targetThroughputMet: receiverOverExpressC50 === null ? null : receiverOverExpressC50 >= 1.0,
    targetLatencyMet: receiverP50C1 === null ? null : receiverP50C1 <= 2,
  };
}

/** One row per (target, concurrency): the round with the median req/s (the lower one of an even count). */
function medianRounds(runs: RunResult[]): RunResult[] {
  const rows: RunResult[] = [];
  for (const r of runs) {
    if (rows.some((x) => x.target === r.target && x.concurrency === r.concurrency)) continue;
    const same = runs
      .filter((x) => x.target === r.target && x.concurrency === r.concurrency)
      .sort((a, b) => a.rps - b.rps);
    rows.push(same[Math.floor((same.length - 1) / 2)] as RunResult);
  }
  return rows;
}

function fixed(n: number | null, digits: number): string {
  return n === null || Number.isNaN(n) ? '-' : n.toFixed(digits);
}

function table(results: RunResult[]): string {
  const head = [
    'target',
    'conc',
    'req/s',
    'p50 ms',
    'p99 ms',
    'max ms',
    'cpu µs/req',
    'non-200',
    'batch avg',
    'commit ms',
    'rows/200s',
    'peak RSS MB',
  ];
  const body = results.map((r) => {
    const bad = Object.values(r.non200).reduce((a, b) => a + b, 0) + r.socketErrors;
    return [
      r.target,
      String(r.concurrency),
      r.rps.toFixed(0),
      fixed(r.p50Ms, 2),
      fixed(r.p99Ms, 2),
      fixed(r.maxMs, 1),
      fixed(r.cpuUsPerReq, 0),
      String(bad),
      fixed(r.batchAvg, 1),
      fixed(r.commitAvgMs, 3),
      r.rows === null ? '-' : `${r.rows}/${r.ok200Total}${r.rows === r.ok200Total ? ' ok' : ' MISMATCH'}`,
      fixed(r.peakRssMb, 0),
    ];
  });
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => (row[i] as string).length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number)))
      .join('  ');
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n');
}

function report(results: RunResult[], s: Summary, options: Options, errors: string[]): string {
  const x = (n: number | null) => (n === null ? 'n/a' : `${n.toFixed(2)}×`);
  const verdict = (met: boolean | null) => (met === null ? 'n/a (target not run)' : met ? 'MET' : 'MISSED');
  const out = [
    `consig-receiver bench: warm-up ${options.warmupMs / 1000} s, ${options.durationMs / 1000} s measured per row` +
      (options.rounds > 1 ? ` (median req/s of ${options.rounds} interleaved rounds), ` : ', ') +
      `node ${process.version}, source ${options.source}, ${PATH} with signed unique deliveries`,
    '',
    table(results),
    '',
    'targets:',
    ...options.targets.map((t) => `  ${t.name.padEnd(16)} ${t.description}`),
    '',
    'ratios (req/s):',
    `  receiver / express-verify  c=50   ${x(s.receiverOverExpressC50)}   (target ≥ 1.00×)`,
    `  receiver / bare            c=50   ${x(s.receiverOverBareC50)}`,
    `  receiver / bare            c=1    ${x(s.receiverOverBareC1)}`,
    `  receiver-normal / receiver c=50   ${x(s.normalOverFullC50)}   (what fsync per commit costs)`,
    `  receiver / receiver-batch1 c=50   ${x(s.fullOverBatch1C50)}   (what group commit gains)`,
    `  receiver-1m / receiver     c=50   ${x(s.growthOverEmptyC50)}   (ingest with ${options.growthEvents} events stored; target ≥ 0.90×)`,
    ...(options.baseline === null
      ? []
      : [
          `  receiver / receiver-baseline c=50 ${x(s.overBaselineC50)}   (this build over ${options.baseline}; target ≥ 1.00× within noise)`,
          `  receiver / receiver-baseline c=1  ${x(s.overBaselineC1)}`,
        ]),
    '',
    `target "ingest with a full database ≥ 0.9× an empty one": ${verdict(s.growthOverEmptyC50 === null ? null : s.growthOverEmptyC50 >= 0.9)}`,
    `target "receiver RSS under load ≤ 200 MB": ${verdict(s.receiverPeakRssMb === 0 ? null : s.receiverPeakRssMb <= 200)} (peak ${s.receiverPeakRssMb.toFixed(0)} MB)`,
    `target "receiver FULL ≥ 1.0× verify-only Express at c=50": ${verdict(s.targetThroughputMet)}` +
      (s.receiverOverExpressC50 === null ? '' : ` (${x(s.receiverOverExpressC50)})`),
    `target "receiver p50 ≤ 2 ms at c=1": ${verdict(s.targetLatencyMet)}` +
      (s.receiverP50C1 === null ? '' : ` (${s.receiverP50C1.toFixed(2)} ms)`),
  ];
  const inline = results.filter((r) => r.signedInline > 0);
  if (inline.length > 0)
    out.push(
      `note: the body pool ran out; ${inline.map((r) => `${r.target} c=${r.concurrency}: ${r.signedInline}`).join(', ')} signed inline`,
    );
  if (errors.length > 0) out.push('', 'ERRORS:', ...errors.map((e) => `  ${e}`));
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  let options: Options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (!existsSync(RECEIVER_BIN)) throw new BenchError(`${RECEIVER_BIN} is missing: run npm run build`);
  tempRoot = mkdtempSync(join(tmpdir(), 'consig-bench-'));
  if (options.cpuProfDir !== null) mkdirSync(options.cpuProfDir, { recursive: true });
  if (options.baseline !== null) {
    process.stderr.write(`bench: building ${options.baseline} as receiver-baseline ...`);
    const bin = buildBaseline(options.baseline, join(tempRoot, 'baseline'));
    options.targets = withBaseline(options.targets, options.baseline, bin);
    process.stderr.write(' done\n');
  }
  const secret = randomBytes(24).toString('hex');
  const errors: string[] = [];
  const runs: RunResult[] = [];
  for (let round = 1; round <= options.rounds; round++) {
    for (const target of options.targets) {
      for (const concurrency of options.concurrencies) {
        if (target.concurrencies !== undefined && !target.concurrencies.includes(concurrency)) continue;
        const of = options.rounds > 1 ? ` (round ${round}/${options.rounds})` : '';
        process.stderr.write(`bench: ${target.name} c=${concurrency}${of} ...`);
        const r = await runOne(target, concurrency, secret, options, errors);
        process.stderr.write(` ${r.rps.toFixed(0)} req/s, p50 ${fixed(r.p50Ms, 2)} ms\n`);
        runs.push(r);
      }
    }
  }
  const results = medianRounds(runs);
  const summary = summarize(results);
  let pipeline: DrainResult | null = null;
  if (options.pipelineEvents > 0) {
    process.stderr.write(`bench: pipeline drain of ${options.pipelineEvents} stored events ...`);
    pipeline = await runPipelineDrain(options.pipelineEvents);
    process.stderr.write(` ${Math.round(pipeline.eventsPerSecond)} events/s\n`);
    if (pipeline.done !== pipeline.events || pipeline.transitions !== pipeline.events) {
      errors.push(
        `pipeline: ${pipeline.done} done and ${pipeline.transitions} transitions for ${pipeline.events} events`,
      );
    }
  }
  let poller: PollerIdleResult | null = null;
  if (options.pollerTracked > 0) {
    process.stderr.write(`bench: idle poller with ${options.pollerTracked} tracked registrations ...`);
    poller = await runPollerIdle(options.pollerTracked, options.quick ? 2 : 5);
    process.stderr.write(` ${poller.passMsMean.toFixed(3)} ms per pass\n`);
    if (poller.polls !== 0) errors.push(`poller: ${poller.polls} polls made while none was due`);
  }
  if (options.json) {
    const config = {
      warmupMs: options.warmupMs,
      durationMs: options.durationMs,
      concurrencies: options.concurrencies,
      rounds: options.rounds,
      node: process.version,
      source: options.source,
    };
    const all = options.rounds > 1 ? { runs } : {};
    process.stdout.write(
      `${JSON.stringify({ config, results, summary, pipeline, poller, errors, ...all }, null, 2)}\n`,
    );
  } else {
    process.stdout.write(`${report(results, summary, options, errors)}\n`);
    if (pipeline !== null) {
      process.stdout.write(
        `\npipeline: drained ${pipeline.events} stored events (life-cycle handler, real SQLite) in ` +
          `${pipeline.drainSeconds.toFixed(2)} s = ${Math.round(pipeline.eventsPerSecond)} events/s\n` +
          `target "pipeline ≥ 2000 events/s from a 100 000-event backlog": ${pipeline.eventsPerSecond >= 2000 ? 'MET' : 'MISSED'}\n`,
      );
    }
    if (poller !== null) {
      process.stdout.write(
        `\nregistry poller, ${poller.tracked} registrations waiting: scheduling pass ${poller.passMsMean.toFixed(3)} ms mean, ` +
          `${poller.passMsP99.toFixed(3)} ms p99; idle CPU ${poller.idleCpuPercent.toFixed(2)} % over ${poller.idleSeconds} s; ` +
          `bench process RSS ${poller.rssMb.toFixed(0)} MB\n`,
      );
    }
  }
  return errors.length > 0 ? 1 : 0;
}

main().then(
  (code) => {
    cleanUp();
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`\nbench: ${err instanceof Error ? err.message : String(err)}\n`);
    cleanUp();
    process.exitCode = 1;
  },
);
