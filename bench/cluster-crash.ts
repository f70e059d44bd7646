import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from 'pg';
import Database from '../src/store/sqlite-driver';
import { type LocalPostgres, startLocalPostgres } from './local-postgres';
import type { Evento } from '../src/domain/catalogue';
import { replay } from '../src/domain/lifecycle';
import { seededRandom } from '../src/domain/random';
import {
  CPFS,
  lifeCycleBody,
  PATHS,
  postWebhook,
  type ProposalData,
  seededProposal,
  signatureOf,
  WRONG_SECRET,
} from './deliveries';
import {
  defaultBin,
  HOST,
  httpGet,
  killProcess,
  logTail,
  metric,
  type Proc,
  sleep,
  spawnServe,
  stablePort,
  startOnPort,
  stopProcess,
} from './harness';
import {
  checkForwarding,
  FORWARD_DESTINATION,
  type ForwardChecks,
  type ForwardDestination,
  forwardHolder,
  type HolderChange,
  notReceivedAgain,
  pendingDeliveries,
  resentCopiesBefore,
  startDestination,
  watchHolder,
  writeDestinationsFile,
} from './cluster-forwarding';

/**
 * The cluster test of issue 13 with real processes (`node dist/bench/cluster-crash.js`): a real
 * PostgreSQL (durable settings, not `fast`), three replicas of the built receiver (`serve` with
 * DATABASE_URL, each its own SQLite spool and port), and an in-process load generator sending signed
 * life-cycle deliveries over the three, about 10 % of them re-sends of an already acknowledged
 * delivery to a *different* replica. Mid-run one replica is SIGKILLed and restarted on its spool,
 * and later PostgreSQL itself is restarted with `pg_ctl restart -m immediate`. Every HTTP answer is
 * recorded with its time. At the end the runner waits for every replica's relay backlog to reach 0
 * and for processing to finish, stops the replicas gracefully and checks PostgreSQL against what
 * the replicas answered (see {@link ClusterChecks}).
 *
 * The replicas also forward `proposal.changed` to a destination on loopback (bench/cluster-forwarding.ts).
 * The replica SIGKILLed is the one holding that destination's lock at the time, and the destination
 * holds its answers until then, so the crash cuts requests it received and the sender never recorded.
 * After the catch-up the runner waits for no delivery pending, then checks the outbox and what the
 * destination received: every message once in the outbox, none lost, order per proposal, signatures.
 *
 * Like bench/crash-load.ts (the single-process version) it signs bodies itself and imports from src
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
  /**
   * false runs the replicas without DATABASE_URL (three independent SQLite receivers): a check of
   * the harness itself; PostgreSQL is still restarted, but nothing is checked in it. Default true.
   */
  cluster?: boolean;
  /** Keep the run directory (spools, replica logs) and PostgreSQL's directory even when the run passed. */
  keep?: boolean;
  /** LOG_LEVEL of the replicas (their logs are in the run directory). Default 'warn'. */
  replicaLogLevel?: string;
  /** Progress lines. Default: none. */
  log?: (line: string) => void;
}

/** What PostgreSQL holds after the run, checked against the answers (cluster mode only). */
export interface ClusterChecks extends ForwardChecks {
  /** Distinct webhook_ids acknowledged with a 200 by any replica. */
  acknowledgedKeys: number;
  /** Events whose dedup_key is one of those (must equal acknowledgedKeys). */
  storedAcknowledged: number;
  /** Acknowledged, no event (must be 0). */
  lost: number;
  /** Events of a delivery that never got a 200 (its answers lost, retries exhausted): allowed. */
  storedWithoutAck: number;
  /** Events for a bad signature, or for a key this run never sent (must be 0). */
  badSignaturesStored: number;
  unexpectedStored: number;
  /** Events whose evento or nu_proposta is not what was sent under that webhook_id (must be 0). */
  eventMismatches: number;
  /** Rows in events. */
  events: number;
  /** sum(events.duplicates): further copies stored by any replica. */
  duplicatesSum: number;
  /** Σ (200s of a webhook_id − 1): copies acknowledged beyond the first. The lower bound of duplicatesSum. */
  ackedExtraCopies: number;
  /** Requests of signed deliveries that got no answer (each may have been stored): the slack above. */
  unansweredSignedRequests: number;
  /** Events whose duplicates + 1 differs from their 200-answered `deliveries` rows (must be 0). */
  duplicateRowMismatches: number;
  /** Life-cycle events not 'done' (must be 0). */
  notDone: number;
  /** Life-cycle events without exactly one proposal_transitions row (must be 0). */
  transitionsNotOne: number;
  /** Transition rows − distinct event_ids, plus events whose last error is a unique violation (must be 0). */
  processedTwice: number;
  /** Transition rows whose event is not one of this run's life-cycle events (must be 0). */
  strayTransitions: number;
  transitions: number;
  /** Events that needed more than one handler run, or hold an error: information (a kick cut by the restart). */
  retriedEvents: number;
  proposals: number;
  /** Proposals whose transitions, by id, do not have strictly increasing event_id (must be 0). */
  orderViolations: number;
  /** Proposals whose transitions or status differ from replay() of their events in event-id order (must be 0). */
  stateMismatches: number;
  /** Proposals whose status differs from replay() of their events in the order they were sent (must be 0). */
  endStateMismatches: number;
  /** Proposals rows without events, or life-cycle proposals without a row (must be 0). */
  proposalRowMismatches: number;
  /** Proposals whose event ids in PostgreSQL are not in the order they were sent (arrival reordered by the relays). */
  proposalsReordered: number;
  /** Transitions recorded with applied = false (late or repeated). */
  notApplied: number;
  /** `deliveries` rows per replica. */
  deliveriesByReplica: Record<string, number>;
  /**
   * Replicas whose 200-answered `deliveries` rows in PostgreSQL are fewer than the 200s they gave,
   * or more than those plus their unanswered requests (must be none).
   */
  relayGaps: string[];
}

export interface ClusterCrashResult {
  seed: number;
  mode: 'cluster' | 'sqlite';
  sent: number;
  firstSends: number;
  duplicatesSent: number;
  badSignaturesSent: number;
  /** Re-sends answered 200 by a replica that had not received any earlier copy of that delivery. */
  crossReplicaDuplicates: number;
  /** HTTP requests, retries included. */
  requests: number;
  networkErrors: number;
  serverErrors: number;
  ok200: number;
  accepted: number;
  duplicateAnswers: number;
  rejected401: number;
  /** Deliveries never answered within maxAttempts (must be 0). */
  unanswered: number;
  /** Answers other than 200 accepted/duplicate (signed) or 401 (bad signature) (must be 0). */
  wrongAnswers: number;
  /** Slowest answer, request start to end of the response (the service waits 5 s: must be below). */
  maxAnswerMs: number;
  /** 200s per replica. */
  ok200ByReplica: Record<string, number>;
  replicaKilled: string;
  /** Requests in flight to it at the SIGKILL. */
  inFlightAtKill: number;
  /** SIGKILL to ready again. */
  replicaDownMs: number;
  /** The SIGKILL and the PostgreSQL restart, in ms from the load's start. */
  killAtMs: number;
  pgRestartAtMs: number | null;
  /** The replica SIGKILLed held the destination's lock then (cluster mode: must be true). */
  forwardHolderKilled: boolean;
  /** Who held the destination's lock, each change with its time from the load's start (null: nobody). */
  forwardHolders: HolderChange[];
  /** From the SIGKILL of the holder to another holder (or the restarted one) seen. */
  forwardTakeoverMs: number | null;
  /**
   * Requests the destination held unanswered when their sender was SIGKILLed (in flight there; must
   * be > 0), and of their webhook-ids those not received again afterwards (must be 0: at least once).
   */
  forwardHeldAtKill: number;
  forwardHeldNotResent: number;
  /** Copies of a webhook-id received again before the PostgreSQL restart (so after the SIGKILL of the sender). */
  forwardResentBeforePgRestart: number;
  /** From processing done to no delivery pending; the wait gave up (must be false). */
  forwardCatchUpMs: number | null;
  forwardTimedOut: boolean;
  /** The restart's pg_ctl call, start to end (down, WAL replay, accepting connections again). */
  pgRestartMs: number;
  /** Requests of signed deliveries overlapping the PostgreSQL restart. */
  pgRestartRequests: number;
  /** Of those, answered anything but 200 (must be 0), or not answered at all (must be 0). */
  pgRestartNon200: number;
  pgRestartNoAnswer: number;
  /** Highest sum of consig_relay_backlog over the replicas seen while sampling every 250 ms, and during the restart. */
  maxBacklog: number | null;
  maxBacklogDuringPgRestart: number | null;
  maxLagSeconds: number | null;
  /** From max(load end, PostgreSQL back) to every replica's backlog 0; to processing done too. */
  relayCatchUpMs: number | null;
  catchUpMs: number | null;
  /** From PostgreSQL back, and from the load's end, to caught up (relay and processing). */
  catchUpAfterPgMs: number | null;
  catchUpAfterLoadMs: number | null;
  loadMs: number;
  /** The end-of-state query gave up waiting (must be false). */
  catchUpTimedOut: boolean;
  /** When it did: the first events still open, with every kick of their keys. */
  openAtTimeout: string[];
  /** Replica exits nobody asked for (must be none). */
  unexpectedExits: string[];
  /** Exit codes of the final SIGTERMs (all must be 0). */
  gracefulExitCodes: (number | null)[];
  /** Permutations of a workload path's events that end elsewhere than its life order (must be 0). */
  orderDependentPaths: number;
  /**
   * Each replica's own spool (SQLite) against its answers: webhook_ids it answered 200 that its
   * `events` lacks, and 200-answered `deliveries` rows outside [its 200s, + its unanswered requests]
   * (must be none). Checks the spool and the harness's own bookkeeping, in both modes.
   */
  spoolGaps: string[];
  pg: ClusterChecks | null;
  durationMs: number;
  dir: string;
  databaseUrl: string;
  /** The checks that failed, by name; empty when the run passed. */
  failures: string[];
}

const SECRET = 'cluster-crash-secret-0123456789';
const REPLICAS = ['r1', 'r2', 'r3'] as const;
/** The service gives up on an answer after 5 s (interface §6.1). */
export const ANSWER_DEADLINE_MS = 5000;

/**
 * Relays of different replicas commit in any order, so PostgreSQL may number a proposal's events
 * out of the order they were sent; its end status is then still the life order's only if no
 * permutation of (a subset of) its events ends elsewhere. That holds for these paths — non-final
 * events keep the highest rank, and their final events come at or after every other event's stage —
 * but not for every set: `proposta.negada` after `averbacao.solicitada` is `late`, before it final.
 * Checked here from the pure machine, so a change to the rules that breaks it fails the run.
 */
function orderDependentPaths(): number {
  const permutations = (xs: readonly Evento[]): Evento[][] =>
    xs.length <= 1
      ? [[...xs]]
      : xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((p) => [x, ...p]));
  let bad = 0;
  for (const { eventos } of PATHS) {
    for (let mask = 1; mask < 1 << eventos.length; mask++) {
      const subset = eventos.filter((_, i) => (mask & (1 << i)) !== 0);
      const expected = replay(subset).status;
      if (permutations(subset).some((p) => replay(p).status !== expected)) bad += 1;
    }
  }
  return bad;
}

interface Proposal extends ProposalData {
  eventos: readonly Evento[];
  /** The next event to hand out. */
  next: number;
  /** One of its events is being delivered: the next waits for it (the service sends in order). */
  busy: boolean;
}

/** Proposals whose events add up to exactly `events` first sends (the last one cut short). */
function buildProposals(events: number, seed: number, rng: () => number): Proposal[] {
  const out: Proposal[] = [];
  const nuBase = 20_000_000 + (seed % 1000) * 100_000;
  for (let left = events; left > 0;) {
    const p = seededProposal(nuBase + out.length + 1, rng);
    const eventos = p.eventos.slice(0, left);
    left -= eventos.length;
    out.push({ ...p, eventos, next: 0, busy: false });
  }
  return out;
}

/** One webhook_id: what was sent under it and what its requests got. */
interface KeyRecord {
  key: string;
  bad: boolean;
  proposal: Proposal;
  step: number;
  /** Replicas that were sent a copy (answered or not). */
  sentTo: Set<number>;
  /** Replicas that answered a copy 200, in order; the `tentativa` of the first acknowledged copy. */
  ackedBy: number[];
  ackedTentativa: number;
  /** Requests that got no HTTP answer (stored or not, nobody knows). */
  unanswered: number;
}

const bodyOf = (rec: KeyRecord, tentativa: number): Buffer =>
  lifeCycleBody(rec.proposal, rec.proposal.eventos[rec.step] as Evento, rec.step, rec.key, tentativa);

// ---------------------------------------------------------------------------------------------
// Replica processes
// ---------------------------------------------------------------------------------------------

interface ReplicaProcess extends Proc {
  /** Set before the runner kills or stops it, so its exit is not taken for a crash. */
  expected: boolean;
}

interface Replica {
  id: string;
  port: number;
  spool: string;
  logPath: string;
  proc: ReplicaProcess | null;
  /** Up and answering /readyz (false while killed or restarting). */
  up: boolean;
}

interface Fleet {
  replicas: Replica[];
  bin: string;
  logLevel: string;
  databaseUrl: string | null;
  /** DESTINATIONS_FILE of every replica (cluster mode), or null. */
  destinationsFile: string | null;
  deadline: number;
  /** Exits nobody asked for, and whether the runner is shutting them down. */
  unexpectedExits: string[];
  stopping: boolean;
  log: (line: string) => void;
}

function spawnReplica(fleet: Fleet, r: Replica): ReplicaProcess {
  const env = {
    HOST,
    PORT: String(r.port),
    DATABASE_PATH: r.spool,
    WEBHOOK_SECRETS: SECRET,
    LOG_LEVEL: fleet.logLevel,
    REPLICA_ID: r.id,
    // The replica SIGKILLed is back within this (5 s by default, and its restart took 5.3 s on a
    // loaded machine): it is waited for, not dropped, so its spool's deliveries are processed in
    // order with the others' (docs/cluster.md §10).
    CLUSTER_HOLDBACK_MAX_MS: '30000',
    ...(fleet.databaseUrl === null ? {} : { DATABASE_URL: fleet.databaseUrl }),
    ...(fleet.destinationsFile === null ? {} : { DESTINATIONS_FILE: fleet.destinationsFile }),
  };
  const proc: ReplicaProcess = { ...spawnServe(fleet.bin, env, r.logPath), expected: false };
  r.proc = proc;
  void proc.exited.then(({ code, signal }) => {
    if (r.proc === proc) r.up = false;
    if (proc.expected || fleet.stopping) return;
    fleet.unexpectedExits.push(`${r.id} exited (${code ?? signal}) on its own`);
    fleet.log(`${r.id} exited (${code ?? signal}) on its own; restarting it:\n${logTail(r.logPath, 1500)}`);
    if (r.proc === proc) void startReplica(fleet, r).catch((e: unknown) => fleet.log(String(e)));
  });
  return proc;
}

/** Starts the replica on its port and resolves once /readyz answers 200. */
async function startReplica(fleet: Fleet, r: Replica): Promise<void> {
  const timeoutMs = Math.max(1000, Math.min(fleet.deadline - Date.now(), 60_000));
  await startOnPort(() => spawnReplica(fleet, r), r.port, r.logPath, timeoutMs).catch((e: unknown) => {
    throw new Error(`${r.id}: ${(e as Error).message}`);
  });
  r.up = true;
}

async function killReplica(r: Replica): Promise<void> {
  const proc = r.proc;
  if (proc === null) throw new Error(`${r.id} is not running`);
  proc.expected = true;
  r.up = false;
  await killProcess(proc, r.id);
}

/** SIGTERM, then SIGKILL after 30 s; the exit code (null when it had to be killed). */
async function stopReplica(r: Replica): Promise<number | null> {
  const proc = r.proc;
  if (proc === null || proc.child.exitCode !== null || proc.child.signalCode !== null) return null;
  proc.expected = true;
  const code = await stopProcess(proc.child);
  r.up = false;
  return code;
}

/** `consig_relay_backlog` and `consig_relay_lag_seconds` of one replica; null when it does not answer or lacks them. */
async function relayGauges(r: Replica): Promise<{ backlog: number; lag: number } | null> {
  const res = await httpGet(r.port, '/metrics', 3000);
  if (res === null || res.status !== 200) return null;
  const backlog = metric(res.body, 'consig_relay_backlog');
  const lag = metric(res.body, 'consig_relay_lag_seconds');
  return backlog === null || lag === null ? null : { backlog, lag };
}

// ---------------------------------------------------------------------------------------------
// The load
// ---------------------------------------------------------------------------------------------

/** One HTTP request and its answer (status 0: none: refused, reset or timed out). */
interface AnswerRecord {
  replica: number;
  signed: boolean;
  start: number;
  end: number;
  status: number;
}

interface LoadState {
  keys: Map<string, KeyRecord>;
  answers: AnswerRecord[];
  counts: {
    firstSends: number;
    duplicatesSent: number;
    badSignaturesSent: number;
    crossReplicaDuplicates: number;
    networkErrors: number;
    serverErrors: number;
    accepted: number;
    duplicate: number;
    r401: number;
    unanswered: number;
    wrong: number;
  };
  ok200ByReplica: number[];
  unansweredByReplica: number[];
  inFlightByReplica: number[];
  /** Deliveries handed out, and 200s since the last disruption (the next waits for fresh traffic). */
  handedOut: number;
  fresh200: number;
  wrongSamples: string[];
  /** While set, no delivery is handed out (the load waits for a disruption's condition). */
  paused: Promise<void> | null;
  /**
   * Set: once this many deliveries are handed out and `fresh` 200s came since the last disruption,
   * the load waits until the next disruption begins (so that part of it overlaps that disruption).
   */
  holdAt: { handedOut: number; fresh: number } | null;
}

type Job = { kind: 'first' | 'duplicate' | 'bad'; rec: KeyRecord; replica: number; tentativa: number };

interface LoadPlan {
  n: number;
  concurrency: number;
  maxAttempts: number;
  seed: number;
  rng: () => number;
  proposals: Proposal[];
  duplicates: number;
  bad: number;
  replicas: Replica[];
  isAborted: () => boolean;
}

function newLoadState(): LoadState {
  return {
    keys: new Map(),
    answers: [],
    counts: {
      firstSends: 0,
      duplicatesSent: 0,
      badSignaturesSent: 0,
      crossReplicaDuplicates: 0,
      networkErrors: 0,
      serverErrors: 0,
      accepted: 0,
      duplicate: 0,
      r401: 0,
      unanswered: 0,
      wrong: 0,
    },
    ok200ByReplica: REPLICAS.map(() => 0),
    unansweredByReplica: REPLICAS.map(() => 0),
    inFlightByReplica: REPLICAS.map(() => 0),
    handedOut: 0,
    fresh200: 0,
    wrongSamples: [],
    paused: null,
    holdAt: null,
  };
}

/**
 * Runs the load: `concurrency` loops, each taking the next job (a proposal's next event once its
 * previous one is answered, a re-send of an acknowledged delivery to another replica, or a bad
 * signature) and delivering it, moving to the next replica when one does not answer.
 */
async function runLoad(plan: LoadPlan, state: LoadState): Promise<void> {
  const agents = plan.replicas.map(() => new Agent({ keepAlive: true, maxSockets: plan.concurrency }));
  const jobs = jobSource(plan, state);
  const loop = async () => {
    for (let job = await jobs.next(); job !== null; job = await jobs.next()) {
      await deliver(plan, state, agents, job);
      jobs.finished(job);
    }
  };
  try {
    await Promise.all(Array.from({ length: plan.concurrency }, loop));
  } finally {
    for (const a of agents) a.destroy();
  }
}

/** Hands out jobs in a seeded mix of kinds; waits when every open proposal has an event in flight. */
function jobSource(plan: LoadPlan, state: LoadState) {
  const { rng } = plan;
  let firstsLeft = plan.proposals.reduce((s, p) => s + p.eventos.length, 0);
  let dupLeft = plan.duplicates;
  let badLeft = plan.bad;
  let nextProposal = 0;
  const open: Proposal[] = [];
  const acked: KeyRecord[] = [];
  let seq = 0;
  let waiters: (() => void)[] = [];
  const refill = () => {
    while (open.length < Math.max(8, plan.concurrency * 2) && nextProposal < plan.proposals.length)
      open.push(plan.proposals[nextProposal++] as Proposal);
  };
  refill();
  const record = (proposal: Proposal, step: number, bad: boolean): KeyRecord => {
    seq += 1;
    const key = `wh_cc_${plan.seed}_${bad ? 'bad_' : ''}${String(seq).padStart(7, '0')}`;
    const rec: KeyRecord = {
      key,
      bad,
      proposal,
      step,
      sentTo: new Set(),
      ackedBy: [],
      ackedTentativa: 1,
      unanswered: 0,
    };
    state.keys.set(key, rec);
    return rec;
  };
  const pickReplica = () => Math.floor(rng() * plan.replicas.length);
  const first = (): Job | null => {
    const ready = open.filter((p) => !p.busy);
    if (ready.length === 0) return null;
    const p = ready[Math.floor(rng() * ready.length)] as Proposal;
    const rec = record(p, p.next, false);
    p.next += 1;
    p.busy = true;
    firstsLeft -= 1;
    state.counts.firstSends += 1;
    return { kind: 'first', rec, replica: pickReplica(), tentativa: 1 };
  };
  const duplicate = (): Job => {
    // A recent acknowledged delivery, to a replica that has no copy of it (or at least not the one that acknowledged it).
    const rec = acked[acked.length - 1 - Math.floor(rng() * Math.min(acked.length, 2000))] as KeyRecord;
    const fresh = plan.replicas.map((_, i) => i).filter((i) => !rec.sentTo.has(i));
    const others = plan.replicas.map((_, i) => i).filter((i) => i !== rec.ackedBy[0]);
    const choice = fresh.length > 0 ? fresh : others;
    dupLeft -= 1;
    state.counts.duplicatesSent += 1;
    return {
      kind: 'duplicate',
      rec,
      replica: choice[Math.floor(rng() * choice.length)] as number,
      tentativa: rec.ackedTentativa,
    };
  };
  const bad = (): Job => {
    const p = open[Math.floor(rng() * open.length)] ?? (plan.proposals[0] as Proposal);
    badLeft -= 1;
    state.counts.badSignaturesSent += 1;
    return {
      kind: 'bad',
      rec: record(p, Math.min(p.next, p.eventos.length - 1), true),
      replica: pickReplica(),
      tentativa: 1,
    };
  };
  const pick = (): Job | null => {
    const canDup = dupLeft > 0 && acked.length > 0;
    const r = rng() * (firstsLeft + badLeft + (canDup ? dupLeft : 0));
    if (r < firstsLeft) return first() ?? (canDup ? duplicate() : badLeft > 0 ? bad() : null);
    if (r < firstsLeft + badLeft) return bad();
    return duplicate();
  };
  return {
    async next(): Promise<Job | null> {
      while (!plan.isAborted() && firstsLeft + dupLeft + badLeft > 0) {
        if (state.paused !== null) {
          await state.paused;
          continue;
        }
        const hold = state.holdAt;
        if (hold !== null && state.handedOut >= hold.handedOut && state.fresh200 >= hold.fresh) {
          await sleep(2);
          continue;
        }
        const job = pick();
        if (job !== null) {
          state.handedOut += 1;
          return job;
        }
        await new Promise<void>((wake) => waiters.push(wake));
      }
      return null;
    },
    finished(job: Job): void {
      if (job.kind === 'first') {
        const p = job.rec.proposal;
        p.busy = false;
        if (p.next >= p.eventos.length) {
          open.splice(open.indexOf(p), 1);
          refill();
        }
        if (job.rec.ackedBy.length > 0) acked.push(job.rec);
      }
      const w = waiters;
      waiters = [];
      for (const wake of w) wake();
    },
  };
}

/** Delivers one job: the chosen replica first, then the next one after each failure, with backoff. */
async function deliver(plan: LoadPlan, state: LoadState, agents: Agent[], job: Job): Promise<void> {
  const { rec } = job;
  const copiesBefore = new Set(rec.sentTo);
  let replica = job.replica;
  for (let attempt = 1; attempt <= plan.maxAttempts && !plan.isAborted(); attempt++) {
    const tentativa = job.tentativa + attempt - 1;
    const body = bodyOf(rec, tentativa);
    const r = plan.replicas[replica] as Replica;
    rec.sentTo.add(replica);
    state.inFlightByReplica[replica] = (state.inFlightByReplica[replica] ?? 0) + 1;
    const start = Date.now();
    const a = await postWebhook(
      agents[replica] as Agent,
      r.port,
      body,
      signatureOf(rec.bad ? WRONG_SECRET : SECRET, body),
    );
    state.inFlightByReplica[replica] = (state.inFlightByReplica[replica] ?? 1) - 1;
    state.answers.push({ replica, signed: !rec.bad, start, end: Date.now(), status: a?.status ?? 0 });
    if (a === null || a.status >= 500) {
      if (a === null) {
        state.counts.networkErrors += 1;
        rec.unanswered += 1;
        state.unansweredByReplica[replica] = (state.unansweredByReplica[replica] ?? 0) + 1;
      } else state.counts.serverErrors += 1;
      // The service's retry: back off, then the next replica (a load balancer takes the dead one out).
      replica = (replica + 1) % plan.replicas.length;
      await sleep(Math.min(20 * 2 ** (attempt - 1), 500) * (0.5 + plan.rng() * 0.5));
      continue;
    }
    classify(state, job, replica, tentativa, copiesBefore, a);
    return;
  }
  state.counts.unanswered += 1;
}

function classify(
  state: LoadState,
  job: Job,
  replica: number,
  tentativa: number,
  copiesBefore: ReadonlySet<number>,
  a: { status: number; outcome: string },
): void {
  const { rec } = job;
  if (!rec.bad && a.status === 200 && (a.outcome === 'accepted' || a.outcome === 'duplicate')) {
    if (a.outcome === 'accepted') state.counts.accepted += 1;
    else state.counts.duplicate += 1;
    if (rec.ackedBy.length === 0) rec.ackedTentativa = tentativa;
    rec.ackedBy.push(replica);
    state.ok200ByReplica[replica] = (state.ok200ByReplica[replica] ?? 0) + 1;
    state.fresh200 += 1;
    if (job.kind === 'duplicate' && !copiesBefore.has(replica)) state.counts.crossReplicaDuplicates += 1;
  } else if (rec.bad && a.status === 401 && a.outcome === 'invalid_signature') {
    state.counts.r401 += 1;
  } else {
    state.counts.wrong += 1;
    if (a.status === 200) rec.ackedBy.push(replica);
    if (state.wrongSamples.length < 5)
      state.wrongSamples.push(`${job.kind} ${rec.key} at ${REPLICAS[replica]}: ${a.status} ${a.outcome}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Disruptions, relay sampling, catch-up
// ---------------------------------------------------------------------------------------------

interface Disruptions {
  replicaKilled: string;
  killedAt: number;
  /** The replica killed held the destination's lock (it was chosen for that). */
  killedHolder: boolean;
  /** webhook-ids the destination held unanswered at the SIGKILL (in flight at the killed sender). */
  heldAtKill: string[];
  inFlightAtKill: number;
  replicaDownMs: number;
  pgWindow: { from: number; to: number } | null;
}

/** In cluster mode, what the SIGKILL aims at: the replica sending the destination, with requests in flight. */
interface KillTarget {
  /** The replica holding the destination's lock now (null: none, or PostgreSQL did not answer). */
  holder(): Promise<string | null>;
  /** The destination's requests received and held unanswered (see ForwardDestination). */
  held(): number;
  /** Answers them (after the SIGKILL); their webhook-ids. */
  release(): string[];
}

/**
 * One replica SIGKILLed and restarted at a seeded point of the load, then — once it is back and
 * fresh 200s came in — PostgreSQL restarted with `-m immediate` at a later point. With a `target`
 * (cluster mode) the replica killed is the destination's sender, once the destination holds at
 * least one of its requests unanswered (after a fifth of the load more, the load pauses until it does, at most 30 s), so that the kill
 * cuts messages in flight; else a seeded one. The load past the PostgreSQL restart's point (at least
 * 30 %) is held until the restart begins, so that requests overlap it however fast the load runs.
 */
async function disrupt(
  plan: LoadPlan,
  state: LoadState,
  fleet: Fleet,
  pg: LocalPostgres,
  isLoadDone: () => boolean,
  live: { pgWindow: { from: number; to: number | null } | null },
  target: KillTarget | null,
): Promise<Disruptions> {
  const { rng, n } = plan;
  const killAt = Math.floor(n * (0.2 + rng() * 0.15));
  const pgAt = Math.floor(n * (0.55 + rng() * 0.15));
  const minFresh = Math.max(10, Math.min(200, Math.floor(n / 50)));
  const drawn = fleet.replicas[Math.floor(rng() * fleet.replicas.length)] as Replica;
  const waitFor = async (at: number) => {
    while (!isLoadDone() && !plan.isAborted() && (state.handedOut < at || state.fresh200 < minFresh))
      await sleep(2);
  };

  await waitFor(killAt);
  // The sender must hold requests at the destination when the SIGKILL comes. Processing trails the
  // answers by the hold-back window (the slowest relay), by seconds on a loaded machine; so after a
  // fifth of the load more the load pauses (at most 30 s) until the destination holds one: the kill
  // always cuts messages in flight, whatever the machine's speed, and still before the PostgreSQL
  // restart (pgAt ≥ 0.55 n).
  const killBy = killAt + Math.floor(n * 0.2);
  const holding = () => target === null || target.held() > 0 || isLoadDone() || plan.isAborted();
  while (!holding() && state.handedOut < killBy) await sleep(2);
  if (!holding()) {
    let resume = () => {};
    state.paused = new Promise<void>((r) => (resume = r));
    const pausedAt = Date.now();
    while (!holding() && Date.now() - pausedAt < 30_000) await sleep(5);
    fleet.log(
      `load paused ${Date.now() - pausedAt} ms at ${state.handedOut} handed out for the destination to hold a request`,
    );
    state.paused = null;
    resume();
  }
  const holder = target === null ? null : await target.holder().catch(() => null);
  const victim = fleet.replicas.find((r) => r.id === holder) ?? drawn;
  const inFlightAtKill = state.inFlightByReplica[fleet.replicas.indexOf(victim)] ?? 0;
  // The rest of the load (at least 30 %) waits for the PostgreSQL restart to begin, so that requests
  // overlap it on any machine: a fast load would otherwise be handed out while the victim restarts.
  // Past pgAt the load waits for the victim to be back, then for fresh 200s, then for the restart.
  state.holdAt = { handedOut: pgAt, fresh: minFresh };
  const killedAt = Date.now();
  await killReplica(victim);
  const heldAtKill = target?.release() ?? [];
  fleet.log(
    `SIGKILL ${victim.id}${holder === victim.id ? ' (the destination’s sender)' : ''} at ${state.handedOut} handed out (${inFlightAtKill} in flight to it); restarting`,
  );
  await sleep(300);
  await startReplica(fleet, victim);
  const replicaDownMs = Date.now() - killedAt;
  fleet.log(`${victim.id} ready again after ${replicaDownMs} ms`);
  state.fresh200 = 0;

  await waitFor(pgAt);
  const from = Date.now();
  live.pgWindow = { from, to: null };
  state.holdAt = null;
  fleet.log(`PostgreSQL restart -m immediate at ${state.handedOut} handed out`);
  await pg.restart({ mode: 'immediate' });
  const to = Date.now();
  live.pgWindow = { from, to };
  fleet.log(`PostgreSQL back after ${to - from} ms`);
  return {
    replicaKilled: victim.id,
    killedAt,
    killedHolder: holder === victim.id,
    heldAtKill,
    inFlightAtKill,
    replicaDownMs,
    pgWindow: { from, to },
  };
}

/** Samples the replicas' relay gauges every 250 ms until stopped: the highest backlog and lag seen. */
function sampleRelay(fleet: Fleet, pgWindow: () => { from: number; to: number | null } | null) {
  const seen = {
    maxBacklog: null as number | null,
    maxDuringPg: null as number | null,
    maxLag: null as number | null,
  };
  let running = true;
  const done = (async () => {
    while (running) {
      const at = Date.now();
      const gauges = await Promise.all(fleet.replicas.map((r) => (r.up ? relayGauges(r) : null)));
      const got = gauges.filter((g) => g !== null);
      if (got.length > 0) {
        const backlog = got.reduce((s, g) => s + g.backlog, 0);
        const lag = Math.max(...got.map((g) => g.lag));
        seen.maxBacklog = Math.max(seen.maxBacklog ?? 0, backlog);
        seen.maxLag = Math.max(seen.maxLag ?? 0, lag);
        const w = pgWindow();
        if (w !== null && at >= w.from && (w.to === null || at <= w.to))
          seen.maxDuringPg = Math.max(seen.maxDuringPg ?? 0, backlog);
      }
      await sleep(250);
    }
  })();
  return {
    seen,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

interface CatchUp {
  relayAt: number | null;
  doneAt: number | null;
  timedOut: boolean;
  /** At a timeout: the events still open, with their keys' kicks. */
  open?: string[];
}

/** Waits until every replica's relay backlog is 0 and no event in PostgreSQL is pending or failed. */
async function waitCaughtUp(fleet: Fleet, databaseUrl: string, until: number): Promise<CatchUp> {
  const client = await connect(databaseUrl, until);
  let relayAt: number | null = null;
  try {
    while (Date.now() < until) {
      const gauges = await Promise.all(fleet.replicas.map(relayGauges));
      const relayed = gauges.every((g) => g !== null && g.backlog === 0);
      if (relayed && relayAt === null) relayAt = Date.now();
      if (!relayed) relayAt = null;
      if (relayed) {
        const open = await client
          .query<{ n: number }>("SELECT count(*)::int AS n FROM events WHERE status IN ('pending', 'failed')")
          .catch(() => ({ rows: [{ n: -1 }] }));
        if (open.rows[0]?.n === 0) return { relayAt, doneAt: Date.now(), timedOut: false };
      }
      await sleep(100);
    }
    return {
      relayAt,
      doneAt: null,
      timedOut: true,
      open: await openKeys(client).catch((err: Error) => [err.message]),
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * At a catch-up timeout: the first events still open and every pg-boss kick of their keys (state,
 * retries, when it started and ended), so that a failure says whether a key had no kick left.
 */
async function openKeys(client: Client): Promise<string[]> {
  const open = await client.query<{ id: string; key: string; status: string; attempts: number }>(
    `SELECT id, CASE WHEN nu_proposta IS NOT NULL THEN 'p:' || nu_proposta WHEN request_id IS NOT NULL
       THEN 'r:' || request_id ELSE 'e:' || id END AS key, status, attempts
     FROM events WHERE status IN ('pending', 'failed') ORDER BY id LIMIT 10`,
  );
  const jobs = await client.query<{ key: string; kicks: string }>(
    `SELECT singleton_key AS key, string_agg(state || ' x' || retry_count || ' ' || coalesce(to_char(started_on, 'HH24:MI:SS.MS'), '-')
       || '..' || coalesce(to_char(completed_on, 'HH24:MI:SS.MS'), '-'), ', ' ORDER BY created_on) AS kicks
     FROM pgboss.job WHERE name = 'consig_events' AND singleton_key = ANY($1) GROUP BY 1`,
    [open.rows.map((e) => e.key)],
  );
  const kicks = new Map(jobs.rows.map((j) => [j.key, j.kicks]));
  return open.rows.map(
    (e) => `event ${e.id} ${e.status} (${e.attempts} attempts), ${e.key}: ${kicks.get(e.key) ?? 'no kick'}`,
  );
}

/** Waits until no forward_deliveries row is pending (every message delivered or dead); when, or null. */
async function waitForwarded(databaseUrl: string, until: number): Promise<number | null> {
  const client = await connect(databaseUrl, until);
  try {
    while (Date.now() < until) {
      if ((await pendingDeliveries(client)) === 0) return Date.now();
      await sleep(100);
    }
    return null;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Waits until a replica holds the destination's lock; which one. */
async function waitForHolder(databaseUrl: string, until: number): Promise<string> {
  const client = await connect(databaseUrl, until);
  try {
    for (;;) {
      const holder = await forwardHolder(client);
      if (holder !== null) return holder;
      if (Date.now() > until) throw new Error('no replica took the destination within 60 s');
      await sleep(50);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Until `n` spools have published a relay heartbeat (relay_spools), as an operator waits before traffic. */
async function waitForHeartbeats(databaseUrl: string, n: number, until: number): Promise<void> {
  const client = await connect(databaseUrl, until);
  try {
    for (;;) {
      const { rows } = await client.query<{ n: string }>('SELECT count(*) AS n FROM relay_spools');
      if (Number(rows[0]?.n ?? 0) >= n) return;
      if (Date.now() > until) throw new Error(`fewer than ${n} relays published a heartbeat within 60 s`);
      await sleep(50);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** SIGKILL of the destination's holder to the first holder seen after it (null: not the holder, or none seen). */
function takeoverMs(changes: readonly HolderChange[], d: Disruptions): number | null {
  if (!d.killedHolder) return null;
  const next = changes.find((c) => c.at > d.killedAt && c.holder !== null);
  return next === undefined ? null : next.at - d.killedAt;
}

/** One question on a connection of its own. */
async function askPostgres<T>(url: string, ask: (client: Client) => Promise<T>): Promise<T> {
  const client = await connect(url, Date.now() + 5000);
  try {
    return await ask(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A connection, retried while PostgreSQL is still starting. */
async function connect(url: string, until: number): Promise<Client> {
  for (;;) {
    const client = new Client({ connectionString: url });
    client.on('error', () => undefined);
    try {
      await client.connect();
      return client;
    } catch (err) {
      await client.end().catch(() => undefined);
      if (Date.now() > until) throw err;
      await sleep(200);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Checks in PostgreSQL
// ---------------------------------------------------------------------------------------------

interface PgState {
  events: {
    id: number;
    dedup_key: string;
    evento: string | null;
    nu_proposta: string | null;
    status: string;
    duplicates: number;
    attempts: number;
    last_error: string | null;
  }[];
  transitions: {
    id: number;
    nu_proposta: string;
    event_id: number;
    evento: string;
    from_status: string | null;
    to_status: string;
    applied: boolean;
    reason: string;
  }[];
  proposals: Map<string, string>;
  /** 200-answered deliveries rows per dedup key, and rows (any outcome) and 200-rows per replica. */
  okRowsByKey: Map<string, number>;
  rowsByReplica: Map<string, number>;
  okRowsByReplica: Map<string, number>;
}

async function loadPgState(url: string): Promise<PgState> {
  const client = await connect(url, Date.now() + 30_000);
  try {
    const q = async <T>(sql: string): Promise<T[]> => (await client.query(sql)).rows as T[];
    const events = await q<PgState['events'][number]>(
      // The order processing follows (docs/cluster.md §10): as the replicas acknowledged them, on
      // PostgreSQL's clock as each measured it (order_at, issue 36).
      'SELECT id::float8 AS id, dedup_key, evento, nu_proposta, status, duplicates, attempts, last_error FROM events ORDER BY coalesce(order_at, received_at), id',
    );
    const transitions = await q<PgState['transitions'][number]>(
      `SELECT id::float8 AS id, nu_proposta, event_id::float8 AS event_id, evento, from_status, to_status, applied, reason
       FROM proposal_transitions ORDER BY nu_proposta, id`,
    );
    const proposals = await q<{ nu_proposta: string; status: string }>(
      'SELECT nu_proposta, status FROM proposals',
    );
    const deliveries = await q<{ replica: string; dedup_key: string | null; ok: boolean; n: number }>(
      `SELECT replica, dedup_key, outcome IN ('accepted', 'duplicate') AS ok, count(*)::int AS n
       FROM deliveries GROUP BY 1, 2, 3`,
    );
    const add = (m: Map<string, number>, k: string, n: number) => m.set(k, (m.get(k) ?? 0) + n);
    const state: PgState = {
      events,
      transitions,
      proposals: new Map(proposals.map((p) => [p.nu_proposta, p.status])),
      okRowsByKey: new Map(),
      rowsByReplica: new Map(),
      okRowsByReplica: new Map(),
    };
    for (const d of deliveries) {
      add(state.rowsByReplica, d.replica, d.n);
      if (!d.ok) continue;
      add(state.okRowsByReplica, d.replica, d.n);
      if (d.dedup_key !== null) add(state.okRowsByKey, d.dedup_key, d.n);
    }
    return state;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Every 200 is one event; nothing else stored; each event is what was sent under its webhook_id. */
function checkEvents(s: PgState, load: LoadState) {
  const byKey = new Map(s.events.map((e) => [e.dedup_key, e]));
  let acknowledgedKeys = 0;
  let storedAcknowledged = 0;
  for (const rec of load.keys.values()) {
    if (rec.bad || rec.ackedBy.length === 0) continue;
    acknowledgedKeys += 1;
    if (byKey.has(rec.key)) storedAcknowledged += 1;
  }
  let storedWithoutAck = 0;
  let badSignaturesStored = 0;
  let unexpectedStored = 0;
  let eventMismatches = 0;
  for (const e of s.events) {
    const rec = load.keys.get(e.dedup_key);
    if (rec === undefined) unexpectedStored += 1;
    else if (rec.bad) badSignaturesStored += 1;
    else {
      if (rec.ackedBy.length === 0) storedWithoutAck += 1;
      const sent = rec.proposal.eventos[rec.step];
      if (e.evento !== sent || e.nu_proposta !== String(rec.proposal.nu)) eventMismatches += 1;
    }
  }
  return {
    acknowledgedKeys,
    storedAcknowledged,
    lost: acknowledgedKeys - storedAcknowledged,
    storedWithoutAck,
    badSignaturesStored,
    unexpectedStored,
    eventMismatches,
    events: s.events.length,
  };
}

/**
 * `duplicates` counts the copies stored beyond the first, at any replica. A copy answered 200 was
 * stored; a copy whose request got no answer (the replica was SIGKILLed around it) may or may not
 * have been. So sum(duplicates) lies between the 200s beyond the first and that plus the unanswered
 * requests; per event it must equal its 200-answered `deliveries` rows − 1 (every stored copy has one).
 */
function checkDuplicates(s: PgState, load: LoadState) {
  let duplicatesSum = 0;
  let duplicateRowMismatches = 0;
  for (const e of s.events) {
    duplicatesSum += e.duplicates;
    if ((s.okRowsByKey.get(e.dedup_key) ?? 0) !== e.duplicates + 1) duplicateRowMismatches += 1;
  }
  let ackedExtraCopies = 0;
  let unansweredSignedRequests = 0;
  for (const rec of load.keys.values()) {
    if (rec.bad) continue;
    ackedExtraCopies += Math.max(0, rec.ackedBy.length - 1);
    unansweredSignedRequests += rec.unanswered;
  }
  return { duplicatesSum, ackedExtraCopies, unansweredSignedRequests, duplicateRowMismatches };
}

/** Every life-cycle event done, with exactly one transition row; none applied twice. */
function checkProcessing(s: PgState) {
  const rowsPerEvent = new Map<number, number>();
  for (const t of s.transitions) rowsPerEvent.set(t.event_id, (rowsPerEvent.get(t.event_id) ?? 0) + 1);
  const lifecycle = s.events.filter((e) => e.evento !== null && e.nu_proposta !== null);
  const lifecycleIds = new Set(lifecycle.map((e) => e.id));
  const uniqueViolations = s.events.filter((e) => /duplicate key|unique/i.test(e.last_error ?? '')).length;
  return {
    notDone: lifecycle.filter((e) => e.status !== 'done').length,
    transitionsNotOne: lifecycle.filter((e) => rowsPerEvent.get(e.id) !== 1).length,
    processedTwice: s.transitions.length - rowsPerEvent.size + uniqueViolations,
    strayTransitions: s.transitions.filter((t) => !lifecycleIds.has(t.event_id)).length,
    transitions: s.transitions.length,
    retriedEvents: s.events.filter((e) => e.attempts > 1 || e.last_error !== null).length,
  };
}

/**
 * Per proposal: transitions in the order the replicas acknowledged the events (received_at, then
 * id: the hold-back window's order, whichever relay reached PostgreSQL first); what they recorded
 * is replay() over the events in that order; and the status is also replay() over the
 * events in the order they were sent (see orderDependentPaths for why that must hold).
 */
function checkProposals(s: PgState, load: LoadState) {
  const stepOf = new Map([...load.keys.values()].map((r) => [r.key, r.step]));
  const eventsByNu = new Map<string, PgState['events']>();
  for (const e of s.events)
    if (e.evento !== null && e.nu_proposta !== null)
      eventsByNu.set(e.nu_proposta, [...(eventsByNu.get(e.nu_proposta) ?? []), e]);
  const transByNu = new Map<string, PgState['transitions']>();
  for (const t of s.transitions) transByNu.set(t.nu_proposta, [...(transByNu.get(t.nu_proposta) ?? []), t]);
  const out = {
    orderViolations: 0,
    stateMismatches: 0,
    endStateMismatches: 0,
    proposalsReordered: 0,
    notApplied: 0,
  };
  for (const [nu, events] of eventsByNu) {
    const trans = transByNu.get(nu) ?? [];
    const position = new Map(events.map((e, i) => [e.id, i]));
    const at = (t: { event_id: number }) => position.get(t.event_id) ?? -1;
    if (trans.some((t, i) => i > 0 && at(t) <= at(trans[i - 1] as { event_id: number })))
      out.orderViolations += 1;
    const predicted = replay(events.map((e) => e.evento as Evento));
    const byEvent = [...trans].sort((a, b) => at(a) - at(b));
    const same =
      byEvent.length === events.length &&
      byEvent.every((t, i) => {
        const p = predicted.transitions[i];
        return (
          p !== undefined &&
          t.event_id === events[i]?.id &&
          t.from_status === p.from &&
          t.to_status === p.to &&
          t.applied === p.applied &&
          t.reason === p.reason
        );
      });
    if (!same || s.proposals.get(nu) !== predicted.status) out.stateMismatches += 1;
    const lifeOrder = [...events].sort(
      (a, b) => (stepOf.get(a.dedup_key) ?? 0) - (stepOf.get(b.dedup_key) ?? 0),
    );
    if (lifeOrder.some((e, i) => e !== events[i])) out.proposalsReordered += 1;
    if (replay(lifeOrder.map((e) => e.evento as Evento)).status !== s.proposals.get(nu))
      out.endStateMismatches += 1;
    out.notApplied += trans.filter((t) => !t.applied).length;
  }
  const rowsWithoutEvents = [...s.proposals.keys()].filter((nu) => !eventsByNu.has(nu)).length;
  const eventsWithoutRow = [...eventsByNu.keys()].filter((nu) => !s.proposals.has(nu)).length;
  return { ...out, proposals: eventsByNu.size, proposalRowMismatches: rowsWithoutEvents + eventsWithoutRow };
}

/** Each replica's 200s are all in PostgreSQL's `deliveries` (and no more than its 200s plus its unanswered requests). */
function checkDeliveries(s: PgState, load: LoadState) {
  const relayGaps: string[] = [];
  REPLICAS.forEach((id, i) => {
    const rows = s.okRowsByReplica.get(id) ?? 0;
    const lo = load.ok200ByReplica[i] ?? 0;
    const hi = lo + (load.unansweredByReplica[i] ?? 0);
    if (rows < lo || rows > hi) relayGaps.push(`${id}: ${rows} rows answered 200, expected ${lo}..${hi}`);
  });
  return {
    deliveriesByReplica: Object.fromEntries(REPLICAS.map((id) => [id, s.rowsByReplica.get(id) ?? 0])),
    relayGaps,
  };
}

/** See {@link ClusterCrashResult.spoolGaps}; read after the replicas stopped. */
function checkSpools(replicas: readonly Replica[], load: LoadState): string[] {
  const gaps: string[] = [];
  replicas.forEach((r, i) => {
    const db = new Database(r.spool, { readonly: true, fileMustExist: true });
    try {
      const stored = new Set(
        (db.prepare('SELECT dedup_key FROM events').all() as { dedup_key: string }[]).map((e) => e.dedup_key),
      );
      const okRows = (
        db
          .prepare("SELECT count(*) AS n FROM deliveries WHERE outcome IN ('accepted', 'duplicate')")
          .get() as { n: number }
      ).n;
      let missing = 0;
      for (const rec of load.keys.values()) if (rec.ackedBy.includes(i) && !stored.has(rec.key)) missing += 1;
      if (missing > 0) gaps.push(`${r.id}: ${missing} webhook_ids answered 200 missing from its events`);
      const lo = load.ok200ByReplica[i] ?? 0;
      const hi = lo + (load.unansweredByReplica[i] ?? 0);
      if (okRows < lo || okRows > hi)
        gaps.push(`${r.id}: ${okRows} deliveries rows answered 200, expected ${lo}..${hi}`);
    } finally {
      db.close();
    }
  });
  return gaps;
}

async function checkPostgres(
  url: string,
  load: LoadState,
  destination: ForwardDestination,
): Promise<ClusterChecks> {
  const s = await loadPgState(url);
  return {
    ...checkEvents(s, load),
    ...checkDuplicates(s, load),
    ...checkProcessing(s),
    ...checkProposals(s, load),
    ...checkDeliveries(s, load),
    ...(await askPostgres(url, (client) => checkForwarding(client, destination, CPFS))),
  };
}

/** The names of the checks that failed. */
function failuresOf(r: ClusterCrashResult): string[] {
  const f: string[] = [];
  const zero = <T extends object>(obj: T, keys: (keyof T)[]) => {
    for (const k of keys) if (obj[k] !== 0) f.push(String(k));
  };
  zero(r, ['unanswered', 'wrongAnswers', 'pgRestartNon200', 'pgRestartNoAnswer', 'orderDependentPaths']);
  if (r.maxAnswerMs >= ANSWER_DEADLINE_MS) f.push('maxAnswerMs');
  if (r.pgRestartRequests === 0) f.push('pgRestartRequests');
  if (r.unexpectedExits.length > 0) f.push('unexpectedExits');
  if (r.gracefulExitCodes.some((c) => c !== 0)) f.push('gracefulExitCodes');
  if (r.duplicatesSent > 0 && r.crossReplicaDuplicates === 0) f.push('crossReplicaDuplicates');
  if (r.spoolGaps.length > 0) f.push('spoolGaps');
  const pg = r.pg;
  if (pg === null) return f;
  if (r.catchUpTimedOut) f.push('catchUpTimedOut');
  zero(pg, [
    'lost',
    'badSignaturesStored',
    'unexpectedStored',
    'eventMismatches',
    'duplicateRowMismatches',
    'notDone',
    'transitionsNotOne',
    'processedTwice',
    'strayTransitions',
    'orderViolations',
    'stateMismatches',
    'endStateMismatches',
    'proposalRowMismatches',
  ]);
  if (pg.acknowledgedKeys === 0) f.push('acknowledgedKeys');
  if (
    pg.duplicatesSum < pg.ackedExtraCopies ||
    pg.duplicatesSum > pg.ackedExtraCopies + pg.unansweredSignedRequests
  )
    f.push('duplicatesSum');
  if (pg.relayGaps.length > 0) f.push('relayGaps');
  if (REPLICAS.some((id) => (pg.deliveriesByReplica[id] ?? 0) === 0)) f.push('deliveriesByReplica');
  // Forwarding: the SIGKILL hit the sender; the outbox holds each transition once; everything arrived, in order, signed.
  if (!r.forwardHolderKilled) f.push('forwardHolderKilled');
  if (r.forwardHeldAtKill === 0) f.push('forwardHeldAtKill');
  if (r.forwardHeldNotResent !== 0) f.push('forwardHeldNotResent');
  if (r.forwardTimedOut) f.push('forwardTimedOut');
  if (pg.proposalChangedMessages !== pg.transitions) f.push('proposalChangedMessages');
  zero(pg, [
    'outboxDuplicateTypes',
    'outboxMismatches',
    'outboxOrderViolations',
    'forwardPending',
    'forwardDead',
    'forwardMissingRows',
    'forwardLost',
    'forwardUnknown',
    'forwardPhantomAttempts',
    'forwardOrderViolations',
    'forwardBadSignatures',
    'forwardBodyMismatches',
    'forwardCpfUnmasked',
  ]);
  return f;
}

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
  const cluster = options.cluster ?? true;
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
    fleet.databaseUrl = cluster ? databaseUrl : null;
    log(`PostgreSQL: ${databaseUrl} (log: ${pg.logFile})`);
    if (cluster) {
      destination = await startDestination();
      fleet.destinationsFile = writeDestinationsFile(dir, destination.url);
      log(`forwarding to ${destination.url}`);
    }
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
    log(`replicas up on ports ${ports.join(', ')}${cluster ? '' : ' (SQLite mode: no DATABASE_URL)'}`);
    if (cluster) {
      // Ready answers before PostgreSQL is reached; the load starts once the cluster runs (a replica
      // holds the destination), so that forwarding is under way when the SIGKILL comes.
      const holder = await waitForHolder(databaseUrl, Math.min(deadline, Date.now() + 60_000));
      log(`${holder} sends to the destination`);
      // Order across replicas holds from each relay's first heartbeat on (docs/cluster-mode.md, "a
      // connected relay before traffic"): a replica PostgreSQL has not heard of yet holds nothing back.
      await waitForHeartbeats(databaseUrl, fleet.replicas.length, Math.min(deadline, Date.now() + 60_000));
    }
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
      cluster,
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
  cluster: boolean;
  /** The forwarding destination (cluster mode), or null. */
  destination: ForwardDestination | null;
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
  const holders =
    p.destination === null ? null : watchHolder(() => connect(p.databaseUrl, Date.now() + 2000));
  const stopSampling = async () => {
    await sampler.stop();
    await holders?.stop();
  };
  const destination = p.destination;
  const target: KillTarget | null =
    destination === null
      ? null
      : {
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
  const caught: CatchUp = p.cluster
    ? await waitCaughtUp(fleet, p.databaseUrl, Math.min(p.deadline, Date.now() + catchUpTimeoutMs))
    : { relayAt: null, doneAt: null, timedOut: false };
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
    mode: p.cluster ? 'cluster' : 'sqlite',
    ...loadFigures(state),
    replicaKilled: disruptions.replicaKilled,
    inFlightAtKill: disruptions.inFlightAtKill,
    replicaDownMs: disruptions.replicaDownMs,
    killAtMs: disruptions.killedAt - loadStart,
    pgRestartAtMs: disruptions.pgWindow === null ? null : disruptions.pgWindow.from - loadStart,
    ...forwardFigures(p.destination, disruptions, holders?.changes ?? [], loadStart),
    forwardCatchUpMs: forwardedAt === null || caught.doneAt === null ? null : forwardedAt - caught.doneAt,
    forwardTimedOut: p.destination !== null && forwardedAt === null,
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
    // A destination exactly in cluster mode.
    pg: p.destination === null ? null : await checkPostgres(p.databaseUrl, state, p.destination),
    durationMs: 0,
    dir: '',
    databaseUrl: p.databaseUrl,
    failures: [],
  };
}

/** Once processing is done, waits for no delivery pending (cluster mode); when, or null (timed out, or not waited). */
async function forwardCatchUp(p: PhaseInput, caught: CatchUp, timeoutMs: number): Promise<number | null> {
  if (p.destination === null || caught.doneAt === null) return null;
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
  destination: ForwardDestination | null,
  d: Disruptions,
  changes: readonly HolderChange[],
  loadStart: number,
) {
  const arrivals = destination?.arrivals ?? [];
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
// Report and command line
// ---------------------------------------------------------------------------------------------

/** The printable report. */
export function formatClusterCrash(r: ClusterCrashResult): string {
  const row = (label: string, value: string | number | null, note = '') =>
    `${label.padEnd(40)}${String(value ?? '-').padStart(10)}${note ? `  ${note}` : ''}`;
  const must = (v: number, what = 'must be 0') => `(${what})${v === 0 ? '' : '  FAIL'}`;
  const ms = (v: number | null) => (v === null ? null : `${(v / 1000).toFixed(1)} s`);
  const byReplica = (m: Record<string, number>) => REPLICAS.map((id) => `${id} ${m[id] ?? 0}`).join(', ');
  const lines = [
    `cluster-crash: seed ${r.seed}, 3 replicas (${r.mode}), ${(r.durationMs / 1000).toFixed(1)} s`,
    row(
      'deliveries sent',
      r.sent,
      `(${r.firstSends} first sends, ${r.duplicatesSent} re-sends, ${r.badSignaturesSent} bad signatures)`,
    ),
    row('re-sends acked by a replica without a copy', r.crossReplicaDuplicates),
    row(
      'requests (retries included)',
      r.requests,
      `(${r.networkErrors} refused/reset, ${r.serverErrors} 5xx)`,
    ),
    row(
      '200s',
      r.ok200,
      `(${r.accepted} accepted, ${r.duplicateAnswers} duplicate; ${byReplica(r.ok200ByReplica)})`,
    ),
    row('401s', r.rejected401),
    row('wrong answers', r.wrongAnswers, must(r.wrongAnswers)),
    row('unanswered (retries exhausted)', r.unanswered, must(r.unanswered)),
    row(
      'slowest answer',
      `${r.maxAnswerMs} ms`,
      `(must be < ${ANSWER_DEADLINE_MS} ms)${r.maxAnswerMs < ANSWER_DEADLINE_MS ? '' : '  FAIL'}`,
    ),
    row(
      `SIGKILL ${r.replicaKilled}`,
      `${r.replicaDownMs} ms`,
      `down until ready again (${r.inFlightAtKill} requests in flight; at ${ms(r.killAtMs)})`,
    ),
    row(
      'PostgreSQL restart -m immediate',
      `${r.pgRestartMs} ms`,
      `(${r.pgRestartRequests} signed requests overlapped it; at ${ms(r.pgRestartAtMs) ?? '-'})`,
    ),
    row(
      '  answered non-200 / not answered',
      `${r.pgRestartNon200}/${r.pgRestartNoAnswer}`,
      must(r.pgRestartNon200 + r.pgRestartNoAnswer),
    ),
    row(
      'relay backlog max (during restart)',
      `${r.maxBacklog ?? '-'} (${r.maxBacklogDuringPgRestart ?? '-'})`,
      `lag max ${r.maxLagSeconds ?? '-'} s`,
    ),
    row('load', ms(r.loadMs)),
    row('catch-up: relay backlog 0', ms(r.relayCatchUpMs), 'from max(load end, PostgreSQL back)'),
    row(
      'catch-up: processing done',
      ms(r.catchUpMs),
      `(${ms(r.catchUpAfterPgMs) ?? '-'} after PostgreSQL back, ${ms(r.catchUpAfterLoadMs) ?? '-'} after load end)${r.catchUpTimedOut ? '  TIMED OUT' : ''}`,
    ),
    ...r.openAtTimeout.map((line) => `      open at the timeout: ${line}`),
    row('unexpected replica exits', r.unexpectedExits.length, r.unexpectedExits.join('; ')),
    row('graceful stops, exit codes', r.gracefulExitCodes.join(',')),
    row('order-dependent workload paths', r.orderDependentPaths, must(r.orderDependentPaths)),
    row('spools against answers', r.spoolGaps.length === 0 ? 'ok' : 'FAIL', r.spoolGaps.join('; ')),
    ...(r.pg === null
      ? ['(SQLite mode: nothing checked in PostgreSQL, no forwarding)']
      : [...pgLines(r.pg, row, must), ...forwardLines(r, r.pg, row, must)]),
    r.failures.length === 0 ? 'PASS' : `FAIL: ${r.failures.join(', ')} (spools and replica logs in ${r.dir})`,
  ];
  return lines.join('\n');
}

function pgLines(
  pg: ClusterChecks,
  row: (label: string, value: string | number | null, note?: string) => string,
  must: (v: number, what?: string) => string,
): string[] {
  const dupOk =
    pg.duplicatesSum >= pg.ackedExtraCopies &&
    pg.duplicatesSum <= pg.ackedExtraCopies + pg.unansweredSignedRequests;
  return [
    'PostgreSQL:',
    row('acknowledged webhook_ids', pg.acknowledgedKeys),
    row('  of which an event', pg.storedAcknowledged, must(pg.lost, `${pg.lost} lost, must be 0`)),
    row('events', pg.events, `(${pg.storedWithoutAck} stored without a 200: answer lost in the SIGKILL)`),
    row(
      'bad signatures / unexpected stored',
      `${pg.badSignaturesStored}/${pg.unexpectedStored}`,
      must(pg.badSignaturesStored + pg.unexpectedStored),
    ),
    row('events unlike what was sent', pg.eventMismatches, must(pg.eventMismatches)),
    row(
      'sum(duplicates)',
      pg.duplicatesSum,
      `(200s beyond the first ${pg.ackedExtraCopies}, + unanswered ≤ ${pg.ackedExtraCopies + pg.unansweredSignedRequests})${dupOk ? '' : '  FAIL'}`,
    ),
    row('events: duplicates+1 ≠ their 200 rows', pg.duplicateRowMismatches, must(pg.duplicateRowMismatches)),
    row('life-cycle events not done', pg.notDone, must(pg.notDone)),
    row('events without exactly one transition', pg.transitionsNotOne, must(pg.transitionsNotOne)),
    row('processed twice', pg.processedTwice, must(pg.processedTwice)),
    row('stray transitions', pg.strayTransitions, must(pg.strayTransitions)),
    row('transitions', pg.transitions, `(${pg.notApplied} not applied; ${pg.retriedEvents} events retried)`),
    row('proposals', pg.proposals, `(${pg.proposalsReordered} with events numbered out of sending order)`),
    row('proposals out of received_at order', pg.orderViolations, must(pg.orderViolations)),
    row('proposals off replay() in received order', pg.stateMismatches, must(pg.stateMismatches)),
    row('proposals off replay() in life order', pg.endStateMismatches, must(pg.endStateMismatches)),
    row('proposal rows without events / missing', pg.proposalRowMismatches, must(pg.proposalRowMismatches)),
    row(
      'deliveries rows per replica',
      REPLICAS.map((id) => pg.deliveriesByReplica[id] ?? 0).join('/'),
      pg.relayGaps.length === 0 ? '(every 200 relayed)' : `FAIL ${pg.relayGaps.join('; ')}`,
    ),
  ];
}

function forwardLines(
  r: ClusterCrashResult,
  pg: ClusterChecks,
  row: (label: string, value: string | number | null, note?: string) => string,
  must: (v: number, what?: string) => string,
): string[] {
  const s = (v: number | null) => (v === null ? '-' : `${(v / 1000).toFixed(1)} s`);
  const holders = r.forwardHolders.map((c) => `${c.holder ?? 'none'} at ${s(c.at)}`).join(', ');
  const attempts = Object.entries(pg.forwardAttempts);
  const fail = (bad: boolean) => (bad ? '  FAIL' : '');
  return [
    `Forwarding (proposal.changed to ${FORWARD_DESTINATION}):`,
    row(
      'SIGKILL hit the sender',
      r.forwardHolderKilled ? 'yes' : 'no',
      `(must be yes)${fail(!r.forwardHolderKilled)} holders: ${holders || '-'}`,
    ),
    row('  next holder after', r.forwardTakeoverMs === null ? null : `${r.forwardTakeoverMs} ms`),
    row(
      '  its requests held at the destination',
      r.forwardHeldAtKill,
      `(received, held unanswered; must be > 0)${fail(r.forwardHeldAtKill === 0)}`,
    ),
    row('  of those, never sent again', r.forwardHeldNotResent, must(r.forwardHeldNotResent)),
    row(
      'catch-up: no delivery pending',
      s(r.forwardCatchUpMs),
      `after processing done${r.forwardTimedOut ? '  TIMED OUT' : ''}`,
    ),
    row(
      'outbox: proposal.changed messages',
      pg.proposalChangedMessages,
      `(must equal transitions ${pg.transitions})${fail(pg.proposalChangedMessages !== pg.transitions)}; ${pg.outboxMessages} messages in all`,
    ),
    row(
      '  event with 2 of a type / ≠ transitions',
      `${pg.outboxDuplicateTypes}/${pg.outboxMismatches}`,
      must(pg.outboxDuplicateTypes + pg.outboxMismatches),
    ),
    row('  order keys not in processing order', pg.outboxOrderViolations, must(pg.outboxOrderViolations)),
    row(
      'deliveries delivered',
      pg.forwardDelivered,
      `(${pg.forwardPending} pending, ${pg.forwardDead} dead, ${pg.forwardMissingRows} missing: must be 0)${fail(pg.forwardPending + pg.forwardDead + pg.forwardMissingRows > 0)}`,
    ),
    row(
      'attempts recorded',
      attempts.reduce((sum, [, n]) => sum + n, 0),
      `(${attempts.map(([k, n]) => `${n} ${k}`).join(', ') || 'none'})`,
    ),
    row(
      'requests received',
      pg.forwardReceived,
      `(${pg.forwardReceivedIds} webhook-ids; ${pg.forwardResentIds} re-sent, ${pg.forwardResentCopies} extra copies, ${r.forwardResentBeforePgRestart} of them before the PostgreSQL restart: allowed)`,
    ),
    row(
      'messages lost / unknown received',
      `${pg.forwardLost}/${pg.forwardUnknown}`,
      must(pg.forwardLost + pg.forwardUnknown),
    ),
    row('200s recorded but never received', pg.forwardPhantomAttempts, must(pg.forwardPhantomAttempts)),
    row(
      'proposals out of order at destination',
      pg.forwardOrderViolations,
      `${must(pg.forwardOrderViolations)} ${pg.forwardOrderSamples.join('; ')}`.trim(),
    ),
    row(
      'bad signatures',
      pg.forwardBadSignatures,
      `${must(pg.forwardBadSignatures)} ${pg.forwardSignatureSamples.join('; ')}`.trim(),
    ),
    row('bodies unlike their message', pg.forwardBodyMismatches, must(pg.forwardBodyMismatches)),
    row('bodies with a CPF in full', pg.forwardCpfUnmasked, must(pg.forwardCpfUnmasked)),
  ];
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      deliveries: { type: 'string' },
      concurrency: { type: 'string' },
      seed: { type: 'string' },
      sqlite: { type: 'boolean' },
      'log-level': { type: 'string' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: node dist/bench/cluster-crash.js [--deliveries 20000] [--concurrency 24] [--seed N] [--keep] [--sqlite] [--log-level info]\n' +
        '  --sqlite: replicas without DATABASE_URL (checks the harness; nothing checked in PostgreSQL)\n',
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
    cluster: values.sqlite !== true,
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
