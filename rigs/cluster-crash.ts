import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { type LocalPostgres, startLocalPostgres } from './local-postgres';
import { seededRandom } from '../src/domain/random';
import { defaultBin, stablePort } from './harness';
import {
  type ForwardDestination,
  forwardHolder,
  type HolderChange,
  notReceivedAgain,
  resentCopiesBefore,
  startDestination,
  watchHolder,
  writeDestinationsFile,
} from './cluster-forwarding';
import {
  askPostgres,
  buildProposals,
  type CatchUp,
  connect,
  disrupt,
  type Disruptions,
  type Fleet,
  type KillTarget,
  type LoadPlan,
  type LoadState,
  newLoadState,
  orderDependentPaths,
  type Proposal,
  REPLICAS,
  runLoad,
  sampleRelay,
  startReplica,
  stopReplica,
  takeoverMs,
  waitCaughtUp,
  waitForHeartbeats,
  waitForHolder,
  waitForwarded,
} from './cluster-crash-fleet';
import {
  checkPostgres,
  checkSpools,
  type ClusterCrashResult,
  failuresOf,
  formatClusterCrash,
} from './cluster-crash-checks';

export { ANSWER_DEADLINE_MS } from './cluster-crash-fleet';
export { formatClusterCrash };

/**
 * The cluster test of issue 13 with real processes (`node dist/rigs/cluster-crash.js`): a real
 * PostgreSQL (durable settings, not `fast`), three replicas of the built receiver (`serve` with
 * DATABASE_URL, each its own SQLite spool and port), and an in-process load generator sending signed
 * life-cycle deliveries over the three, about 10 % of them re-sends of an already acknowledged
 * delivery to a *different* replica. Mid-run one replica is SIGKILLed and restarted on its spool,
 * and later PostgreSQL itself is restarted with `pg_ctl restart -m immediate`. Every HTTP answer is
 * recorded with its time. At the end the runner waits for every replica's relay backlog to reach 0
 * and for processing to finish, stops the replicas gracefully and checks PostgreSQL against what
 * the replicas answered (see {@link ClusterChecks}).
 *
 * The replicas also forward `proposal.changed` to a destination on loopback (rigs/cluster-forwarding.ts).
 * The replica SIGKILLed is the one holding that destination's lock at the time, and the destination
 * holds its answers until then, so the crash cuts requests it received and the sender never recorded.
 * After the catch-up the runner waits for no delivery pending, then checks the outbox and what the
 * destination received: every message once in the outbox, none lost, order per proposal, signatures.
 *
 * Like rigs/crash-load.ts (the single-process version) it signs bodies itself and imports from src
 * only the pure life-cycle machine, to predict what processing must have recorded, and the local
 * PostgreSQL launcher.
 */

export interface ClusterCrashOptions {
  /** Deliveries to send: first sends, re-sends and bad signatures, each counted once. Default 20 000. */
  deliveries?: number;
  /** Concurrent request loops (each holds one proposal's next event at a time). Default 24. */
  concurrency?: number;
  /** Seeds the workload (proposals, kinds, replica choices, disruption points). Default random. */
  seed?: number;
  /** Share of deliveries that re-send an acknowledged one to another replica. Default 0.10. */
  duplicateRate?: number;
  /** Share of deliveries signed with a wrong secret (must be answered 401, never stored). Default 0.02. */
  badSignatureRate?: number;
  /** Requests per delivery when replicas do not answer (or answer 5xx), each to the next replica. Default 60. */
  maxAttempts?: number;
  /** Bounds the whole run. Default 600 000 ms. */
  timeoutMs?: number;
  /** Bounds the wait for relay backlog 0 and processing done at the end. Default 120 000 ms. */
  catchUpTimeoutMs?: number;
  /** The built receiver entry point. Default dist/src/cli/bin.js. */
  bin?: string;
  /**
   * A running PostgreSQL to use (the caller stops it; it must not be `fast`). The run creates its
   * own database on it. Default: one started for the run and stopped after it.
   */
  postgres?: LocalPostgres;
  /** Keep the run directory (spools, replica logs) and PostgreSQL's directory even when the run passed. */
  keep?: boolean;
  /** LOG_LEVEL of the replicas (their logs are in the run directory). Default 'warn'. */
  replicaLogLevel?: string;
  /** Progress lines. Default: none. */
  log?: (line: string) => void;
}

// The run's result and checks are typed where they are checked; tests import them from here.
export type { ClusterChecks, ClusterCrashResult } from './cluster-crash-checks';

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/** A fresh database on the server for this run; its URL. */
async function createDatabase(pg: LocalPostgres, seed: number): Promise<string> {
  const name = `cluster_crash_${seed}_${Date.now().toString(36)}`;
  const client = await connect(pg.url, Date.now() + 30_000);
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(pg.url);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Answers of signed deliveries whose request overlapped the restart: how many, not 200, not answered. */
function answersDuring(load: LoadState, w: { from: number; to: number } | null) {
  const during = w === null ? [] : load.answers.filter((a) => a.signed && a.start <= w.to && a.end >= w.from);
  return {
    pgRestartRequests: during.length,
    pgRestartNon200: during.filter((a) => a.status !== 0 && a.status !== 200).length,
    pgRestartNoAnswer: during.filter((a) => a.status === 0).length,
  };
}

/** The whole run; resolves with the counts (check `failures`), rejects when it could not run. */
export async function runClusterCrash(options: ClusterCrashOptions = {}): Promise<ClusterCrashResult> {
  const startedAt = Date.now();
  const n = options.deliveries ?? 20_000;
  const concurrency = options.concurrency ?? 24;
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const bin = options.bin ?? defaultBin();
  const log = options.log ?? (() => undefined);
  const deadline = startedAt + (options.timeoutMs ?? 600_000);
  if (!Number.isInteger(n) || n < 10) throw new Error('deliveries: expected an integer ≥ 10');
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error('concurrency: expected an integer ≥ 1');
  if (!existsSync(bin)) throw new Error(`${bin} not found: run \`npm run build\` first`);

  const rng = seededRandom(seed);
  const duplicates = Math.round(n * (options.duplicateRate ?? 0.1));
  const bad = Math.round(n * (options.badSignatureRate ?? 0.02));
  const proposals = buildProposals(n - duplicates - bad, seed, rng);
  const dir = mkdtempSync(join(tmpdir(), 'consig-cluster-crash-'));
  const ownPg = options.postgres === undefined;
  log(`seed ${seed}: ${n} deliveries over 3 replicas, concurrency ${concurrency}, dir ${dir}`);
  const pg = options.postgres ?? (await startLocalPostgres({ keep: true }));
  let result: ClusterCrashResult | undefined;
  const fleet: Fleet = {
    replicas: [],
    bin,
    logLevel: options.replicaLogLevel ?? 'warn',
    databaseUrl: null,
    deadline,
    destinationsFile: null,
    unexpectedExits: [],
    stopping: false,
    log,
  };
  let destination: ForwardDestination | null = null;
  try {
    const databaseUrl = await createDatabase(pg, seed);
    fleet.databaseUrl = databaseUrl;
    log(`PostgreSQL: ${databaseUrl} (log: ${pg.logFile})`);
    destination = await startDestination();
    fleet.destinationsFile = writeDestinationsFile(dir, destination.url);
    log(`forwarding to ${destination.url}`);
    const ports: number[] = [];
    for (const id of REPLICAS) {
      ports.push(await stablePort(ports));
      mkdirSync(join(dir, id));
      const spool = join(dir, id, 'spool.db');
      fleet.replicas.push({
        id,
        port: ports.at(-1) as number,
        spool,
        logPath: join(dir, `${id}.log`),
        proc: null,
        up: false,
      });
    }
    await Promise.all(fleet.replicas.map((r) => startReplica(fleet, r)));
    log(`replicas up on ports ${ports.join(', ')}`);
    // Ready answers before PostgreSQL is reached; the load starts once the cluster runs (a replica
    // holds the destination), so that forwarding is under way when the SIGKILL comes.
    const holder = await waitForHolder(databaseUrl, Math.min(deadline, Date.now() + 60_000));
    log(`${holder} sends to the destination`);
    // Order across replicas holds from each relay's first heartbeat on (docs/cluster-mode.md, "a
    // connected relay before traffic"): a replica PostgreSQL has not heard of yet holds nothing back.
    await waitForHeartbeats(databaseUrl, fleet.replicas.length, Math.min(deadline, Date.now() + 60_000));
    result = await runPhases({
      options,
      n,
      concurrency,
      seed,
      rng,
      proposals,
      duplicates,
      bad,
      fleet,
      pg,
      databaseUrl,
      deadline,
      destination,
    });
    result.durationMs = Date.now() - startedAt;
    result.dir = dir;
    result.failures = failuresOf(result);
    return result;
  } finally {
    fleet.stopping = true;
    for (const r of fleet.replicas) {
      const proc = r.proc;
      if (proc !== null && proc.child.exitCode === null && proc.child.signalCode === null) {
        proc.child.kill('SIGKILL');
        await proc.exited;
      }
    }
    await destination?.close();
    const passed = result !== undefined && result.failures.length === 0 && options.keep !== true;
    if (ownPg) {
      await pg.stop();
      if (passed) rmSync(pg.dir, { recursive: true, force: true });
      else log(`PostgreSQL's directory (server.log) kept: ${pg.dir}`);
    }
    if (passed) rmSync(dir, { recursive: true, force: true });
  }
}

interface PhaseInput {
  options: ClusterCrashOptions;
  n: number;
  concurrency: number;
  seed: number;
  rng: () => number;
  proposals: Proposal[];
  duplicates: number;
  bad: number;
  fleet: Fleet;
  pg: LocalPostgres;
  databaseUrl: string;
  deadline: number;
  /** The forwarding destination. */
  destination: ForwardDestination;
}

/** The load, with one replica SIGKILLed and PostgreSQL restarted meanwhile, and the relay sampled throughout. */
async function loadWithDisruptions(p: PhaseInput, state: LoadState) {
  let aborted = false;
  let loadDone = false;
  const plan: LoadPlan = {
    n: p.n,
    concurrency: p.concurrency,
    maxAttempts: p.options.maxAttempts ?? 60,
    seed: p.seed,
    rng: p.rng,
    proposals: p.proposals,
    duplicates: p.duplicates,
    bad: p.bad,
    replicas: p.fleet.replicas,
    isAborted: () => aborted || Date.now() > p.deadline,
  };
  const live: { pgWindow: { from: number; to: number | null } | null } = { pgWindow: null };
  const sampler = sampleRelay(p.fleet, () => live.pgWindow);
  const holders = watchHolder(() => connect(p.databaseUrl, Date.now() + 2000));
  const stopSampling = async () => {
    await sampler.stop();
    await holders.stop();
  };
  const destination = p.destination;
  const target: KillTarget = {
    holder: () => askPostgres(p.databaseUrl, forwardHolder),
    held: () => destination.held(),
    release: () => destination.release(),
  };
  const loadStart = Date.now();
  const loading = runLoad(plan, state).finally(() => (loadDone = true));
  const disrupting = disrupt(plan, state, p.fleet, p.pg, () => loadDone, live, target).catch((e: unknown) => {
    aborted = true;
    throw e;
  });
  const [, disruptions] = await Promise.all([loading, disrupting]).catch(async (e: unknown) => {
    await stopSampling();
    throw e;
  });
  const loadEnd = Date.now();
  if (loadEnd > p.deadline) {
    await stopSampling();
    throw new Error(
      `load did not finish in time (replica logs in ${dirname(p.fleet.replicas[0]?.logPath ?? '')})`,
    );
  }
  p.fleet.log(
    `load done in ${loadEnd - loadStart} ms: ${state.handedOut} deliveries, ${state.answers.length} requests`,
  );
  if (state.wrongSamples.length > 0) p.fleet.log(`wrong answers, e.g.: ${state.wrongSamples.join('; ')}`);
  return { disruptions, stopSampling, sampler, holders, loadStart, loadMs: loadEnd - loadStart, loadEnd };
}

/** Load, catch-up, graceful stop, checks. */
async function runPhases(p: PhaseInput): Promise<ClusterCrashResult> {
  const { fleet } = p;
  const state = newLoadState();
  const { disruptions, stopSampling, sampler, holders, loadStart, loadMs, loadEnd } =
    await loadWithDisruptions(p, state);
  const pgBack = disruptions.pgWindow?.to ?? loadEnd;
  const from = Math.max(loadEnd, pgBack);
  const catchUpTimeoutMs = p.options.catchUpTimeoutMs ?? 120_000;
  const caught = await waitCaughtUp(
    fleet,
    p.databaseUrl,
    Math.min(p.deadline, Date.now() + catchUpTimeoutMs),
  );
  if (caught.timedOut) fleet.log('catch-up timed out');
  else if (caught.doneAt !== null)
    fleet.log(`caught up ${caught.doneAt - from} ms after max(load end, PostgreSQL back)`);
  const forwardedAt = await forwardCatchUp(p, caught, catchUpTimeoutMs);
  await stopSampling();
  fleet.stopping = true;
  const gracefulExitCodes = await Promise.all(fleet.replicas.map(stopReplica));
  fleet.log(`replicas stopped (${gracefulExitCodes.join(', ')}); checking`);
  const since = (t: number) => (caught.doneAt === null ? null : caught.doneAt - t);
  return {
    seed: p.seed,
    ...loadFigures(state),
    replicaKilled: disruptions.replicaKilled,
    inFlightAtKill: disruptions.inFlightAtKill,
    replicaDownMs: disruptions.replicaDownMs,
    killAtMs: disruptions.killedAt - loadStart,
    pgRestartAtMs: disruptions.pgWindow === null ? null : disruptions.pgWindow.from - loadStart,
    ...forwardFigures(p.destination, disruptions, holders.changes, loadStart),
    forwardCatchUpMs: forwardedAt === null || caught.doneAt === null ? null : forwardedAt - caught.doneAt,
    forwardTimedOut: forwardedAt === null,
    pgRestartMs: disruptions.pgWindow === null ? 0 : disruptions.pgWindow.to - disruptions.pgWindow.from,
    ...answersDuring(state, disruptions.pgWindow),
    maxBacklog: sampler.seen.maxBacklog,
    maxBacklogDuringPgRestart: sampler.seen.maxDuringPg,
    maxLagSeconds: sampler.seen.maxLag,
    relayCatchUpMs: caught.relayAt === null ? null : Math.max(0, caught.relayAt - from),
    catchUpMs: since(from),
    catchUpAfterPgMs: since(pgBack),
    catchUpAfterLoadMs: since(loadEnd),
    loadMs,
    catchUpTimedOut: caught.timedOut,
    openAtTimeout: caught.open ?? [],
    unexpectedExits: fleet.unexpectedExits,
    gracefulExitCodes,
    orderDependentPaths: orderDependentPaths(),
    spoolGaps: checkSpools(fleet.replicas, state),
    pg: await checkPostgres(p.databaseUrl, state, p.destination),
    durationMs: 0,
    dir: '',
    databaseUrl: p.databaseUrl,
    failures: [],
  };
}

/** Once processing is done, waits for no delivery pending; when, or null (timed out, or not waited). */
async function forwardCatchUp(p: PhaseInput, caught: CatchUp, timeoutMs: number): Promise<number | null> {
  if (caught.doneAt === null) return null;
  const at = await waitForwarded(p.databaseUrl, Math.min(p.deadline, Date.now() + timeoutMs));
  p.fleet.log(
    at === null
      ? 'forwarding catch-up timed out'
      : `no delivery pending ${at - caught.doneAt} ms after processing done`,
  );
  return at;
}

/** The SIGKILL as the destination saw it (see ClusterCrashResult); times from the load's start. */
function forwardFigures(
  destination: ForwardDestination,
  d: Disruptions,
  changes: readonly HolderChange[],
  loadStart: number,
) {
  const arrivals = destination.arrivals;
  return {
    forwardHolderKilled: d.killedHolder,
    forwardHolders: changes.map((c) => ({ at: c.at - loadStart, holder: c.holder })),
    forwardTakeoverMs: takeoverMs(changes, d),
    forwardHeldAtKill: d.heldAtKill.length,
    forwardHeldNotResent: notReceivedAgain(arrivals, d.heldAtKill),
    forwardResentBeforePgRestart: resentCopiesBefore(arrivals, d.pgWindow?.from ?? Infinity),
  };
}

/** What the load sent and what it got. */
function loadFigures(state: LoadState) {
  const c = state.counts;
  return {
    sent: c.firstSends + c.duplicatesSent + c.badSignaturesSent,
    firstSends: c.firstSends,
    duplicatesSent: c.duplicatesSent,
    badSignaturesSent: c.badSignaturesSent,
    crossReplicaDuplicates: c.crossReplicaDuplicates,
    requests: state.answers.length,
    networkErrors: c.networkErrors,
    serverErrors: c.serverErrors,
    ok200: c.accepted + c.duplicate,
    accepted: c.accepted,
    duplicateAnswers: c.duplicate,
    rejected401: c.r401,
    unanswered: c.unanswered,
    wrongAnswers: c.wrong,
    maxAnswerMs: state.answers.reduce((m, a) => (a.status === 0 ? m : Math.max(m, a.end - a.start)), 0),
    ok200ByReplica: Object.fromEntries(REPLICAS.map((id, i) => [id, state.ok200ByReplica[i] ?? 0])),
  };
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      deliveries: { type: 'string' },
      concurrency: { type: 'string' },
      seed: { type: 'string' },
      'log-level': { type: 'string' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: node dist/rigs/cluster-crash.js [--deliveries 20000] [--concurrency 24] [--seed N] [--keep] [--log-level info]\n',
    );
    return;
  }
  const int = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) throw new Error(`--${name}: expected a non-negative integer, got "${v}"`);
    return Number(v);
  };
  const result = await runClusterCrash({
    deliveries: int('deliveries', values.deliveries),
    concurrency: int('concurrency', values.concurrency),
    seed: int('seed', values.seed),
    replicaLogLevel: values['log-level'],
    keep: values.keep === true,
    log: (line) => process.stderr.write(`cluster-crash: ${line}\n`),
  });
  process.stdout.write(`${formatClusterCrash(result)}\n`);
  if (result.failures.length > 0) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(
      `cluster-crash: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 2;
  });
}
