import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

/** `npm run bench`'s targets and options (run.ts), and the --baseline build. */

export const PATH = '/webhooks';
const DIST = resolve(__dirname, '..');
export const RECEIVER_BIN = join(DIST, 'src', 'cli', 'bin.js');
export const ROOT = resolve(DIST, '..');

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

export interface Target {
  name: string;
  kind: Kind;
  description: string;
  env?: Record<string, string>;
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
const SECTIONS: readonly string[] = ['forwarding', 'console', 'cluster', 'starved', 'erasure'];

export const TARGETS: readonly Target[] = [
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
];

export interface Options {
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
  /** --erasure: the erasure figures (issue 45, bench/erasure.ts). */
  erasure: boolean;
  erasureWindowMs: number;
  /** --erasure-events: the log of the erasure row (the person's 10 000 among them). */
  erasureEvents: number;
  /** --find-events: the log `subject find` is timed on (0: that row skipped). */
  findEvents: number;
}

export class BenchError extends Error {}

// ---------------------------------------------------------------------------------------------
// Options

export const USAGE = `usage: npm run bench -- [options]
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
  --erasure <0|1>      the erasure figures (issue 45): answers' p50/p99 under the c=50 load without and
                       with \`subject erase\` of a person's 10 000 events running beside \`serve\`, and
                       \`subject find\` timed on a large log, first run (index pass) and second (default
                       1; with --only, 1 only when "erasure" is named)
  --erasure-window <s> measured seconds of each window of the erasure row (default 15, --quick 5)
  --erasure-events <n> events of the erasure row's log, the person's 10 000 among them (default 100000)
  --find-events <n>    events of the log \`subject find\` is timed on (default 200000, --quick 50000, 0
                       skips that row; 1000000 measured once in docs/benchmark.md)
  --json               print the results as JSON instead of the table`;

export function parseOptions(argv: string[]): Options {
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
      erasure: { type: 'string' },
      'erasure-window': { type: 'string' },
      'erasure-events': { type: 'string' },
      'find-events': { type: 'string' },
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
  for (const name of ['forwarding', 'console', 'cluster', 'erasure'] as const)
    if (values[name] !== undefined && values[name] !== '0' && values[name] !== '1')
      throw new BenchError(`--${name}: expected 0 or 1, got ${values[name]}`);
  let targets = [...TARGETS];
  let forwarding = values.forwarding !== '0';
  let onlyForwarding = false;
  let onlyStarved = false;
  let consoleFigure = values.console !== '0';
  let clusterFigures = values.cluster !== '0';
  let erasureFigures = values.erasure !== '0';
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
    erasureFigures = values.erasure === undefined ? names.includes('erasure') : values.erasure === '1';
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
          (onlyForwarding || onlyStarved || ['console', 'cluster', 'erasure'].some((n) => names.includes(n))
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
          (onlyForwarding || onlyStarved || ['console', 'cluster', 'erasure'].some((n) => names.includes(n))
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
    erasure: erasureFigures,
    erasureWindowMs: seconds('erasure-window', values['erasure-window'], quick ? 5000 : 15_000, 1),
    erasureEvents: count('erasure-events', values['erasure-events'], 100_000, 20_000),
    findEvents: count('find-events', values['find-events'], quick ? 50_000 : 200_000, 0),
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
export function buildBaseline(rev: string, dir: string): string {
  mkdirSync(dir, { recursive: true });
  // migrations-pg/: cluster mode's, since issue 13; rigs/: what bench/ and the tests share, since
  // issue 33 (an older revision has neither).
  const paths = [
    'package.json',
    'tsconfig.json',
    'tsconfig.build.json',
    'src',
    'migrations',
    'migrations-pg',
    'bench',
    'rigs',
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
export function withBaseline(targets: Target[], rev: string, bin: string): Target[] {
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
