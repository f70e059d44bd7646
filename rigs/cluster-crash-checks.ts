import Database from '../src/sqlite/sqlite-driver';
import type { Evento } from '../src/domain/catalogue';
import { replay } from '../src/domain/lifecycle';
import { CPFS } from './deliveries';
import {
  checkForwarding,
  FORWARD_DESTINATION,
  type ForwardChecks,
  type ForwardDestination,
  type HolderChange,
} from './cluster-forwarding';
import {
  ANSWER_DEADLINE_MS,
  askPostgres,
  connect,
  type LoadState,
  type Replica,
  REPLICAS,
} from './cluster-crash-fleet';

/** The cluster crash test's checks in PostgreSQL against the answers, and its printed report. */

/** What PostgreSQL holds after the run, checked against the answers. */
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
  /** Events that needed more than one handler run, or hold an error: information (a turn cut by the restart). */
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
  /** The replica SIGKILLed held the destination's lock then (must be true). */
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
  /** When it did: the first events still open, with every turn of their keys. */
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
   * (must be none). Checks the spool and the harness's own bookkeeping.
   */
  spoolGaps: string[];
  pg: ClusterChecks;
  durationMs: number;
  dir: string;
  databaseUrl: string;
  /** The checks that failed, by name; empty when the run passed. */
  failures: string[];
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
export function checkProposals(s: PgState, load: LoadState) {
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
export function checkSpools(replicas: readonly Replica[], load: LoadState): string[] {
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

export async function checkPostgres(
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
export function failuresOf(r: ClusterCrashResult): string[] {
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
    `cluster-crash: seed ${r.seed}, 3 replicas, ${(r.durationMs / 1000).toFixed(1)} s`,
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
    ...pgLines(r.pg, row, must),
    ...forwardLines(r, r.pg, row, must),
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
