import { DestinationChild } from './destination';
import type { ForwardingHarness } from './protocol';
import { otlpSink, tracedEnv, tracingLines } from './tracing';
import { RECEIVER_NODE_FLAGS } from './receiver-node';
import { runClusterStarvedRows, runStarvedRows, starvedReport } from './starved';
import { type DrainResult, runPipelineDrain } from './pipeline-drain';
import type { ClusterHarness } from './protocol';
import { clusterReport } from './cluster-report';
import {
  cpuMicros,
  freePort,
  HOST,
  httpGet,
  fixed,
  isAlive,
  medianBy,
  metric,
  metricTotal,
  peakRss,
  pinToCpus,
  stopProcess,
} from '../rigs/harness';
import { consoleReport, runConsoleFigures } from './console';
import { type ErasureSpec, erasureReport, runErasureFigures } from './erasure';
import { prefillDatabase } from './prefill';
import { type PollerIdleResult, runPollerIdle } from './poller-idle';
import { type ChildProcess, fork, spawn } from 'node:child_process';
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
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from '../src/sqlite/sqlite-driver';
import type { LoadMessage, LoadResult, LoadSpec } from './protocol';
import {
  BenchError,
  buildBaseline,
  type Options,
  parseOptions,
  PATH,
  RECEIVER_BIN,
  type Target,
  USAGE,
  withBaseline,
} from './run-options';
import {
  abReport,
  clusterDrainAgainst,
  forwardingReport,
  pipelineAgainst,
  runClusterSection,
  runForwardingFigures,
} from './run-figures';

/**
 * `npm run bench`: the same signed load against a bare node:http server, a verify-only Express 5
 * route and the real receiver (and two informative variants of it), at each concurrency. Every
 * server and the load generator run in child processes of their own; this process only directs
 * them, checks the receiver's database against its 200s, and prints the table.
 */

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
  /** Tracing rows: spans the BatchSpanProcessor dropped (queue full or export failed), warm-up included. */
  spansDropped: number | null;
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

/** SIGTERM: the receiver drains and closes SQLite (and writes its CPU profile, if asked); SIGKILL after 15 s. */
async function stop(child: ChildProcess): Promise<void> {
  await stopProcess(child, 15_000);
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

async function runLoad(spec: LoadSpec & { cpus?: string; onWindow?: () => void }): Promise<LoadResult> {
  const { onWindow, ...load } = spec;
  const child = track(
    fork(join(__dirname, 'load.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  if (spec.cpus !== undefined && child.pid !== undefined) pinToCpus([child.pid], spec.cpus);
  const limitMs = spec.warmupMs + spec.durationMs + 60_000;
  try {
    return await new Promise<LoadResult>((done, fail) => {
      const timer = setTimeout(() => fail(new BenchError('load generator timed out')), limitMs);
      child.on('message', (m: LoadMessage) => {
        if (m.type === 'window') return onWindow?.();
        clearTimeout(timer);
        if (m.type === 'result') done(m.result);
        else fail(new BenchError(`load generator: ${m.message}`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        fail(new BenchError(`load generator exited (${code}) without a result`));
      });
      child.send({ ...load, announceWindow: onWindow !== undefined });
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
  let spansDropped: number | null = null;
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
      if (m?.status !== 200)
        throw new BenchError(`${label}: GET /metrics answered ${m?.status ?? 'nothing'}`);
      const sum = metric(m.body, 'consig_commit_batch_size_sum');
      const count = metric(m.body, 'consig_commit_batch_size_count');
      batchAvg = ratio(sum, count);
      const seconds = ratio(
        metric(m.body, 'consig_commit_seconds_sum'),
        metric(m.body, 'consig_commit_seconds_count'),
      );
      commitAvgMs = seconds === null ? null : seconds * 1000;
      if (server.destination !== null) forwardBacklog = metric(m.body, 'consig_forward_backlog');
      if (target.traced === true) spansDropped = metricTotal(m.body, 'consig_trace_spans_dropped_total') ?? 0;
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
    spansDropped,
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
  const cluster = options.cluster
    ? await runClusterSection(clusterHarness(secret, options), options, errors)
    : null;
  const clusterAb =
    options.cluster && baselineBin !== undefined
      ? await clusterDrainAgainst(clusterHarness(secret, options), baselineBin, options, errors)
      : null;
  const erasureSpec: ErasureSpec = {
    concurrency: 50,
    warmupMs: options.warmupMs,
    windowMs: options.erasureWindowMs,
    events: options.erasureEvents,
    subjectEvents: 10_000,
    subjectProposals: 100,
    findEvents: options.findEvents,
  };
  const erasure = options.erasure
    ? await runErasureFigures(clusterHarness(secret, options), erasureSpec, errors)
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
      `${JSON.stringify({ config, results, summary, pipeline, poller, forwarding, starved, starvedCluster, console: consolePages, cluster: cluster?.figures ?? null, erasure, errors, ...all }, null, 2)}\n`,
    );
  } else {
    // --only cluster or starved: no HTTP rows, so no table of them (what was measured and the errors still print).
    if (results.length > 0 || (cluster === null && erasure === null && !options.starvedOnly))
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
    if (erasure !== null) process.stdout.write(`\n${erasureReport(erasure, erasureSpec)}\n`);
    for (const ab of [pipelineAb, clusterAb])
      if (ab !== null) process.stdout.write(`\n${abReport(ab, options.baseline ?? '')}\n`);
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
