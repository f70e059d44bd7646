import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from '../src/sqlite/sqlite-driver';
import type { Evento } from '../src/domain/catalogue';
import { type ProposalStatus, replay } from '../src/domain/lifecycle';
import { seededRandom } from '../src/domain/random';
import {
  lifeCycleBody,
  postWebhook,
  type ProposalData,
  seededProposal,
  signatureOf,
  WRONG_SECRET,
  type WebhookAnswer,
} from './deliveries';
import {
  defaultBin,
  HOST,
  isAlive,
  killProcess,
  type Proc,
  sleep,
  spawnServe,
  stablePort,
  startOnPort,
  stopProcess,
} from './harness';

/**
 * Crash and load together (`npm run test:crash`, issue 6 item 3). The built receiver runs as a real
 * child process on a fixed port; an in-process load generator sends signed life-cycle deliveries at
 * full speed (about 10 % re-sends of a delivery already sent, about 5 % bad signatures) while the
 * receiver is killed with SIGKILL at random moments and restarted on the same SQLite file. Requests
 * that fail because the receiver is down are retried like the service would (bounded), and every
 * delivery's final answer is kept. After a last graceful restart and the pipeline's drain, the
 * database is checked against the answers: every 200 stored exactly once under the event id it
 * was answered with, no bad signature stored, every stored event processed exactly once.
 *
 * The runner signs bodies itself (node:crypto) and imports from src only the pure life-cycle
 * machine, to predict what the pipeline must have recorded.
 */

export interface CrashLoadOptions {
  /** SIGKILLs during the load (each followed by a restart). Default 5. */
  kills?: number;
  /** Deliveries to send, duplicates and bad signatures included. Default 100 000. */
  deliveries?: number;
  /** Concurrent request loops. Default 32. */
  concurrency?: number;
  /** Seeds the workload (proposals, order, duplicates, bad signatures, kill points). Default random. */
  seed?: number;
  /** Share of deliveries that re-send one already sent (same webhook_id and bytes). Default 0.10. */
  duplicateRate?: number;
  /** Share of deliveries with a bad signature. Default 0.05. */
  badSignatureRate?: number;
  /** Attempts per delivery when the receiver does not answer (or answers 5xx). Default 60. */
  maxAttempts?: number;
  /** Bounds the whole run (load, restarts, drain, checks). Default 300 000 ms. */
  timeoutMs?: number;
  /** Bounds the wait for the pipeline to finish every stored event at the end. Default 60 000 ms. */
  drainTimeoutMs?: number;
  /** The built receiver entry point. Default dist/src/cli/bin.js. */
  bin?: string;
  /** Keep the temp directory (database, receiver log) even when every check passed. */
  keep?: boolean;
  /** Progress lines (kills, restarts, phases). Default: none. */
  log?: (line: string) => void;
}

export interface CrashLoadResult {
  seed: number;
  /** Deliveries sent: first sends, re-sends (duplicates) and bad signatures, each counted once. */
  sent: number;
  firstSends: number;
  duplicatesSent: number;
  badSignaturesSent: number;
  /** HTTP requests made, retries included. */
  requests: number;
  /** Requests that got no HTTP answer (refused or reset: the receiver was down or being killed). */
  networkErrors: number;
  /** Requests answered 5xx (retried). */
  serverErrors: number;
  /** Deliveries whose final answer was 200 (`accepted` or `duplicate`). */
  ok200: number;
  accepted: number;
  /** Deliveries answered `duplicate` (re-sends, and retries of a delivery whose 200 was lost). */
  duplicateAnswers: number;
  /** Deliveries answered 401. */
  rejected401: number;
  /** Deliveries that never got an answer within `maxAttempts` (must be 0). */
  unanswered: number;
  /** A good delivery answered anything but 200 accepted/duplicate, or a bad one anything but 401 (must be 0). */
  wrongAnswers: number;
  /** Distinct webhook_ids acknowledged with a 200. */
  acknowledgedKeys: number;
  /** Rows in `events`. */
  stored: number;
  /** Stored, but no delivery of that webhook_id ever got its 200 (the answer was lost in a kill). */
  storedWithoutAck: number;
  badSignaturesStored: number;
  /** Acknowledged but not stored (must be 0). */
  lost: number;
  /** Acknowledged with an event_id other than the one stored under that key (must be 0). */
  ackIdMismatch: number;
  /** Dedup keys stored more than once, and stored keys no delivery of this run carried (must be 0). */
  storedTwice: number;
  unexpectedStored: number;
  /** Events with more than one `proposal_transitions` row: count(*) - count(DISTINCT event_id) (must be 0). */
  processedTwice: number;
  /** Catalogue events not `done`, or `done` without their transition row (must be 0). */
  notProcessed: number;
  /** Transition rows whose event does not exist (must be 0). */
  orphanTransitions: number;
  /** Proposals whose transitions or status differ from the pure machine over their events in id order (must be 0). */
  stateMismatches: number;
  proposals: number;
  transitions: number;
  kills: number;
  /** Requests in flight at each kill. */
  inFlightAtKills: number[];
  /** Exit codes of the two graceful stops (both must be 0). */
  gracefulExitCodes: (number | null)[];
  integrityCheck: string;
  durationMs: number;
  /** Temp directory (database, receiver.log); removed unless `keep` or a check failed. */
  dir: string;
  /** The must-be-0 (and must-be-ok) checks that failed, by name; empty when the run passed. */
  failures: string[];
}

const SECRET = 'crash-load-secret-0123456789';

/** A seeded generator, so a seed gives the same workload. */
const prng = seededRandom;

type BadVariant = 'wrong_secret' | 'tampered' | 'trailing_newline' | 'malformed' | 'missing';
const BAD_VARIANTS: readonly BadVariant[] = [
  'wrong_secret',
  'tampered',
  'trailing_newline',
  'malformed',
  'missing',
];

interface Proposal extends ProposalData {
  eventos: readonly Evento[];
  next: number;
}

interface EventSpec {
  proposal: Proposal;
  evento: Evento;
  step: number;
}

interface Delivery {
  kind: 'first' | 'duplicate' | 'bad';
  /** `metadata.webhook_id`: the dedup key. */
  key: string;
  event: EventSpec;
  badVariant?: BadVariant;
}

/** What a key's deliveries got: the event ids its 200s carried. */
interface KeyRecord {
  kind: 'good' | 'bad';
  ackedIds: Set<number>;
}

function buildWorkload(
  n: number,
  duplicateRate: number,
  badRate: number,
  concurrency: number,
  seed: number,
  rng: () => number,
): Delivery[] {
  const nBad = Math.round(n * badRate);
  const nDup = Math.round(n * duplicateRate);
  let goodLeft = n - nBad - nDup;
  let dupLeft = nDup;
  let badLeft = nBad;
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rng() * list.length)] as T;
  let proposalSeq = 0;
  const nuBase = 10_000_000 + (seed % 1000) * 100_000;
  const newProposal = (): Proposal => ({ ...seededProposal(nuBase + ++proposalSeq, rng), next: 0 });
  // Proposals are interleaved: each good delivery is the next event of one of `window` open proposals.
  const window: Proposal[] = Array.from({ length: Math.max(8, concurrency * 2) }, newProposal);
  const firsts: Delivery[] = [];
  const out: Delivery[] = [];
  let goodSeq = 0;
  let badSeq = 0;
  for (let i = 0; i < n; i++) {
    const canDup = firsts.length > 0 && dupLeft > 0;
    const left = goodLeft + badLeft + (canDup ? dupLeft : 0);
    const r = rng() * left;
    if (r < goodLeft || (!canDup && badLeft === 0)) {
      const slot = Math.floor(rng() * window.length);
      const proposal = window[slot] as Proposal;
      const step = proposal.next;
      proposal.next += 1;
      if (proposal.next >= proposal.eventos.length) window[slot] = newProposal();
      goodSeq += 1;
      const d: Delivery = {
        kind: 'first',
        key: `wh_cl_${seed}_${String(goodSeq).padStart(7, '0')}`,
        event: { proposal, evento: proposal.eventos[step] as Evento, step },
      };
      firsts.push(d);
      out.push(d);
      goodLeft -= 1;
    } else if (r < goodLeft + badLeft || !canDup) {
      badSeq += 1;
      // A realistic event of an open proposal: were it stored, that proposal would show it.
      const proposal = pick(window);
      const step = Math.min(proposal.next, proposal.eventos.length - 1);
      out.push({
        kind: 'bad',
        key: `wh_cl_${seed}_bad_${String(badSeq).padStart(6, '0')}`,
        event: { proposal, evento: proposal.eventos[step] as Evento, step },
        badVariant: pick(BAD_VARIANTS),
      });
      badLeft -= 1;
    } else {
      // A re-send of a recent delivery already handed to the loops (the service retrying one whose
      // answer it did not see in time).
      const recent = Math.min(firsts.length, 2000);
      const original = firsts[firsts.length - 1 - Math.floor(rng() * recent)] as Delivery;
      out.push({ kind: 'duplicate', key: original.key, event: original.event });
      dupLeft -= 1;
    }
  }
  return out;
}

/**
 * The bytes and signature header of one attempt (`tentativa` counts the service's attempts). Bodies
 * are deterministic, so a re-send's first attempt is byte for byte the first send of its original.
 */
function attemptOf(d: Delivery, tentativa: number): { body: Buffer; signature: string | null } {
  const body = lifeCycleBody(d.event.proposal, d.event.evento, d.event.step, d.key, tentativa);
  if (d.kind !== 'bad') return { body, signature: signatureOf(SECRET, body) };
  switch (d.badVariant) {
    case 'wrong_secret':
      return { body, signature: signatureOf(WRONG_SECRET, body) };
    case 'tampered': {
      // Signed, then one byte of the amount changed on the way.
      const signature = signatureOf(SECRET, body);
      const text = body.toString('utf8').replace(/"vl_emprestimo":(\d)/, (_m, digit: string) => {
        return `"vl_emprestimo":${digit === '9' ? '8' : '9'}`;
      });
      return { body: Buffer.from(text), signature };
    }
    case 'trailing_newline':
      return { body: Buffer.concat([body, Buffer.from('\n')]), signature: signatureOf(SECRET, body) };
    case 'malformed':
      return { body, signature: signatureOf(SECRET, body).slice(0, 40) };
    default:
      return { body, signature: null };
  }
}

/** The whole run; resolves with the counts (check `failures`), rejects when it could not run. */
export async function runCrashLoad(options: CrashLoadOptions = {}): Promise<CrashLoadResult> {
  const startedAt = Date.now();
  const kills = options.kills ?? 5;
  const n = options.deliveries ?? 100_000;
  const concurrency = options.concurrency ?? 32;
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const maxAttempts = options.maxAttempts ?? 60;
  const timeoutMs = options.timeoutMs ?? 300_000;
  const drainTimeoutMs = options.drainTimeoutMs ?? 60_000;
  const bin = options.bin ?? defaultBin();
  const log = options.log ?? (() => undefined);
  const deadline = startedAt + timeoutMs;
  if (!Number.isInteger(kills) || kills < 0) throw new Error('kills: expected an integer ≥ 0');
  if (!Number.isInteger(n) || n < 1) throw new Error('deliveries: expected an integer ≥ 1');
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error('concurrency: expected an integer ≥ 1');
  if (!existsSync(bin)) throw new Error(`${bin} not found: run \`npm run build\` first`);

  const rng = prng(seed);
  const workload = buildWorkload(
    n,
    options.duplicateRate ?? 0.1,
    options.badSignatureRate ?? 0.05,
    concurrency,
    seed,
    rng,
  );

  const dir = mkdtempSync(join(tmpdir(), 'consig-crash-load-'));
  const dbPath = join(dir, 'consig.db');
  const logPath = join(dir, 'receiver.log');
  const port = await stablePort();
  /** The receiver running now (null once the run stopped it). */
  const live: { receiver: Proc | null } = { receiver: null };
  let aborted = false;
  const checkDeadline = () => {
    if (Date.now() > deadline) {
      aborted = true;
      throw new Error(`crash-load: did not finish within ${timeoutMs} ms (receiver log: ${logPath})`);
    }
  };
  const env = { HOST, PORT: String(port), DATABASE_PATH: dbPath, WEBHOOK_SECRETS: SECRET, LOG_LEVEL: 'warn' };
  const startReceiver = (): Promise<Proc> =>
    startOnPort(
      () => (live.receiver = spawnServe(bin, env, logPath)),
      port,
      logPath,
      Math.max(1000, Math.min(30_000, deadline - Date.now())),
    );
  const startedOrRunning = async (): Promise<Proc> => live.receiver ?? startReceiver();
  const stopGracefully = (rec: Proc): Promise<number | null> => stopProcess(rec.child);

  // Load state.
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const keys = new Map<string, KeyRecord>();
  for (const d of workload)
    if (!keys.has(d.key)) keys.set(d.key, { kind: d.kind === 'bad' ? 'bad' : 'good', ackedIds: new Set() });
  let nextIndex = 0;
  let finished = 0;
  let inFlight = 0;
  let requests = 0;
  let networkErrors = 0;
  let serverErrors = 0;
  let ok200Since = 0;
  const answers = { accepted: 0, duplicate: 0, r401: 0, unanswered: 0, wrong: 0 };
  const wrongSamples: string[] = [];

  const deliver = async (d: Delivery): Promise<void> => {
    const rec = keys.get(d.key) as KeyRecord;
    for (let attempt = 1; attempt <= maxAttempts && !aborted; attempt++) {
      const { body, signature } = attemptOf(d, attempt);
      requests += 1;
      inFlight += 1;
      const a: WebhookAnswer | null = await postWebhook(agent, port, body, signature);
      inFlight -= 1;
      if (a === null || a.status >= 500) {
        if (a === null) networkErrors += 1;
        else serverErrors += 1;
        // The service's retry: back off, then send again (next `tentativa`, same webhook_id).
        await sleep(Math.min(20 * 2 ** (attempt - 1), 500) * (0.5 + rng() * 0.5));
        continue;
      }
      const good = d.kind !== 'bad';
      if (good && a.status === 200 && (a.outcome === 'accepted' || a.outcome === 'duplicate')) {
        if (a.outcome === 'accepted') answers.accepted += 1;
        else answers.duplicate += 1;
        ok200Since += 1;
        if (a.eventId !== null) rec.ackedIds.add(a.eventId);
        else rec.ackedIds.add(-1);
      } else if (!good && a.status === 401 && a.outcome === 'invalid_signature') {
        answers.r401 += 1;
      } else {
        answers.wrong += 1;
        if (a.status === 200) rec.ackedIds.add(a.eventId ?? -1);
        if (wrongSamples.length < 5)
          wrongSamples.push(`${d.kind} ${d.key} ${d.badVariant ?? ''}: ${a.status} ${a.outcome}`);
      }
      return;
    }
    answers.unanswered += 1;
  };

  const loop = async () => {
    while (!aborted && nextIndex < workload.length) {
      const d = workload[nextIndex] as Delivery;
      nextIndex += 1;
      await deliver(d);
      finished += 1;
    }
  };

  // Kill points: one in each of `kills` equal slices of the run (by deliveries handed out), at a
  // random place in it, plus a random delay; after a restart, the next waits for fresh 200s.
  const thresholds = Array.from({ length: kills }, (_, k) => {
    const lo = 0.05 + (0.85 * k) / Math.max(1, kills);
    const hi = 0.05 + (0.85 * (k + 1)) / Math.max(1, kills);
    return Math.floor(n * (lo + rng() * (hi - lo)));
  });
  const killJitter = thresholds.map(() => Math.floor(rng() * 25));
  const minFresh200 = Math.max(10, Math.min(200, Math.floor(n / (20 * Math.max(1, kills)))));
  const inFlightAtKills: number[] = [];
  let loadDone = false;

  const killer = async () => {
    for (let k = 0; k < kills; k++) {
      while (!loadDone && (nextIndex < (thresholds[k] as number) || ok200Since < minFresh200)) {
        checkDeadline();
        await sleep(1);
      }
      await sleep(killJitter[k] as number);
      const rec = live.receiver;
      if (rec === null) throw new Error('no receiver to kill');
      inFlightAtKills.push(inFlight);
      await killProcess(rec, 'the receiver');
      log(`kill ${k + 1}/${kills}: ${nextIndex} handed out, ${inFlightAtKills[k]} in flight; restarting`);
      await startReceiver();
      ok200Since = 0;
      log(`kill ${k + 1}/${kills}: receiver ready again`);
    }
  };

  const gracefulExitCodes: (number | null)[] = [];
  let result: CrashLoadResult | undefined;
  try {
    log(`seed ${seed}: ${n} deliveries, concurrency ${concurrency}, ${kills} kills, dir ${dir}`);
    await startReceiver();
    const killing = killer();
    const loads = Promise.all(Array.from({ length: concurrency }, loop)).then(() => {
      loadDone = true;
    });
    const watchdog = setInterval(() => {
      if (Date.now() > deadline) aborted = true;
    }, 100);
    // A kill that fails (the receiver will not start again) stops the load too.
    const killed = killing.catch((e: unknown) => {
      aborted = true;
      throw e;
    });
    try {
      await Promise.all([loads, killed]);
    } finally {
      clearInterval(watchdog);
    }
    checkDeadline();
    agent.destroy();
    log(`load done: ${finished} deliveries, ${requests} requests; graceful restart and drain`);

    // A last graceful stop and start, then wait for the pipeline to finish everything stored.
    gracefulExitCodes.push(await stopGracefully(await startedOrRunning()));
    const last = await startReceiver();
    const watch = new Database(dbPath, { readonly: true, fileMustExist: true });
    try {
      const open = watch.prepare("SELECT count(*) AS n FROM events WHERE status IN ('pending', 'failed')");
      const drainUntil = Math.min(deadline, Date.now() + drainTimeoutMs);
      while ((open.get() as { n: number }).n > 0 && Date.now() < drainUntil) await sleep(50);
    } finally {
      watch.close();
    }
    gracefulExitCodes.push(await stopGracefully(last));
    live.receiver = null;
    log('drained and stopped; checking the database');

    result = verify({
      dbPath,
      keys,
      seed,
      workload,
      counts: {
        requests,
        networkErrors,
        serverErrors,
        ...answers,
      },
      kills: inFlightAtKills.length,
      inFlightAtKills,
      gracefulExitCodes,
      startedAt,
      dir,
    });
    if (wrongSamples.length > 0) log(`wrong answers, e.g.: ${wrongSamples.join('; ')}`);
    return result;
  } finally {
    aborted = true;
    agent.destroy();
    const rec = live.receiver;
    if (rec !== null && isAlive(rec.child)) {
      rec.child.kill('SIGKILL');
      await rec.exited;
    }
    if (result !== undefined && result.failures.length === 0 && options.keep !== true)
      rmSync(dir, { recursive: true, force: true });
  }
}

interface VerifyInput {
  dbPath: string;
  keys: Map<string, KeyRecord>;
  seed: number;
  workload: Delivery[];
  counts: {
    requests: number;
    networkErrors: number;
    serverErrors: number;
    accepted: number;
    duplicate: number;
    r401: number;
    unanswered: number;
    wrong: number;
  };
  kills: number;
  inFlightAtKills: number[];
  gracefulExitCodes: (number | null)[];
  startedAt: number;
  dir: string;
}

function verify(input: VerifyInput): CrashLoadResult {
  const { keys, counts } = input;
  const db = new Database(input.dbPath, { readonly: true, fileMustExist: true });
  try {
    const integrityCheck = String(db.pragma('integrity_check', { simple: true }));
    const rows = db.prepare('SELECT id, dedup_key, kind, evento, status FROM events').all() as {
      id: number;
      dedup_key: string;
      kind: string;
      evento: string | null;
      status: string;
    }[];
    const storedIds = new Map<string, number[]>();
    for (const r of rows) storedIds.set(r.dedup_key, [...(storedIds.get(r.dedup_key) ?? []), r.id]);

    let badStored = 0;
    let unexpectedStored = 0;
    let storedTwice = 0;
    let storedWithoutAck = 0;
    for (const [key, ids] of storedIds) {
      const rec = keys.get(key);
      if (ids.length > 1) storedTwice += 1;
      if (rec === undefined) unexpectedStored += 1;
      else if (rec.kind === 'bad') badStored += 1;
      else if (rec.ackedIds.size === 0) storedWithoutAck += 1;
    }
    let lost = 0;
    let ackIdMismatch = 0;
    let acknowledgedKeys = 0;
    for (const [key, rec] of keys) {
      if (rec.ackedIds.size === 0) continue;
      acknowledgedKeys += 1;
      const ids = storedIds.get(key);
      if (ids === undefined) lost += 1;
      else if ([...rec.ackedIds].some((id) => id !== ids[0])) ackIdMismatch += 1;
    }

    // Processing: every catalogue event done, with exactly one transition row.
    const t = db
      .prepare(
        'SELECT count(*) AS total, count(DISTINCT event_id) AS distinctEvents FROM proposal_transitions',
      )
      .get() as { total: number; distinctEvents: number };
    const processedTwice = t.total - t.distinctEvents;
    const notProcessed = (
      db
        .prepare(
          `SELECT count(*) AS n FROM events e
           WHERE e.kind = 'event' AND e.evento IS NOT NULL
             AND (e.status != 'done' OR NOT EXISTS (SELECT 1 FROM proposal_transitions t WHERE t.event_id = e.id))`,
        )
        .get() as { n: number }
    ).n;
    const orphanTransitions = (
      db
        .prepare(
          'SELECT count(*) AS n FROM proposal_transitions t WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = t.event_id)',
        )
        .get() as { n: number }
    ).n;

    // Per proposal: what was recorded is what the pure machine gives for its events in id order.
    const trans = db
      .prepare(
        `SELECT e.nu_proposta AS nu, e.evento AS evento, t.applied AS applied
         FROM events e JOIN proposal_transitions t ON t.event_id = e.id ORDER BY e.nu_proposta, e.id`,
      )
      .all() as { nu: number; evento: Evento; applied: number }[];
    const finalStatus = new Map(
      (
        db.prepare('SELECT nu_proposta AS nu, status FROM proposals').all() as {
          nu: number;
          status: string;
        }[]
      ).map((r) => [r.nu, r.status]),
    );
    let stateMismatches = 0;
    let proposals = 0;
    for (let i = 0; i < trans.length;) {
      const nu = (trans[i] as { nu: number }).nu;
      const eventos: Evento[] = [];
      const applied: boolean[] = [];
      while (i < trans.length && (trans[i] as { nu: number }).nu === nu) {
        const row = trans[i] as { evento: Evento; applied: number };
        eventos.push(row.evento);
        applied.push(row.applied === 1);
        i += 1;
      }
      proposals += 1;
      const predicted = replay(eventos);
      const same =
        predicted.transitions.every((tr, j) => tr.applied === applied[j]) &&
        finalStatus.get(nu) === (predicted.status as ProposalStatus);
      if (!same) stateMismatches += 1;
    }
    if (finalStatus.size !== proposals) stateMismatches += Math.abs(finalStatus.size - proposals);

    const firstSends = input.workload.filter((d) => d.kind === 'first').length;
    const duplicatesSent = input.workload.filter((d) => d.kind === 'duplicate').length;
    const badSignaturesSent = input.workload.filter((d) => d.kind === 'bad').length;
    const result: CrashLoadResult = {
      seed: input.seed,
      sent: input.workload.length,
      firstSends,
      duplicatesSent,
      badSignaturesSent,
      requests: counts.requests,
      networkErrors: counts.networkErrors,
      serverErrors: counts.serverErrors,
      ok200: counts.accepted + counts.duplicate,
      accepted: counts.accepted,
      duplicateAnswers: counts.duplicate,
      rejected401: counts.r401,
      unanswered: counts.unanswered,
      wrongAnswers: counts.wrong,
      acknowledgedKeys,
      stored: rows.length,
      storedWithoutAck,
      badSignaturesStored: badStored,
      lost,
      ackIdMismatch,
      storedTwice,
      unexpectedStored,
      processedTwice,
      notProcessed,
      orphanTransitions,
      stateMismatches,
      proposals,
      transitions: t.total,
      kills: input.kills,
      inFlightAtKills: input.inFlightAtKills,
      gracefulExitCodes: input.gracefulExitCodes,
      integrityCheck,
      durationMs: Date.now() - input.startedAt,
      dir: input.dir,
      failures: [],
    };
    const mustBeZero: (keyof CrashLoadResult)[] = [
      'badSignaturesStored',
      'lost',
      'ackIdMismatch',
      'storedTwice',
      'unexpectedStored',
      'processedTwice',
      'notProcessed',
      'orphanTransitions',
      'stateMismatches',
      'wrongAnswers',
      'unanswered',
    ];
    for (const k of mustBeZero) if (result[k] !== 0) result.failures.push(k);
    if (integrityCheck !== 'ok') result.failures.push('integrityCheck');
    if (result.gracefulExitCodes.some((c) => c !== 0)) result.failures.push('gracefulExitCodes');
    return result;
  } finally {
    db.close();
  }
}

/** The report `npm run test:crash` prints. */
export function formatCrashLoad(r: CrashLoadResult): string {
  const row = (label: string, value: string | number, note = '') =>
    `${label.padEnd(34)}${String(value).padStart(9)}${note ? `  ${note}` : ''}`;
  const must = (v: number) => (v === 0 ? '(must be 0)' : '(must be 0)  FAIL');
  const lines = [
    `crash-load: seed ${r.seed}, ${r.kills} kills, ${(r.durationMs / 1000).toFixed(1)} s`,
    row(
      'deliveries sent',
      r.sent,
      `(${r.firstSends} first sends, ${r.duplicatesSent} re-sends, ${r.badSignaturesSent} bad signatures)`,
    ),
    row(
      'requests (retries included)',
      r.requests,
      `(${r.networkErrors} refused/reset, ${r.serverErrors} 5xx)`,
    ),
    row('200s', r.ok200, `(${r.accepted} accepted, ${r.duplicateAnswers} duplicate)`),
    row('duplicates (answered duplicate)', r.duplicateAnswers),
    row('acknowledged webhook_ids', r.acknowledgedKeys),
    row('stored (events rows)', r.stored),
    row('stored without ack', r.storedWithoutAck, '(200 lost in a kill, retries exhausted)'),
    row('bad signatures sent', r.badSignaturesSent, `(${r.rejected401} answered 401)`),
    row('bad signatures stored', r.badSignaturesStored, must(r.badSignaturesStored)),
    row('lost (acknowledged, not stored)', r.lost, must(r.lost)),
    row('acked under another event_id', r.ackIdMismatch, must(r.ackIdMismatch)),
    row(
      'stored twice / unexpected',
      `${r.storedTwice}/${r.unexpectedStored}`,
      must(r.storedTwice + r.unexpectedStored),
    ),
    row('processed twice', r.processedTwice, must(r.processedTwice)),
    row('not processed', r.notProcessed, must(r.notProcessed)),
    row('orphan transitions', r.orphanTransitions, must(r.orphanTransitions)),
    row('proposals off the pure machine', r.stateMismatches, `${must(r.stateMismatches)} of ${r.proposals}`),
    row('wrong answers', r.wrongAnswers, must(r.wrongAnswers)),
    row('unanswered (retries exhausted)', r.unanswered, must(r.unanswered)),
    row('kills (SIGKILL)', r.kills, `(in flight at each: ${r.inFlightAtKills.join(', ')})`),
    row('graceful stops, exit codes', r.gracefulExitCodes.join(',')),
    row('PRAGMA integrity_check', r.integrityCheck),
    r.failures.length === 0
      ? 'PASS'
      : `FAIL: ${r.failures.join(', ')} (database and receiver.log in ${r.dir})`,
  ];
  return lines.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      kills: { type: 'string' },
      deliveries: { type: 'string' },
      concurrency: { type: 'string' },
      seed: { type: 'string' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: node dist/rigs/crash-load.js [--kills 5] [--deliveries 100000] [--concurrency 32] [--seed N] [--keep]\n',
    );
    return;
  }
  const int = (name: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    if (!/^\d+$/.test(v)) throw new Error(`--${name}: expected a non-negative integer, got "${v}"`);
    return Number(v);
  };
  const result = await runCrashLoad({
    kills: int('kills', values.kills),
    deliveries: int('deliveries', values.deliveries),
    concurrency: int('concurrency', values.concurrency),
    seed: int('seed', values.seed),
    keep: values.keep === true,
    log: (line) => process.stderr.write(`crash-load: ${line}\n`),
  });
  process.stdout.write(`${formatCrashLoad(result)}\n`);
  if (result.failures.length > 0) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`crash-load: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 2;
  });
}
