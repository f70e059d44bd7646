import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FakeDestination } from '../helpers/destination';
import {
  type FailoverReplica,
  metricSum,
  type PostgresPair,
  startPostgresPair,
  startReplica,
  stopReplica,
} from '../helpers/failover-bed';
import { checkFailover, type FailoverFigures, formatFailoverTable } from '../helpers/failover-checks';
import { type Load, startFeedReader, startLoad } from '../helpers/failover-load';
import { SECRET } from '../helpers/payloads';
import { withClient } from '../helpers/postgres';
import { BIN, runCliAsync } from '../helpers/process';
import { tempDir } from '../helpers/tmp';
import { ORDER_UNCERTAINTY_BOUND_MS } from '../../src/domain/order-time';

/**
 * Cluster mode through a PostgreSQL failover (issue 32): a primary and a streaming standby (durable
 * settings, asynchronous replication) started here, the standby's replication link through a
 * pausable proxy, three replicas of the built receiver reaching PostgreSQL through one address that
 * is re-pointed to the promoted standby, ~47 signed deliveries/s round-robin, forwarding to a
 * destination on loopback and a change-feed reader. Planned: the standby caught up, the primary
 * stopped (`-m fast`), the standby promoted. Unplanned: the replication link paused ~5 s while the
 * load goes on, the primary SIGKILLed, the standby (behind) promoted. After the load and the drain,
 * every row of the issue's table is checked on the new primary; the table is printed.
 */

const ADMIN_TOKEN = 'failover-admin-token-0123456789';
const FORWARD_SECRET = `whsec_${Buffer.from('failover-forward-secret-32bytes!').toString('base64')}`;
const PER_SECOND = 47;
const LOAD_MS = 24_000;
const ANSWER_DEADLINE_MS = 5000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Kind = 'planned' | 'unplanned';

interface Outcome {
  figures: FailoverFigures;
  /** Timings and what the operator sees, printed beside the table. */
  extra: Record<string, string>;
  /** The proof that the scenario happened as meant. */
  requestsDuringOutage: number;
  standbyBehindBytes: number | null;
  /** consig_relay_gaps_total summed over the replicas (null: no replica exposes it). */
  gaps: number | null;
  /** `relay verify` on the promoted standby before the re-point, and on the new primary after the drain. */
  verifyAtPromotion: Verify;
  verifyAfterDrain: Verify;
  drained: boolean;
  /** The replicas' logs and spools: removed once the checks pass, kept (and named) when they fail. */
  runDir: { dir: string; cleanup(): void };
  exitCodes: (number | null)[];
}

const columns: { name: string; figures: FailoverFigures; extra: Record<string, string> }[] = [];

afterAll(() => {
  if (columns.length > 0)
    process.stdout.write(`\nPostgreSQL failover (issue 32)\n${formatFailoverTable(columns)}\n`);
});

it('planned switchover (the standby caught up): nothing lost, no fact under two ids, no id reissued, answers all 200', async () => {
  const o = await runScenario('planned', 32001);
  expectScenario('planned', o);
  // Nothing was lost, and nothing says so.
  expect(o.gaps).toBe(0);
  expect(o.verifyAtPromotion.status).toBe(0);
}, 180_000);

it('unplanned failover, the asynchronous standby ~5 s behind: nothing acknowledged lost, no fact under two ids, no id reissued', async () => {
  const o = await runScenario('unplanned', 32002);
  // The standby really missed commits the replicas had been answered for.
  expect(o.standbyBehindBytes).toBeGreaterThan(0);
  expectScenario('unplanned', o);
  // The operator is told: the replicas counted the gaps they found and sent again, and `relay
  // verify` on the promoted standby named them (exit 1) before the replicas reached it.
  expect(o.gaps).toBeGreaterThan(0);
  expect(o.verifyAtPromotion.status).toBe(1);
  expect(o.verifyAtPromotion.said).toMatch(/GAP: \d+ relayed deliveries missing/);
}, 180_000);

function expectScenario(kind: Kind, o: Outcome): void {
  const f = o.figures;
  columns.push({ name: kind, figures: f, extra: o.extra });
  const table = formatFailoverTable([{ name: kind, figures: f, extra: o.extra }]);
  process.stdout.write(`\n${kind}\n${table}\n`);
  const failures = Object.entries({
    non200: f.non200,
    noAnswer: f.noAnswer,
    ackedMissing: f.ackedMissing,
    wrongEndStatus: f.wrongEndStatus,
    createdFromLater: f.createdFromLater,
    notDone: f.notDone,
    destAboutMissing: f.destAboutMissing,
    factResentNewId: f.factResentNewId,
    eventIdsRenamed: f.eventIdsRenamed,
    feedIdsReissued: f.feedIdsReissued,
    feedSkipped: f.feedSkipped,
    outboxNotReceived: f.outboxNotReceived,
    badSignatures: f.badSignatures,
    unattributed: f.unattributed,
  }).filter(([, n]) => n !== 0);
  try {
    // The load ran through the outage, reached every part, and everything drained.
    expect(o.requestsDuringOutage).toBeGreaterThan(0);
    expect(f.acknowledged).toBeGreaterThan((PER_SECOND * LOAD_MS) / 1000 / 2);
    expect(f.destinationMessages).toBeGreaterThan(0);
    expect(f.feedMessages).toBeGreaterThan(0);
    expect(o.drained).toBe(true);
    expect(f.worstAnswerMs).toBeLessThan(ANSWER_DEADLINE_MS);
    expect(failures).toEqual([]);
    expect(o.exitCodes).toEqual([0, 0, 0]);
    // Once drained, every spool's deliveries are in the new primary.
    expect(o.verifyAfterDrain).toEqual({ status: 0, said: expect.any(String) });
  } catch (err) {
    (err as Error).message += `\n\n${table}\n\nreplica logs and spools kept in ${o.runDir.dir}`;
    throw err;
  }
  o.runDir.cleanup();
}

async function runScenario(kind: Kind, seed: number): Promise<Outcome> {
  const tmp = tempDir('consig-failover-');
  const pair = await startPostgresPair();
  const destination = await FakeDestination.start();
  const replicas: FailoverReplica[] = [];
  let handedOver = false;
  try {
    replicas.push(...(await startReplicas(pair, tmp.dir, destination.url)));
    const ports = replicas.map((r) => r.port);
    const feed = startFeedReader(ports, ADMIN_TOKEN);
    const load = startLoad({ ports, secret: SECRET, seed, perSecond: PER_SECOND, durationMs: LOAD_MS });
    const spools = replicas.map((r) => r.spool);
    const failover =
      kind === 'planned' ? await switchover(pair, spools) : await unplannedFailover(pair, spools);
    await load.done;
    const drain = await waitDrained(pair.standbyUrl, replicas, 90_000);
    await feed.stop();
    const verifyAfterDrain = await relayVerify(pair.standbyUrl, spools);
    const figures = await withClient(pair.standbyUrl, (c) =>
      checkFailover(c, load, destination, feed, FORWARD_SECRET),
    );
    const timings = await processingTimes(pair.standbyUrl, failover.reachableAt);
    const seen = await whatTheOperatorSaw(replicas, failover.downAt);
    const exitCodes: (number | null)[] = [];
    for (const r of replicas.splice(0)) exitCodes.push(await stopReplica(r));
    handedOver = true;
    return {
      runDir: tmp,
      figures,
      requestsDuringOutage: load.answers.filter(
        (a) => a.start >= failover.downAt && a.start <= failover.reachableAt,
      ).length,
      standbyBehindBytes: failover.behindBytes,
      gaps: seen.gaps,
      verifyAtPromotion: failover.verifyAtPromotion,
      verifyAfterDrain,
      drained: drain.drainedAt !== null,
      exitCodes,
      extra: reportRows(failover, timings, drain.drainMs(load), notOk(load, failover.downAt), figures, seen),
    };
  } finally {
    for (const r of replicas) await stopReplica(r);
    await destination.close();
    await pair.stop();
    if (!handedOver) tmp.cleanup();
  }
}

/** The three replicas on the pair's switchable address, forwarding to the destination, the feed on. */
async function startReplicas(
  pair: PostgresPair,
  dir: string,
  destinationUrl: string,
): Promise<FailoverReplica[]> {
  const destinations = join(dir, 'destinations.json');
  const crm = {
    name: 'crm',
    url: destinationUrl,
    secret: FORWARD_SECRET,
    types: ['proposal.changed', 'event.received'],
  };
  writeFileSync(destinations, JSON.stringify({ destinations: [crm] }));
  const env = {
    DATABASE_URL: pair.url,
    WEBHOOK_SECRETS: SECRET,
    // info: each replica's relay says when PostgreSQL was back (and logs every delivery: ~400 lines).
    LOG_LEVEL: 'info',
    DESTINATIONS_FILE: destinations,
    FEED_ENABLED: 'true',
    ADMIN_TOKEN,
    // docs/cluster-mode.md "PostgreSQL failover": order holds across a failover when every replica's
    // relay reaches the new primary within CLUSTER_HOLDBACK_MAX_MS of the first; the docs advise
    // covering the failover's reconnection spread (at a load average of 20, one replica once came
    // back 9 s after the others, was dropped from the watermark at the default 5 s, and its gap was
    // processed late).
    CLUSTER_HOLDBACK_MAX_MS: '15000',
  };
  const replicas = await Promise.all(['r1', 'r2', 'r3'].map((id) => startReplica(BIN, dir, id, env)));
  // The order across replicas holds within each replica's clock uncertainty (issue 36, docs/cluster.md
  // §10). A replica's first reading can be uncertain under load (a slow round trip: 90 ms once, at a
  // load average of 10, when the bound is 25 ms), which the replica warns about and which is not what
  // this test is about: the load starts once every replica measures within the bound, as an
  // operator's ConsigClockUncertain alert would have them wait for.
  await Promise.all(replicas.map((r) => clockCertain(r.port)));
  return replicas;
}

/** Resolves once the replica's `consig_cluster_clock_uncertainty_seconds` is within the order bound. */
async function clockCertain(port: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const u = await metricSum(port, 'consig_cluster_clock_uncertainty_seconds');
    if (u !== null && u <= ORDER_UNCERTAINTY_BOUND_MS / 1000) return;
    if (Date.now() > deadline)
      throw new Error(`replica on port ${port}: clock uncertainty ${u} s after 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The rows printed beside the checks: timings and what the operator sees. */
function reportRows(
  failover: Failover,
  timings: Awaited<ReturnType<typeof processingTimes>>,
  drainMs: number | null,
  notOkAnswers: string,
  figures: FailoverFigures,
  seen: Awaited<ReturnType<typeof whatTheOperatorSaw>>,
): Record<string, string> {
  return {
    'outage: primary gone → new primary reachable': `${failover.reachableAt - failover.downAt} ms`,
    'standby behind at the failover': failover.behind,
    'processing pause: new primary reachable → first event processed': ms(timings.firstMs),
    'new primary reachable → every event received before it processed': ms(timings.allMs),
    'events received before it and processed after it (median wait after it)': `${timings.late} (${ms(timings.medianMs)})`,
    'drain: load end → relays, processing, forwarding idle': ms(drainMs),
    'answers not 200 (replica, status, when after the primary went, took)': notOkAnswers,
    'proposals created from a later event: first event answered (after the primary went)': spread(
      figures.createdFromLaterAckedAt.map((t) => t - failover.downAt),
    ),
    'consig_relay_late_total (sum)': String(seen.late ?? 'absent'),
    'relayed after the watermark (replica, deliveries, when after the primary went)': seen.lateLines,
    'relay verify on the promoted standby, before the re-point (exit: what it said)': `${failover.verifyAtPromotion.status}: ${failover.verifyAtPromotion.said}`,
    'consig_relay_gaps_total (sum)': seen.gaps === null ? 'absent' : String(seen.gaps),
    'replicas’ error log lines': seen.errors,
  };
}

/** The answers other than 200: which replica, what, when (relative to the primary going), how long it took. */
function notOk(load: Load, downAt: number): string {
  const bad = load.answers.filter((a) => a.status !== 200);
  const shown = bad
    .slice(0, 6)
    .map((a) => `r${a.replica + 1} ${a.status || (a.error ?? 'none')} at ${a.start - downAt} ms, ${a.ms} ms`);
  return bad.length === 0 ? 'none' : `${bad.length}: ${shown.join('; ')}`;
}

/** `n: min … max ms`, or none. */
function spread(values: number[]): string {
  return values.length === 0
    ? 'none'
    : `${values.length}: ${Math.min(...values)} … ${Math.max(...values)} ms`;
}

const ms = (n: number | null) => (n === null ? 'n/a' : `${n} ms`);

interface Failover {
  downAt: number;
  reachableAt: number;
  behind: string;
  behindBytes: number | null;
  /** `relay verify` of the three spools against the promoted standby, before the address is re-pointed. */
  verifyAtPromotion: Verify;
}

interface Verify {
  status: number | null;
  /** Its lines naming a gap (or the first lines when it failed otherwise). */
  said: string;
}

/** `relay verify <spools>` against `url` (the built command, as an operator runs it beside the replicas). */
async function relayVerify(url: string, spools: readonly string[]): Promise<Verify> {
  const r = await runCliAsync(['relay', 'verify', ...spools], { DATABASE_URL: url });
  const lines = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.trim() !== '');
  const gaps = lines.filter((l) => l.includes('GAP'));
  return { status: r.status, said: (gaps.length > 0 ? gaps : lines.slice(0, 2)).join(' / ').slice(0, 600) };
}

/** Planned: the standby caught up, the primary stopped cleanly (its WAL all sent), the standby promoted, the address re-pointed. */
async function switchover(pair: PostgresPair, spools: readonly string[]): Promise<Failover> {
  await sleep(9000);
  await pair.waitCaughtUp();
  const behindBytes = await pair.lagBytes();
  const downAt = Date.now();
  await pair.primary.halt({ mode: 'fast' });
  await pair.promote();
  const verifyAtPromotion = await relayVerify(pair.standbyUrl, spools);
  pair.proxy.switchTo(pair.standbyPort);
  // Replayed up to where the primary was when asked; what came since, the fast shutdown sends.
  const behind = `${behindBytes} bytes at the stop (caught up before it)`;
  return { downAt, reachableAt: Date.now(), behind, behindBytes, verifyAtPromotion };
}

/** Unplanned: the replication link paused ~5 s under load, the primary SIGKILLed, the standby promoted as it was. */
async function unplannedFailover(pair: PostgresPair, spools: readonly string[]): Promise<Failover> {
  await sleep(6000);
  const pausedAt = Date.now();
  pair.replication.pause();
  await sleep(5000);
  const behindBytes = await pair.lagBytes();
  const downAt = Date.now();
  pair.primary.kill9();
  // What the link held is dropped with it: the standby never gets it.
  await pair.replication.close();
  await pair.promote();
  const verifyAtPromotion = await relayVerify(pair.standbyUrl, spools);
  pair.proxy.switchTo(pair.standbyPort);
  return {
    downAt,
    reachableAt: Date.now(),
    behind: `${downAt - pausedAt} ms of commits, ${behindBytes} bytes`,
    behindBytes,
    verifyAtPromotion,
  };
}

/** Until every relay's backlog is 0 and nothing is pending in processing or forwarding, twice in a row. */
async function waitDrained(url: string, replicas: FailoverReplica[], timeoutMs: number) {
  const until = Date.now() + timeoutMs;
  let drainedAt: number | null = null;
  let quiet = 0;
  while (Date.now() < until && quiet < 2) {
    const backlogs = await Promise.all(replicas.map((r) => metricSum(r.port, 'consig_relay_backlog')));
    const open = await withClient(url, async (c) => {
      const { rows } = await c.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM events WHERE status IN ('pending', 'failed'))
              + (SELECT count(*) FROM forward_deliveries WHERE status = 'pending') AS n`,
      );
      return Number(rows[0]?.n ?? -1);
    }).catch(() => -1);
    if (backlogs.every((b) => b === 0) && open === 0) {
      quiet += 1;
      drainedAt ??= Date.now();
    } else {
      quiet = 0;
      drainedAt = null;
    }
    await sleep(200);
  }
  const at = quiet >= 2 ? drainedAt : null;
  return {
    drainedAt: at,
    drainMs: (load: Load) => {
      const end = load.endedAt();
      return at === null || end === null ? null : Math.max(0, at - end);
    },
  };
}

/**
 * From the new primary's rows: the first event processed once it was reachable, and the last of
 * the events received before then (acknowledged from the spools during the outage included).
 */
async function processingTimes(url: string, reachableAt: number) {
  return withClient(url, async (c) => {
    const at = 'to_timestamp($1 / 1000.0)';
    const ms = (t: string) => `extract(epoch FROM ${t}) * 1000`;
    const { rows } = await c.query<{
      first: string | null;
      all: string | null;
      late: string;
      median: string | null;
    }>(
      `SELECT (SELECT ${ms('min(processed_at)')} FROM events WHERE processed_at >= ${at}) AS first,
              (SELECT ${ms('max(processed_at)')} FROM events WHERE received_at <= ${at}) AS all,
              (SELECT count(*) FROM events WHERE received_at <= ${at} AND processed_at >= ${at}) AS late,
              (SELECT ${ms(`percentile_disc(0.5) WITHIN GROUP (ORDER BY processed_at)`)} FROM events
                WHERE received_at <= ${at} AND processed_at >= ${at}) AS median`,
      [reachableAt],
    );
    const after = (v: string | null | undefined) =>
      v == null ? null : Math.max(0, Math.round(Number(v) - reachableAt));
    const r = rows[0];
    return {
      firstMs: after(r?.first),
      allMs: after(r?.all),
      late: Number(r?.late ?? 0),
      medianMs: after(r?.median),
    };
  });
}

/** The relay-gap counter summed over the replicas (null: no replica has it), and their error log lines. */
async function whatTheOperatorSaw(replicas: FailoverReplica[], downAt: number) {
  const counts = await Promise.all(replicas.map((r) => metricSum(r.port, 'consig_relay_gaps_total')));
  const lates = await Promise.all(replicas.map((r) => metricSum(r.port, 'consig_relay_late_total')));
  const known = counts.filter((n) => n !== null);
  const errors = replicas.flatMap((r) =>
    readFileSync(r.logPath, 'utf8')
      .split('\n')
      .filter((l) => /"level":"(error|fatal)"/.test(l))
      .map((l) => `${r.id}: ${(/"msg":"([^"]*)"/.exec(l)?.[1] ?? l).slice(0, 120)}`),
  );
  const distinct = [...new Set(errors)];
  // Deliveries relayed after the watermark passed them (a relay silent longer than CLUSTER_HOLDBACK_MAX_MS).
  const late = replicas.flatMap((r) =>
    readFileSync(r.logPath, 'utf8')
      .split('\n')
      .filter((l) => l.includes('relayed after the watermark'))
      .map((l) => {
        const line = JSON.parse(l) as { time: string; late: number };
        return `${r.id} ${line.late} at ${Date.parse(line.time) - downAt} ms`;
      }),
  );
  return {
    gaps: known.length === 0 ? null : known.reduce((s, n) => s + n, 0),
    lateLines: late.length === 0 ? 'none' : late.slice(0, 6).join('; '),
    late: lates.some((n) => n !== null) ? lates.reduce<number>((s, n) => s + (n ?? 0), 0) : null,
    errors: `${errors.length}${distinct.length > 0 ? `: ${distinct.slice(0, 4).join('; ')}` : ''}`,
  };
}
