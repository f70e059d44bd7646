import {
  DestinationChild,
  type ForwardingHarness,
  type ForwardLatencyResult,
  type ForwardThroughputResult,
  runForwardingLatency,
  runForwardingThroughput,
  prepareForwardBacklog,
} from './forwarding';
import { otlpSink, tracedEnv, tracingLines } from './tracing';
import { RECEIVER_NODE_FLAGS } from './receiver-node';
import { runClusterStarvedRows, runStarvedRows, starvedReport } from './starved';
import { type DrainResult, runPipelineDrain } from './pipeline-drain';
import {
  type ClusterBenchOptions,
  type ClusterFigures,
  type ClusterHarness,
  drainBuilds,
  runClusterFigures,
} from './cluster';
import { clusterReport } from './cluster-report';
import {
  cpuMicros,
  exitedWithin,
  freePort,
  HOST,
  httpGet,
  isAlive,
  median,
  medianBy,
  metric,
  peakRss,
  pinToCpus,
} from './harness';
import { consoleReport, runConsoleFigures } from './console';
import { prefillDatabase } from './prefill';
import { type PollerIdleResult, runPollerIdle } from './poller-idle';
import { type ChildProcess, execFileSync, fork, spawn, spawnSync } from 'node:child_process';
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
import { availableParallelism, loadavg, tmpdir } from 'node:os';
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
  /** Forwards to a local destination (a child answering 200 at once), via FORWARD_URL. */
  forward?: boolean;
  /** Runs on this database file instead of a fresh one. */
  databasePath?: string;
  /** Tracing on, exporting to the run's OTLP sink (bench/tracing.ts). */
  traced?: boolean;
}

/** What `--only` names beside the targets: sections of figures. */
const SECTIONS: readonly string[] = ['forwarding', 'console', 'cluster', 'starved'];

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
    name: 'receiver-forward',
    kind: 'receiver',
    description: 'consig-receiver, FULL, forwarding every message to a local destination (FORWARD_URL)',
    env: { SQLITE_SYNCHRONOUS: 'FULL' },
    forward: true,
    concurrencies: [50],
  },
  {
    name: 'receiver-traced',
    kind: 'receiver',
    description: 'consig-receiver, FULL, tracing on: every trace sampled, OTLP http/protobuf to a local sink',
    env: { SQLITE_SYNCHRONOUS: 'FULL' },
    traced: true,
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
  /** --keep: the run's directory (databases, server logs) is left in place and its path printed. */
  keep: boolean;
  /** The commit measured (see sourceVersion). */
  source: string;
  /** --baseline: a git revision built and measured beside this build, for the before/after ratio. */
  baseline: string | null;
  /** --forwarding: the forwarding throughput and latency figures run (the ingest row is a target). */
  forwarding: boolean;
  forwardBacklog: number;
  /** --forward-rounds: the throughput backlog sent this many times by each build, alternating. */
  forwardRounds: number;
  forwardLatencyMs: number;
  forwardRate: number;
  /** The starved row's deliveries per second (issue 23), 0: not run. */
  starvedRate: number;
  starvedMs: number;
  /** --starved-cluster: the starved rows in cluster mode too (a throwaway PostgreSQL). */
  starvedCluster: boolean;
  /** `--only starved`: the starved rows alone (no HTTP row, no other forwarding figure). */
  starvedOnly: boolean;
  /** --console: the console figure runs (pages on the --growth database, p95 ≤ 100 ms). */
  console: boolean;
  consoleRequests: number;
  /** --cluster: the cluster-mode figures run (a throwaway PostgreSQL on this machine's binaries). */
  cluster: boolean;
  clusterRounds: number;
  /** --cluster-share-cores: row 1's runs on every core, unpinned (default: pinned, see bench/cluster.ts). */
  clusterShareCores: boolean;
  clusterRate: number;
  clusterLatencyMs: number;
  clusterEvents: number;
  clusterConcurrencies: number[];
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
  /** Forwarding rows: messages that reached the destination during the row, and still waiting at its end. */
  forwarded: number | null;
  forwardBacklog: number | null;
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
  --only <list>        targets to run, comma-separated (${TARGETS.map((t) => t.name).join(', ')});
                       "forwarding" runs only the forwarding figures: receiver and receiver-forward at
                       c=50, throughput and latency (and no pipeline or poller unless asked for);
                       "console" and "cluster" run only that section (see --console, --cluster);
                       "starved" runs only the starved rows, SQLite and cluster mode (see --starved)
  --cpu-prof <dir>     write a V8 CPU profile of each receiver process into <dir>
  --keep               keep the run's directory (each receiver's database and server.log)
  --pipeline <n>       events in the pipeline backlog drained after the HTTP rows (default 100000,
                       --quick 20000, 0 skips it)
  --poller <n>         tracked registrations waiting while the idle poller is measured (default 10000, 0 skips)
  --growth <n>         events pre-filled for receiver-1m (default 1000000, --quick 100000)
  --forwarding <0|1>   the forwarding figures: ingest with forwarding on (receiver-forward), throughput
                       from a stored backlog, latency from 200 to the destination (default 1; with
                       --only, 1 only when "forwarding" is named)
  --console <0|1>      the console figure: each page's p95 on the --growth database, signed in over
                       HTTP (default 1; with --only, 1 only when "console" is named)
  --console-requests <n> requests timed per console page (default 50, --quick 20)
  --cluster <0|1>      the cluster-mode figures (issue 13; a throwaway PostgreSQL from this machine's
                       binaries): ingest per replica over SQLite mode, relay lag, processing throughput
                       on PostgreSQL, 200 → proposal updated there (default 1; with --only, 1 only when
                       "cluster" is named)
  --cluster-rounds <n> ingest rounds, each SQLite mode, cluster mode and an ingest-only replica
                       (CLUSTER_CONCURRENCY=0) once (default 3, --quick 2)
  --cluster-share-cores row 1 unpinned: the receiver, PostgreSQL and the load generator share every
                       core (default: the receiver and the load generator on core 0, PostgreSQL on the
                       others, as a replica on a machine of its own)
  --cluster-rate <n>   deliveries per second of the fixed-rate run (relay lag, end to end; default 200)
  --cluster-latency <s> measured seconds of the fixed-rate run (default 10, --quick 3)
  --cluster-events <n> pending events drained by the processing figure (default 20000, --quick 5000)
  --cluster-concurrency <list> CLUSTER_CONCURRENCY values of the processing figure (default 4,8)
  --forward-backlog <n> messages in the forwarding throughput backlog (default 20000, --quick 5000)
  --forward-rounds <n> times each build sends that backlog, alternating with the --baseline build's;
                       the round with the median CPU per message is reported (default 1)
  --forward-latency <s> seconds of deliveries for the forwarding latency (default 10, --quick 3)
  --forward-rate <n>   deliveries per second for the forwarding latency (default 200)
  --starved <n>        the starved row (with the forwarding figures): the receiver pinned to core 0
                       beside 2 busy loops, the load and two destinations on core 1, n deliveries/s
                       open loop, forwarding off and on (and the --baseline build's); default 250
                       on 2+ cores, 0 skips it
  --starved-duration <s> measured seconds of each starved row (default 10, --quick 3)
  --starved-cluster <0|1> the starved rows in cluster mode too: the receiver a replica on a throwaway
                       PostgreSQL pinned with the load to core 1 (default: 1 when the cluster figures run)
  --baseline <rev>     also build git revision <rev> (its src/ and migrations/, this checkout's
                       node_modules) and run it as receiver-baseline: receiver / receiver-baseline
                       is the before/after ratio of a change, measured in the same run; the
                       pipeline drain, cluster processing (row 3), forwarding throughput and the
                       starved rows run both builds too, alternating
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
      keep: { type: 'boolean' },
      pipeline: { type: 'string' },
      poller: { type: 'string' },
      growth: { type: 'string' },
      baseline: { type: 'string' },
      forwarding: { type: 'string' },
      console: { type: 'string' },
      'console-requests': { type: 'string' },
      cluster: { type: 'string' },
      'cluster-rounds': { type: 'string' },
      'cluster-share-cores': { type: 'boolean', default: false },
      'cluster-rate': { type: 'string' },
      'cluster-latency': { type: 'string' },
      'cluster-events': { type: 'string' },
      'cluster-concurrency': { type: 'string' },
      'forward-backlog': { type: 'string' },
      'forward-rounds': { type: 'string' },
      'forward-latency': { type: 'string' },
      'forward-rate': { type: 'string' },
      starved: { type: 'string' },
      'starved-duration': { type: 'string' },
      'starved-cluster': { type: 'string' },
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
  if (values.forwarding !== undefined && values.forwarding !== '0' && values.forwarding !== '1')
    throw new BenchError(`--forwarding: expected 0 or 1, got ${values.forwarding}`);
  if (values.console !== undefined && values.console !== '0' && values.console !== '1')
    throw new BenchError(`--console: expected 0 or 1, got ${values.console}`);
  if (values.cluster !== undefined && values.cluster !== '0' && values.cluster !== '1')
    throw new BenchError(`--cluster: expected 0 or 1, got ${values.cluster}`);
  let targets = TARGETS.filter((t) => !t.optional);
  let forwarding = values.forwarding !== '0';
  let onlyForwarding = false;
  let onlyStarved = false;
  let consoleFigure = values.console !== '0';
  let clusterFigures = values.cluster !== '0';
  const names = values.only?.split(',').map((s) => s.trim()) ?? [];
  if (values.only !== undefined) {
    for (const n of names)
      if (!SECTIONS.includes(n) && !TARGETS.some((t) => t.name === n))
        throw new BenchError(
          `--only: unknown target ${n} (${TARGETS.map((t) => t.name).join(', ')}, ${SECTIONS.join(', ')})`,
        );
    targets = TARGETS.filter((t) => names.includes(t.name));
    onlyForwarding = names.includes('forwarding');
    consoleFigure = values.console === undefined ? names.includes('console') : values.console === '1';
    clusterFigures = values.cluster === undefined ? names.includes('cluster') : values.cluster === '1';
    onlyStarved = names.includes('starved') && !onlyForwarding;
    forwarding = values.forwarding === undefined ? onlyForwarding || onlyStarved : values.forwarding === '1';
    if (onlyForwarding) targets = withForwardingRows(targets);
  }
  // --forwarding 0 drops the forwarding row, unless it was named in --only.
  if (!forwarding) targets = targets.filter((t) => !t.forward || names.includes(t.name));
  const count = (name: string, value: string | undefined, fallback: number, min: number) => {
    const n = Number(value ?? fallback);
    if (!Number.isSafeInteger(n) || n < min)
      throw new BenchError(`--${name}: expected an integer ≥ ${min}, got ${value}`);
    return n;
  };
  return {
    durationMs: seconds('duration', values.duration, quick ? 1000 : 4000, 0.1),
    warmupMs: seconds('warmup', values.warmup, quick ? 300 : 1000, 0),
    concurrencies,
    rounds,
    targets,
    json: values.json ?? false,
    pipelineEvents: (() => {
      const n = Number(
        values.pipeline ??
          (onlyForwarding || onlyStarved || names.includes('console') || names.includes('cluster')
            ? 0
            : quick
              ? 20_000
              : 100_000),
      );
      if (!Number.isSafeInteger(n) || n < 0)
        throw new BenchError(`--pipeline: expected an event count, got ${values.pipeline}`);
      return n;
    })(),
    pollerTracked: (() => {
      const n = Number(
        values.poller ??
          (onlyForwarding || onlyStarved || names.includes('console') || names.includes('cluster')
            ? 0
            : 10_000),
      );
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
    keep: values.keep === true,
    source: sourceVersion(),
    baseline: values.baseline === undefined ? null : verifiedRevision(values.baseline),
    forwarding,
    forwardBacklog: count('forward-backlog', values['forward-backlog'], quick ? 5000 : 20_000, 2),
    forwardRounds: count('forward-rounds', values['forward-rounds'], 1, 1),
    forwardLatencyMs: seconds('forward-latency', values['forward-latency'], quick ? 3000 : 10_000, 0.5),
    forwardRate: count('forward-rate', values['forward-rate'], 200, 1),
    starvedRate: count('starved', values.starved, availableParallelism() >= 2 ? 250 : 0, 0),
    starvedMs: seconds('starved-duration', values['starved-duration'], quick ? 3000 : 10_000, 0.5),
    starvedCluster:
      values['starved-cluster'] === undefined
        ? clusterFigures || onlyStarved
        : values['starved-cluster'] === '1',
    starvedOnly: onlyStarved,
    console: consoleFigure,
    consoleRequests: count('console-requests', values['console-requests'], quick ? 20 : 50, 1),
    cluster: clusterFigures,
    clusterRounds: count('cluster-rounds', values['cluster-rounds'], quick ? 2 : 3, 1),
    clusterShareCores: values['cluster-share-cores'] === true,
    clusterRate: count('cluster-rate', values['cluster-rate'], 200, 1),
    clusterLatencyMs: seconds('cluster-latency', values['cluster-latency'], quick ? 3000 : 10_000, 0.5),
    clusterEvents: count('cluster-events', values['cluster-events'], quick ? 5000 : 20_000, 1),
    clusterConcurrencies: (values['cluster-concurrency'] ?? '4,8').split(',').map((s) => {
      const n = Number(s.trim());
      if (!Number.isSafeInteger(n) || n < 1 || n > 64)
        throw new BenchError(`--cluster-concurrency: expected integers from 1 to 64, got ${s}`);
      return n;
    }),
  };
}

/**
 * `--only forwarding`: receiver-forward and its base, the receiver, at c=50 only (unless the
 * receiver was named too, at every --concurrency), in the order of TARGETS so rounds interleave.
 */
function withForwardingRows(named: Target[]): Target[] {
  return TARGETS.flatMap((t) => {
    if (named.includes(t)) return [t];
    if (t.name === 'receiver') return [{ ...t, concurrencies: [50] }];
    if (t.forward) return [t];
    return [];
  });
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
  // migrations-pg/: cluster mode's, since issue 13 (an older revision has none).
  const paths = [
    'package.json',
    'tsconfig.json',
    'tsconfig.build.json',
    'src',
    'migrations',
    'migrations-pg',
    'bench',
  ].filter((path) => spawnSync('git', ['cat-file', '-e', `${rev}:${path}`], { cwd: ROOT }).status === 0);
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
/** --keep */
let keepTempRoot = false;

function cleanUp(): void {
  for (const child of children) if (isAlive(child)) child.kill('SIGKILL');
  children.clear();
  if (tempRoot !== null && keepTempRoot) {
    console.error(`kept: ${tempRoot}`);
    tempRoot = null;
  } else if (tempRoot !== null) {
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

async function stop(child: ChildProcess): Promise<void> {
  if (!isAlive(child)) return;
  child.kill('SIGTERM');
  // The receiver drains and closes SQLite on SIGTERM (and writes its CPU profile, if asked).
  if (!(await exitedWithin(child, 15_000))) {
    child.kill('SIGKILL');
    await exitedWithin(child, 5_000);
  }
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
  /** The local destination of a forwarding target. */
  destination: DestinationChild | null;
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
  const destination = target.forward ? await DestinationChild.start(childHarness, ROW_DESTINATION) : null;
  try {
    return await spawnServer(target, concurrency, secret, options, destination);
  } catch (err) {
    await destination?.stop();
    throw err;
  }
}

/** The ingest row's destination counts and checks one signature in 100, as cheaply as it can. */
const ROW_DESTINATION = { verifyEvery: 100, keepArrivals: false, trackEventReceived: false } as const;

async function spawnServer(
  target: Target,
  concurrency: number,
  secret: string,
  options: Options,
  destination: DestinationChild | null,
): Promise<Server> {
  if (tempRoot === null) throw new BenchError('internal: no temp dir');
  runCounter += 1;
  const suffix = concurrency > 0 ? `-c${concurrency}` : '';
  const dir = join(tempRoot, `${String(runCounter).padStart(2, '0')}-${target.name}${suffix}`);
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
    dbPath = target.databasePath ?? join(dir, 'consig.db');
    if (target.prefill === 'growth') copyFileSync(prefilledDatabase(options.growthEvents), dbPath);
    Object.assign(env, { DATABASE_PATH: dbPath, LOG_LEVEL: 'info' }, target.env);
    if (destination !== null)
      Object.assign(env, { FORWARD_URL: destination.url, FORWARD_SECRET: destination.secret });
    if (target.traced === true) Object.assign(env, tracedEnv((await otlpSink()).url));
    const profile =
      options.cpuProfDir === null
        ? []
        : ['--cpu-prof', '--cpu-prof-dir', join(options.cpuProfDir, `${target.name}${suffix}`)];
    args = [...RECEIVER_NODE_FLAGS, ...profile, target.bin ?? RECEIVER_BIN, 'serve'];
  } else {
    args = [join(__dirname, target.kind === 'bare' ? 'server-bare.js' : 'server-express.js')];
  }
  const child = track(spawn(process.execPath, args, { env, stdio: ['ignore', log, log] }));
  closeSync(log);

  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const why = tail(logPath);
      if (why.includes('EADDRINUSE')) throw new PortTaken(`port ${port} taken`);
      throw new BenchError(
        `${target.name} exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${why}`,
      );
    }
    const r = await httpGet(port, '/readyz', 1000);
    // The receiver's /readyz answers 200 once it can write; the others answer anything.
    if (r !== null && (target.kind !== 'receiver' || r.status === 200)) break;
    if (Date.now() > deadline) {
      await stop(child);
      throw new BenchError(`${target.name} not ready after 20 s:\n${tail(logPath)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, port, logPath, dbPath, destination };
}

const CONFIG_VARIABLE =
  /^(PORT|HOST|DATABASE_PATH|WEBHOOK_SECRETS?|SIGNATURE_HEADER|MAX_BODY_BYTES|SERVICE_.*|REGISTRY_.*|QUEUE_CONCURRENCY|HANDLER_MAX_ATTEMPTS|PROCESSING_LEASE_MS|ADMIN_TOKEN|LOG_LEVEL|SQLITE_.*|GROUP_COMMIT_.*|SHUTDOWN_TIMEOUT_MS|RETENTION_DAYS|ALLOWED_CIDRS|TRUST_PROXY|DELIVERY_SILENCE_ALARM_MS|FORWARD_.*|DESTINATIONS_FILE|FEED_FULL_CPF|DATABASE_URL|REPLICA_ID|RELAY_.*|CLUSTER_.*|OTEL_.*)$/;

/** What forwarding.ts needs of this process to start and clean up its children. */
const childHarness = { track, stopChild: stop };

/** The harness of the forwarding throughput and latency figures: receivers started as the rows' are. */
function forwardingHarness(secret: string, options: Options): ForwardingHarness {
  if (tempRoot === null) throw new BenchError('internal: no temp dir');
  return {
    ...childHarness,
    dir: tempRoot,
    webhookSecret: secret,
    startReceiver: async (name, env, databasePath, bin) => {
      const target: Target = {
        name,
        kind: 'receiver',
        description: name,
        env: { SQLITE_SYNCHRONOUS: 'FULL', ...env },
        ...(databasePath === undefined ? {} : { databasePath }),
        ...(bin === undefined ? {} : { bin }),
      };
      const server = await startServer(target, 0, secret, options);
      const { child } = server;
      return {
        port: server.port,
        pid: child.pid,
        dbPath: server.dbPath as string,
        logPath: server.logPath,
        alive: () => isAlive(child),
        stop: () => stop(child),
      };
    },
  };
}

/** The cluster figures' harness: receivers as the rows start them, and the rows' load generator. */
function clusterHarness(secret: string, options: Options): ClusterHarness {
  return {
    ...forwardingHarness(secret, options),
    runLoad: (spec) => runLoad({ host: HOST, path: PATH, secret, ...spec }),
  };
}

async function runLoad(spec: LoadSpec & { cpus?: string }): Promise<LoadResult> {
  const child = track(
    fork(join(__dirname, 'load.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  if (spec.cpus !== undefined && child.pid !== undefined) pinToCpus([child.pid], spec.cpus);
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
  let forwarded: number | null = null;
  let forwardBacklog: number | null = null;
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
    if (!isAlive(server.child))
      throw new BenchError(`${label}: the server died during the run:\n${tail(server.logPath)}`);
    if (target.kind === 'receiver') {
      const m = await httpGet(server.port, '/metrics');
      if (m?.status !== 200) throw new BenchError(`${label}: GET /metrics answered ${m?.status ?? 'nothing'}`);
      const sum = metric(m.body, 'consig_commit_batch_size_sum');
      const count = metric(m.body, 'consig_commit_batch_size_count');
      batchAvg = ratio(sum, count);
      const seconds = ratio(
        metric(m.body, 'consig_commit_seconds_sum'),
        metric(m.body, 'consig_commit_seconds_count'),
      );
      commitAvgMs = seconds === null ? null : seconds * 1000;
      if (server.destination !== null) forwardBacklog = metric(m.body, 'consig_forward_backlog');
    }
    if (server.destination !== null) {
      const d = await server.destination.report();
      forwarded = d.received;
      if (d.badSignatures > 0 || d.missingHeaders > 0)
        errors.push(
          `${label}: the destination found ${d.badSignatures} bad signatures of ${d.verified} checked and ` +
            `${d.missingHeaders} requests without the Standard Webhooks headers; e.g. ${d.errorSamples.join(' | ')}`,
        );
    }
  } finally {
    await stop(server.child);
    await server.destination?.stop();
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
  return {
    target: target.name,
    ...load,
    batchAvg,
    commitAvgMs,
    rows,
    cpuUsPerReq,
    peakRssMb,
    forwarded,
    forwardBacklog,
  };
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
  /** receiver-forward / receiver, c=50: ingest with forwarding on over off (target ≥ 0.8). */
  forwardOverReceiverC50: number | null;
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
    forwardOverReceiverC50: ratio(rps('receiver-forward', 50), rps('receiver', 50)),
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
  for (const r of runs)
    if (!rows.some((x) => x.target === r.target && x.concurrency === r.concurrency))
      rows.push(
        medianBy(
          runs.filter((x) => x.target === r.target && x.concurrency === r.concurrency),
          (x) => x.rps,
        ) as RunResult,
      );
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
    `  receiver-forward / receiver c=50  ${x(s.forwardOverReceiverC50)}   (ingest with forwarding on over off; target ≥ 0.60×, issue 23)`,
    '',
    `target "ingest with a full database ≥ 0.9× an empty one": ${verdict(s.growthOverEmptyC50 === null ? null : s.growthOverEmptyC50 >= 0.9)}`,
    `target "receiver RSS under load ≤ 200 MB": ${verdict(s.receiverPeakRssMb === 0 ? null : s.receiverPeakRssMb <= 200)} (peak ${s.receiverPeakRssMb.toFixed(0)} MB)`,
    `target "receiver FULL ≥ 1.0× verify-only Express at c=50": ${verdict(s.targetThroughputMet)}` +
      (s.receiverOverExpressC50 === null ? '' : ` (${x(s.receiverOverExpressC50)})`),
    `target "receiver p50 ≤ 2 ms at c=1": ${verdict(s.targetLatencyMet)}` +
      (s.receiverP50C1 === null ? '' : ` (${s.receiverP50C1.toFixed(2)} ms)`),
  ];
  if (s.forwardOverReceiverC50 !== null)
    out.push(
      `target "ingest with forwarding on ≥ 0.6× off" (issue 23; issue 11 had 0.8×): ${verdict(s.forwardOverReceiverC50 >= 0.6)} (${x(s.forwardOverReceiverC50)})`,
    );
  out.push(...tracingLines(results));
  for (const r of results.filter((r) => r.forwarded !== null))
    out.push(
      `note: ${r.target} c=${r.concurrency}: ${r.forwarded} messages reached the destination during the row ` +
        `(${((r.forwarded ?? 0) / ((options.warmupMs + options.durationMs) / 1000)).toFixed(0)}/s), ` +
        `${r.forwardBacklog ?? '?'} still waiting at its end (each 200 causes 2)`,
    );
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
  keepTempRoot = options.keep;
  if (options.baseline !== null) {
    process.stderr.write(`bench: building ${options.baseline} as receiver-baseline ...`);
    const bin = buildBaseline(options.baseline, join(tempRoot, 'baseline'));
    options.targets = withBaseline(options.targets, options.baseline, bin);
    process.stderr.write(' done\n');
  }
  const secret = randomBytes(24).toString('hex');
  const errors: string[] = [];
  const runs: RunResult[] = [];
  for (let round = 1; round <= (options.starvedOnly ? 0 : options.rounds); round++) {
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
  const baselineBin = options.targets.find((t) => t.name === 'receiver-baseline')?.bin;
  const pipelineAb =
    options.pipelineEvents > 0 && baselineBin !== undefined && options.baseline !== null
      ? pipelineAgainst(baselineBin, options.pipelineEvents, Math.max(3, options.rounds), errors)
      : null;
  let poller: PollerIdleResult | null = null;
  if (options.pollerTracked > 0) {
    process.stderr.write(`bench: idle poller with ${options.pollerTracked} tracked registrations ...`);
    poller = await runPollerIdle(options.pollerTracked, options.quick ? 2 : 5);
    process.stderr.write(` ${poller.passMsMean.toFixed(3)} ms per pass\n`);
    if (poller.polls !== 0) errors.push(`poller: ${poller.polls} polls made while none was due`);
  }
  const forwarding =
    options.forwarding && !options.starvedOnly
      ? await runForwardingFigures(forwardingHarness(secret, options), options, errors)
      : null;
  const starved =
    options.forwarding && options.starvedRate > 0
      ? await runStarvedRows(forwardingHarness(secret, options), {
          rate: options.starvedRate,
          warmupMs: options.warmupMs,
          durationMs: options.starvedMs,
          busyLoops: 2,
          baselineBin: options.targets.find((t) => t.name === 'receiver-baseline')?.bin ?? null,
        })
      : null;
  const starvedCluster =
    options.forwarding && options.starvedRate > 0 && options.starvedCluster
      ? await runClusterStarvedRows(forwardingHarness(secret, options), {
          rate: options.starvedRate,
          warmupMs: options.warmupMs,
          durationMs: options.starvedMs,
          busyLoops: 2,
          baselineBin: options.targets.find((t) => t.name === 'receiver-baseline')?.bin ?? null,
        })
      : null;
  const consolePages = options.console
    ? await runConsoleFigures(
        forwardingHarness(secret, options),
        { path: prefilledDatabase(options.growthEvents), events: options.growthEvents },
        options.consoleRequests,
        errors,
      )
    : null;
  const cluster = options.cluster ? await runClusterSection(secret, options, errors) : null;
  const clusterAb =
    options.cluster && baselineBin !== undefined
      ? await clusterDrainAgainst(secret, baselineBin, options, errors)
      : null;
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
      `${JSON.stringify({ config, results, summary, pipeline, poller, forwarding, starved, starvedCluster, console: consolePages, cluster: cluster?.figures ?? null, errors, ...all }, null, 2)}\n`,
    );
  } else {
    // --only cluster or starved: no HTTP rows, so no table of them (what was measured and the errors still print).
    if (results.length > 0 || (cluster === null && !options.starvedOnly))
      process.stdout.write(`${report(results, summary, options, errors)}\n`);
    else {
      process.stdout.write(`consig-receiver bench: node ${process.version}, source ${options.source}\n`);
      if (errors.length > 0) process.stdout.write(`\nERRORS:\n${errors.map((e) => `  ${e}`).join('\n')}\n`);
    }
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
    if (forwarding !== null) process.stdout.write(`\n${forwardingReport(forwarding)}\n`);
    const starvedRows = [...(starved ?? []), ...(starvedCluster ?? [])];
    if (starvedRows.length > 0)
      process.stdout.write(
        `\n${starvedReport({ rate: options.starvedRate, warmupMs: options.warmupMs, durationMs: options.starvedMs, busyLoops: 2, baselineBin: null }, starvedRows)}\n`,
      );
    if (consolePages !== null) process.stdout.write(`\n${consoleReport(consolePages)}\n`);
    if (cluster !== null) process.stdout.write(`\n${clusterReport(cluster.figures, cluster.options)}\n`);
    for (const ab of [pipelineAb, clusterAb])
      if (ab !== null) process.stdout.write(`\n${abReport(ab, options.baseline ?? '')}\n`);
  }
  return errors.length > 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// This build against --baseline's where a figure is not an HTTP row: the pipeline drain and
// cluster mode's processing (row 3), alternating builds, in the same run (issue 24).

interface AbFigure {
  what: string;
  unit: string;
  /** Each build's figure, round by round. */
  runs: { build: number[]; baseline: number[] };
}

function abReport(f: AbFigure, rev: string): string {
  const list = (xs: number[]) => xs.map((x) => Math.round(x)).join(' / ');
  const ratio = median(f.runs.build) / median(f.runs.baseline);
  return (
    `${f.what}, this build against ${rev}, alternating: this build ${list(f.runs.build)} ${f.unit}, ` +
    `baseline ${list(f.runs.baseline)} ${f.unit}\n` +
    `  this build / baseline (medians) ${fixed(ratio, 2)}×   (target ≥ 1.00× within noise)`
  );
}

/**
 * The pipeline drain (bench/pipeline-drain.ts) of each build, in a child process of its own pinned
 * to core 0 (when taskset is here), the builds alternating, `rounds` each.
 */
function pipelineAgainst(baselineBin: string, events: number, rounds: number, errors: string[]): AbFigure {
  const scripts = {
    build: join(__dirname, 'pipeline-drain.js'),
    baseline: resolve(baselineBin, '..', '..', '..', 'bench', 'pipeline-drain.js'),
  };
  const pin = spawnSync('taskset', ['-c', '0', 'true']).status === 0 ? ['taskset', '-c', '0'] : [];
  const runs = { build: [] as number[], baseline: [] as number[] };
  for (let round = 1; round <= rounds; round++)
    for (const which of ['build', 'baseline'] as const) {
      process.stderr.write(`bench: pipeline drain, ${which}, round ${round} ...`);
      const argv = [...pin, process.execPath, scripts[which], String(events)];
      const r = spawnSync(argv[0] as string, argv.slice(1), { encoding: 'utf8' });
      const rate = /= (\d+) events\/s/.exec(r.stdout ?? '')?.[1];
      if (r.status !== 0 || rate === undefined) {
        errors.push(`pipeline drain (${which}): exit ${r.status}; ${(r.stdout + r.stderr).slice(-500)}`);
        continue;
      }
      process.stderr.write(` ${rate} events/s\n`);
      runs[which].push(Number(rate));
    }
  return { what: `pipeline drain of ${events} stored events`, unit: 'events/s', runs };
}

/** Cluster mode's processing (row 3, bench/cluster.ts `drainBuilds`) of each build, ABBA. */
async function clusterDrainAgainst(
  secret: string,
  baselineBin: string,
  options: Options,
  errors: string[],
): Promise<AbFigure> {
  const concurrency = options.clusterConcurrencies[0] ?? 4;
  const results = await drainBuilds(
    clusterHarness(secret, options),
    {
      builds: [
        { label: 'build', bin: join(__dirname, '..', 'src', 'cli', 'bin.js') },
        { label: 'baseline', bin: baselineBin },
      ],
      events: options.clusterEvents,
      concurrency,
      runs: Math.max(2, options.clusterRounds),
    },
    (line) => process.stderr.write(`bench: cluster processing ${line}\n`),
  );
  const of = (label: string) => results.get(label) ?? { eventsPerSecond: [], ok: false };
  for (const label of ['build', 'baseline'])
    if (!of(label).ok)
      errors.push(`cluster processing (${label}): a drain did not process every event in order`);
  return {
    what: `cluster processing of ${options.clusterEvents} events, CLUSTER_CONCURRENCY=${concurrency}`,
    unit: 'events/s',
    runs: { build: of('build').eventsPerSecond, baseline: of('baseline').eventsPerSecond },
  };
}

// ---------------------------------------------------------------------------------------------
// Cluster figures (issue 13): bench/cluster.ts

async function runClusterSection(
  secret: string,
  options: Options,
  errors: string[],
): Promise<{ figures: ClusterFigures; options: ClusterBenchOptions } | null> {
  const clusterOptions: ClusterBenchOptions = {
    rounds: options.clusterRounds,
    shareCores: options.clusterShareCores,
    concurrency: 50,
    warmupMs: options.warmupMs,
    durationMs: options.durationMs,
    rate: options.clusterRate,
    rateMs: options.clusterLatencyMs,
    drainEvents: options.clusterEvents,
    drainConcurrencies: options.clusterConcurrencies,
    log: (text) => process.stderr.write(text),
  };
  try {
    const figures = await runClusterFigures(clusterHarness(secret, options), clusterOptions, errors);
    return { figures, options: clusterOptions };
  } catch (err) {
    // No PostgreSQL binaries, or a run that failed: the other sections' figures still print.
    errors.push(`cluster: ${err instanceof Error ? err.message : String(err)}`);
    process.stderr.write('\n');
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Forwarding figures (issue 11): throughput from a stored backlog, latency from 200 to destination

interface ForwardingFigures {
  /** This build's round with the median CPU per message. */
  throughput: ForwardThroughputResult;
  /** The same for the --baseline build (null without one). */
  baseline: ForwardThroughputResult | null;
  /** CPU per message of every round, per build. */
  cpuRounds: Record<string, string>;
  latency: ForwardLatencyResult;
  /** The machine's 1-minute load average after each figure, and its cores: is the figure the code's or the neighbours'? */
  loadAfter: { throughput: number; latency: number; cores: number };
}

/** Issue 23's target for the throughput figure's receiver CPU per message, µs. */
const FORWARD_CPU_TARGET_US = 200;

/** Target of the throughput figure, messages/s to one local destination. */
const FORWARD_TARGET_RATE = 2000;

async function runForwardingFigures(
  h: ForwardingHarness,
  options: Options,
  errors: string[],
): Promise<ForwardingFigures> {
  process.stderr.write(`bench: forwarding backlog of ${options.forwardBacklog} messages ...`);
  const backlog = await prepareForwardBacklog(h, options.forwardBacklog);
  process.stderr.write(` stored\n`);
  const baselineBin = options.targets.find((t) => t.name === 'receiver-baseline')?.bin;
  const runs: { name: string; bin?: string }[] = [{ name: 'receiver' }];
  if (baselineBin !== undefined) runs.push({ name: 'baseline', bin: baselineBin });
  const rounds = new Map<string, ForwardThroughputResult[]>(runs.map((r) => [r.name, []]));
  for (let round = 1; round <= options.forwardRounds; round++)
    for (const run of runs) {
      process.stderr.write(`bench: forwarding throughput, ${run.name}, round ${round} ...`);
      const result = await runForwardingThroughput(h, backlog, { ...run, name: `${run.name}-${round}` });
      process.stderr.write(
        ` ${Math.round(result.messagesPerSecond)} messages/s, ${fixed(result.cpuUsPerMessage, 0)} µs/message\n`,
      );
      rounds.get(run.name)?.push(result);
    }
  const throughput = medianByCpu(rounds.get('receiver') ?? []);
  const baselineRounds = rounds.get('baseline');
  const baseline = baselineRounds === undefined ? null : medianByCpu(baselineRounds);
  const loadThroughput = loadavg()[0] as number;
  const t = throughput;
  const d = t.destination;
  if (d.unique !== t.messages || t.delivered !== t.messages || t.pending !== 0 || t.dead !== 0)
    errors.push(
      `forwarding throughput: ${t.messages} messages in the backlog, ${d.unique} distinct ones reached the ` +
        `destination; recorded delivered ${t.delivered}, pending ${t.pending}, dead ${t.dead}`,
    );
  if (t.orderViolations > 0)
    errors.push(`forwarding throughput: ${t.orderViolations} arrivals out of proposal order`);
  const seconds = (ms: number) => `${ms / 1000} s`;
  process.stderr.write(
    `bench: forwarding latency, ${options.forwardRate} deliveries/s for ${seconds(options.forwardLatencyMs)} ...`,
  );
  const latency = await runForwardingLatency(h, {
    rate: options.forwardRate,
    warmupMs: options.warmupMs,
    durationMs: options.forwardLatencyMs,
  });
  process.stderr.write(` p50 ${fixed(latency.p50Ms, 1)} ms, p99 ${fixed(latency.p99Ms, 1)} ms\n`);
  const loadAfter = {
    throughput: loadThroughput,
    latency: loadavg()[0] as number,
    cores: availableParallelism(),
  };
  const l = latency;
  if (l.ok200 !== l.sent || l.arrived !== l.ok200)
    errors.push(
      `forwarding latency: ${l.sent} deliveries sent, ${l.ok200} answered 200 (${l.non200} other, ` +
        `${l.socketErrors} socket errors), ${l.arrived} of their event.received reached the destination`,
    );
  if (l.destination.unique !== l.messagesExpected || l.delivered !== l.messagesExpected)
    errors.push(
      `forwarding latency: ${l.messagesExpected} messages expected, ${l.destination.unique} distinct ones ` +
        `reached the destination, ${l.delivered} of ${l.deliveries} deliveries recorded delivered`,
    );
  for (const [name, r] of [
    ['throughput', t.destination],
    ['latency', l.destination],
  ] as const)
    if (r.badSignatures > 0 || r.missingHeaders > 0)
      errors.push(
        `forwarding ${name}: ${r.badSignatures} bad signatures of ${r.verified} checked, ${r.missingHeaders} ` +
          `requests without the Standard Webhooks headers; e.g. ${r.errorSamples.join(' | ')}`,
      );
  return { throughput, baseline, cpuRounds: cpuRounds(rounds), latency, loadAfter };
}

/** The round whose CPU per message is the median (the first round off Linux). */
function medianByCpu(results: ForwardThroughputResult[]): ForwardThroughputResult {
  const m = medianBy(results, (r) => r.cpuUsPerMessage ?? 0);
  if (m === undefined) throw new Error('forwarding throughput: no round ran');
  return m;
}

/** Each build's CPU per message, round by round, as printed: `162 / 171 / 158`. */
function cpuRounds(rounds: Map<string, ForwardThroughputResult[]>): Record<string, string> {
  return Object.fromEntries(
    [...rounds].map(([name, results]) => [
      name,
      results
        .map((r) => `${fixed(r.cpuUsPerMessage, 0)} (warm ${fixed(r.warmCpuUsPerMessage, 0)})`)
        .join(' / '),
    ]),
  );
}

function forwardingReport({
  throughput: t,
  baseline: b,
  cpuRounds,
  latency: l,
  loadAfter: load,
}: ForwardingFigures): string {
  const met = (ok: boolean) => (ok ? 'MET' : 'MISSED');
  const d = t.destination;
  const types = Object.entries(l.destination.types)
    .map(([type, n]) => `${n} ${type}`)
    .join(', ');
  const latencyMet = l.p50Ms <= 20 && l.p99Ms <= 200 && l.arrived === l.sent;
  return [
    `forwarding throughput: ${t.messages} pending messages (event.received + proposal.changed of ${t.events} events, ` +
      `${t.proposals} proposals interleaved; written by the receiver's pipeline at ${fixed(t.events / t.outboxSeconds, 0)} events/s), ` +
      `sent by \`serve\` to one local destination answering 200 at once${t.pinned ? ' (the receiver pinned to core 0, the destination to the others)' : ''}`,
    `  ${d.unique} distinct messages arrived (${d.received} requests) in ${t.sendSeconds.toFixed(2)} s from first to last = ` +
      `${Math.round(t.messagesPerSecond)} messages/s = ${(t.messagesPerSecond / FORWARD_TARGET_RATE).toFixed(2)}× the ${FORWARD_TARGET_RATE} target; ` +
      `receiver CPU ${fixed(t.cpuUsPerMessage, 0)} µs/message; load average ${load.throughput.toFixed(1)} on ${load.cores} cores`,
    `  recorded: ${t.delivered} delivered, ${t.pending} pending, ${t.dead} dead, ${t.attempts} attempts; ` +
      `${t.orderViolations} arrivals out of proposal order; signatures ${d.verified - d.badSignatures}/${d.verified} verified (standardwebhooks)`,
    `  receiver CPU per message, each round: ${Object.entries(cpuRounds)
      .map(([name, cpu]) => `${name} ${cpu} µs`)
      .join('; ')}` +
      (b === null
        ? ''
        : `; baseline (median round) ${Math.round(b.messagesPerSecond)} messages/s, ${fixed(b.cpuUsPerMessage, 0)} µs/message, ` +
          `this build / baseline CPU ${fixed(t.cpuUsPerMessage !== null && b.cpuUsPerMessage !== null ? t.cpuUsPerMessage / b.cpuUsPerMessage : null, 2)}×`),
    `target "forwarding ≥ ${FORWARD_TARGET_RATE} messages/s to one destination": ${met(t.messagesPerSecond >= FORWARD_TARGET_RATE)}`,
    `target "receiver CPU ≤ ${FORWARD_CPU_TARGET_US} µs per forwarded message" (issue 23): ${met(t.cpuUsPerMessage !== null && t.cpuUsPerMessage <= FORWARD_CPU_TARGET_US)}`,
    '',
    `forwarding latency: ${l.rate} signed deliveries/s open-loop for ${l.durationMs / 1000} s (4 events per proposal, ` +
      `50 proposals interleaved), each 200 → its event.received at the destination (one clock)`,
    `  p50 ${fixed(l.p50Ms, 2)} ms, p99 ${fixed(l.p99Ms, 2)} ms, max ${fixed(l.maxMs, 1)} ms, min ${fixed(l.minMs, 2)} ms ` +
      `over ${l.arrived}/${l.sent} deliveries (${l.ok200} answered 200); webhook answer p50 ${fixed(l.answerP50Ms, 2)} ms, ` +
      `p99 ${fixed(l.answerP99Ms, 2)} ms; sender lag ≤ ${l.maxLagMs.toFixed(1)} ms; receiver CPU ${fixed(l.cpuUsPerDelivery, 0)} µs/delivery; ` +
      `load average ${load.latency.toFixed(1)} on ${load.cores} cores`,
    `  destination: ${types || 'nothing'}; recorded ${l.delivered}/${l.deliveries} deliveries delivered; ` +
      `${l.destination.unique}/${l.messagesExpected} expected messages arrived; ` +
      `signatures ${l.destination.verified - l.destination.badSignatures}/${l.destination.verified} verified`,
    `target "forwarding latency p50 ≤ 20 ms, p99 ≤ 200 ms at ${l.rate}/s": ${met(latencyMet)}`,
  ].join('\n');
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
