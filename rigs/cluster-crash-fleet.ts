import { Agent } from 'node:http';
import { Client } from 'pg';
import type { LocalPostgres } from './local-postgres';
import type { Evento } from '../src/domain/catalogue';
import { replay } from '../src/domain/lifecycle';
import {
  lifeCycleBody,
  PATHS,
  postWebhook,
  type ProposalData,
  seededProposal,
  signatureOf,
  WRONG_SECRET,
} from './deliveries';
import {
  HOST,
  httpGet,
  killProcess,
  logTail,
  metric,
  type Proc,
  sleep,
  spawnServe,
  startOnPort,
  stopProcess,
} from './harness';
import { forwardHolder, type HolderChange, pendingDeliveries } from './cluster-forwarding';

/**
 * The cluster crash test's fleet and load (cluster-crash.ts): the life-cycle workload, three
 * replicas of the built receiver (`serve`, each its spool and fixed port), the load over them with
 * re-sends to other replicas and bad signatures, the disruptions (one replica SIGKILLed, PostgreSQL
 * restarted), the relay sampled, and the waits for the catch-up.
 */

export const SECRET = 'cluster-crash-secret-0123456789';
export const REPLICAS = ['r1', 'r2', 'r3'] as const;
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
export function orderDependentPaths(): number {
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

export interface Proposal extends ProposalData {
  eventos: readonly Evento[];
  /** The next event to hand out. */
  next: number;
  /** One of its events is being delivered: the next waits for it (the service sends in order). */
  busy: boolean;
}

/** Proposals whose events add up to exactly `events` first sends (the last one cut short). */
export function buildProposals(events: number, seed: number, rng: () => number): Proposal[] {
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
export interface KeyRecord {
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

export const bodyOf = (rec: KeyRecord, tentativa: number): Buffer =>
  lifeCycleBody(rec.proposal, rec.proposal.eventos[rec.step] as Evento, rec.step, rec.key, tentativa);

// ---------------------------------------------------------------------------------------------
// Replica processes
// ---------------------------------------------------------------------------------------------

interface ReplicaProcess extends Proc {
  /** Set before the runner kills or stops it, so its exit is not taken for a crash. */
  expected: boolean;
}

export interface Replica {
  id: string;
  port: number;
  spool: string;
  logPath: string;
  proc: ReplicaProcess | null;
  /** Up and answering /readyz (false while killed or restarting). */
  up: boolean;
}

export interface Fleet {
  replicas: Replica[];
  bin: string;
  logLevel: string;
  databaseUrl: string | null;
  /** DESTINATIONS_FILE of every replica (set once the destination runs). */
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
export async function startReplica(fleet: Fleet, r: Replica): Promise<void> {
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
export async function stopReplica(r: Replica): Promise<number | null> {
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

export interface LoadState {
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

export type Job = { kind: 'first' | 'duplicate' | 'bad'; rec: KeyRecord; replica: number; tentativa: number };

export interface LoadPlan {
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

export function newLoadState(): LoadState {
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
export async function runLoad(plan: LoadPlan, state: LoadState): Promise<void> {
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
export async function deliver(plan: LoadPlan, state: LoadState, agents: Agent[], job: Job): Promise<void> {
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

export interface Disruptions {
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

/** What the SIGKILL aims at: the replica sending the destination, with requests in flight. */
export interface KillTarget {
  /** The replica holding the destination's lock now (null: none, or PostgreSQL did not answer). */
  holder(): Promise<string | null>;
  /** The destination's requests received and held unanswered (see ForwardDestination). */
  held(): number;
  /** Answers them (after the SIGKILL); their webhook-ids. */
  release(): string[];
}

/**
 * One replica SIGKILLed and restarted at a seeded point of the load, then — once it is back and
 * fresh 200s came in — PostgreSQL restarted with `-m immediate` at a later point. The replica
 * killed is the destination's sender (`target`), once the destination holds at least one of its
 * requests unanswered (after a fifth of the load more, the load pauses until it does, at most 30 s),
 * so that the kill cuts messages in flight; a seeded one when no replica holds the destination. The load past the PostgreSQL restart's point (at least
 * 30 %) is held until the restart begins, so that requests overlap it however fast the load runs.
 */
export async function disrupt(
  plan: LoadPlan,
  state: LoadState,
  fleet: Fleet,
  pg: LocalPostgres,
  isLoadDone: () => boolean,
  live: { pgWindow: { from: number; to: number | null } | null },
  target: KillTarget,
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
  const holding = () => target.held() > 0 || isLoadDone() || plan.isAborted();
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
  const holder = await target.holder().catch(() => null);
  const victim = fleet.replicas.find((r) => r.id === holder) ?? drawn;
  const inFlightAtKill = state.inFlightByReplica[fleet.replicas.indexOf(victim)] ?? 0;
  // The rest of the load (at least 30 %) waits for the PostgreSQL restart to begin, so that requests
  // overlap it on any machine: a fast load would otherwise be handed out while the victim restarts.
  // Past pgAt the load waits for the victim to be back, then for fresh 200s, then for the restart.
  state.holdAt = { handedOut: pgAt, fresh: minFresh };
  const killedAt = Date.now();
  await killReplica(victim);
  const heldAtKill = target.release();
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
export function sampleRelay(fleet: Fleet, pgWindow: () => { from: number; to: number | null } | null) {
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

export interface CatchUp {
  relayAt: number | null;
  doneAt: number | null;
  timedOut: boolean;
  /** At a timeout: the events still open, with their keys' turns. */
  open?: string[];
}

/** Waits until every replica's relay backlog is 0 and no event in PostgreSQL is pending or failed. */
export async function waitCaughtUp(fleet: Fleet, databaseUrl: string, until: number): Promise<CatchUp> {
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
 * At a catch-up timeout: the first events still open and every pg-boss turn of their keys (state,
 * retries, when it started and ended), so that a failure says whether a key had no turn left.
 */
async function openKeys(client: Client): Promise<string[]> {
  const open = await client.query<{ id: string; key: string; status: string; attempts: number }>(
    `SELECT id, CASE WHEN nu_proposta IS NOT NULL THEN 'p:' || nu_proposta WHEN request_id IS NOT NULL
       THEN 'r:' || request_id ELSE 'e:' || id END AS key, status, attempts
     FROM events WHERE status IN ('pending', 'failed') ORDER BY id LIMIT 10`,
  );
  const jobs = await client.query<{ key: string; turns: string }>(
    `SELECT singleton_key AS key, string_agg(state || ' x' || retry_count || ' ' || coalesce(to_char(started_on, 'HH24:MI:SS.MS'), '-')
       || '..' || coalesce(to_char(completed_on, 'HH24:MI:SS.MS'), '-'), ', ' ORDER BY created_on) AS turns
     FROM pgboss.job WHERE name = 'consig_events' AND singleton_key = ANY($1) GROUP BY 1`,
    [open.rows.map((e) => e.key)],
  );
  const turns = new Map(jobs.rows.map((j) => [j.key, j.turns]));
  return open.rows.map(
    (e) => `event ${e.id} ${e.status} (${e.attempts} attempts), ${e.key}: ${turns.get(e.key) ?? 'no turn'}`,
  );
}

/** Waits until no forward_deliveries row is pending (every message delivered or dead); when, or null. */
export async function waitForwarded(databaseUrl: string, until: number): Promise<number | null> {
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
export async function waitForHolder(databaseUrl: string, until: number): Promise<string> {
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
export async function waitForHeartbeats(databaseUrl: string, n: number, until: number): Promise<void> {
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
export function takeoverMs(changes: readonly HolderChange[], d: Disruptions): number | null {
  if (!d.killedHolder) return null;
  const next = changes.find((c) => c.at > d.killedAt && c.holder !== null);
  return next === undefined ? null : next.at - d.killedAt;
}

/** One question on a connection of its own. */
export async function askPostgres<T>(url: string, ask: (client: Client) => Promise<T>): Promise<T> {
  const client = await connect(url, Date.now() + 5000);
  try {
    return await ask(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A connection, retried while PostgreSQL is still starting. */
export async function connect(url: string, until: number): Promise<Client> {
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
