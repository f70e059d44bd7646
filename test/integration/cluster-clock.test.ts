import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { percentile } from '../../rigs/harness';
import type { Clock } from '../../src/clock';
import type { Evento } from '../../src/domain/catalogue';
import { HAPPY_PATH, replay } from '../../src/domain/lifecycle';
import { DRIFT_PER_MS } from '../../src/domain/order-time';
import { clusterBed } from '../helpers/cluster-bed';
import { count, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { type LatencyProxy, startLatencyProxy } from '../helpers/latency-proxy';
import { delivery } from '../helpers/payloads';
import { migrateUrl } from '../helpers/postgres';
import type { TestReceiver } from '../helpers/receiver';

/**
 * Issue 36: order across replicas that does not depend on their clocks. Three real replicas (the
 * whole receiver with DATABASE_URL, in this process) behind a round-robin on one real PostgreSQL;
 * one replica's wall clock is set off PostgreSQL's through the clock the receiver is given
 * (StartOptions.clock, the one clock every part of a replica reads: webhook received_at, the relay,
 * the turns); its monotonic clock is the process's, as a real machine's is whatever its wall clock
 * says. Each proposal's next delivery is sent ~50 ms after the previous answer, to the next replica,
 * life cycles and the order-sensitive paths (`averbacao.solicitada` then `proposta.negada` ends at
 * averbacao_solicitada, the reverse at negada). Before issue 36 a replica 100 ms off reordered most
 * proposals, and one 1 s behind held everyone's processing back by 1 s.
 *
 * Each case fills in one row of the table (printed after the file, and written to
 * test-artifacts/cluster-clock.md). The issue's own size: CLUSTER_CLOCK_LIFECYCLES=100
 * CLUSTER_CLOCK_SENSITIVE=80 (docs/cluster.md §10 has the command).
 */

const bed = clusterBed({ prefix: 'clock' });

const ORDER_SENSITIVE: readonly (readonly Evento[])[] = [
  [
    'proposta.criada',
    'proposta.pre_aprovada',
    'proposta.aprovada',
    'averbacao.solicitada',
    'proposta.negada',
  ],
  [
    'proposta.criada',
    'proposta.pre_aprovada',
    'proposta.aprovada',
    'proposta.negada',
    'averbacao.solicitada',
  ],
];
const envCount = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
/** Small by default: stable on a loaded 2-core machine. */
const LIFECYCLES = envCount('CLUSTER_CLOCK_LIFECYCLES', 9);
const SENSITIVE = envCount('CLUSTER_CLOCK_SENSITIVE', 12);
const AT_ONCE = 6;
/** Between a proposal's answer and its next delivery. */
const GAP_MS = 50;
/** The contract deadline of the issue: 200 → transition recorded, p99. */
const P99_DEADLINE_MS = 1000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The process's clocks, the wall clock `shift()` ms off (read at each call: it may step). */
function shiftedClock(shift: () => number): Clock {
  return { now: () => new Date(Date.now() + shift()), monotonic: () => performance.now() };
}

interface Sent {
  nu: number;
  eventos: readonly Evento[];
  sensitive: boolean;
  /** Per delivery: its webhook_id and when its 200 arrived (this process's clock, PostgreSQL's machine). */
  sent: { id: string; answeredAt: number }[];
}

/** Each proposal's deliveries in turn, GAP_MS apart, each to the replica after the previous one's. */
async function roundRobin(replicas: readonly TestReceiver[], proposals: readonly Sent[]): Promise<void> {
  const queue = proposals.map((p, i) => ({ p, first: i }));
  const chain = async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      const { p, first } = next;
      for (const [step, evento] of p.eventos.entries()) {
        const replica = replicas[(first + step) % replicas.length] as TestReceiver;
        const body = delivery(evento, { nu_proposta: p.nu });
        const res = await sendSigned(replica.url, body);
        if (res.status !== 200 || res.body.status !== 'accepted')
          throw new Error(`${evento} of ${p.nu}: answered ${res.status} ${String(res.body.status)}`);
        p.sent.push({ id: (body.metadata as { webhook_id: string }).webhook_id, answeredAt: Date.now() });
        await sleep(GAP_MS);
      }
    }
  };
  await Promise.all(Array.from({ length: AT_ONCE }, chain));
}

/** A counter or gauge of `r`'s registry (the text /metrics serves; `r` may be stopped). */
async function metric(r: TestReceiver, name: string): Promise<number> {
  const text = await r.metrics.registry.metrics();
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}

/** One row of the table. */
interface Row {
  clock: string;
  transitions: number;
  wrong: number;
  proposals: number;
  affected: number;
  sensitive: number;
  sensitiveElsewhere: number;
  p99Ms: number;
  p50Ms: number;
  /** 200 → its event committed in PostgreSQL by the relay, p99. */
  relayP99Ms: number;
  /** Idle, at the end: the off replica's heartbeat_at minus its covered_through (what it holds back). */
  idleHoldMs: number;
  /**
   * That last heartbeat's window on PostgreSQL's clock: from heartbeat_at (its read of the clock)
   * to the write of its row (`written_at`, this test's trigger): covered_through was computed in it.
   */
  beatWindowMs: number;
  /** The off replica's clock uncertainty at that heartbeat (consig_cluster_clock_uncertainty_seconds). */
  uncertaintyMs: number;
  /** received_at minus order_at of the shifted replica's events (median): the shift, seen. */
  seenShiftMs: number;
}
const table: Row[] = [];

afterAll(() => {
  const lines = [
    '| one replica’s clock | transitions recorded late or not applied | proposals affected | order-sensitive proposals ending elsewhere than one process would | 200 → transition p99 (p50) | 200 → relayed p99 | received_at − order_at on that replica (median) | its heartbeat’s hold-back, idle |',
    '|---|---|---|---|---|---|---|---|',
    ...table
      .map((r) =>
        [
          r.clock,
          `${r.wrong} of ${r.transitions}`,
          `${Math.round((100 * r.affected) / r.proposals)} %`,
          `${r.sensitiveElsewhere} of ${r.sensitive}`,
          `${Math.round(r.p99Ms)} ms (${Math.round(r.p50Ms)} ms)`,
          `${Math.round(r.relayP99Ms)} ms`,
          `${Math.round(r.seenShiftMs)} ms`,
          `${r.idleHoldMs.toFixed(2)} ms (bounds ${holdBounds(r).lower.toFixed(2)} to ${holdBounds(r).upper.toFixed(2)})`,
        ].join(' | '),
      )
      .map((l) => `| ${l} |`),
  ];

  const dir = join(__dirname, '..', '..', 'test-artifacts');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'cluster-clock.md'), `${lines.join('\n')}\n`);
  console.info(lines.join('\n'));
});

/**
 * Three replicas, the third one's wall clock `shift()` ms off; every proposal sent round-robin
 * (`during` runs alongside); waits until all is processed and returns the row, with what a test
 * asserts on.
 */
async function run(
  clock: string,
  shift: () => number,
  during: () => Promise<void> = async () => undefined,
): Promise<{ row: Row; replicas: TestReceiver[]; mismatches: string[] }> {
  // 30 s, not the default 5 s: three replicas, PostgreSQL and this test share a loaded 2-core
  // machine, and a relay starved of CPU for 5 s would be dropped from the watermark and what it
  // relays afterwards processed late (consig_relay_late_total, asserted 0 below): a failure of
  // liveness under load, not of the order clock this file is about (cluster-order.test.ts saw it once).
  // The default itself, a silent relay waited for and then dropped, is cluster-order.test.ts's last case.
  const holdback = { CLUSTER_HOLDBACK_MAX_MS: '30000' };
  // When each heartbeat's row is written, on PostgreSQL's clock (a column and trigger of this test's
  // database only, added before any replica runs): the end of the window its covered_through was
  // computed in.
  await migrateUrl(bed.url);
  await bed.pool.query(`
    ALTER TABLE relay_spools ADD COLUMN written_at timestamptz;
    CREATE FUNCTION test_written_at() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN NEW.written_at := clock_timestamp(); RETURN NEW; END $$;
    CREATE TRIGGER test_written_at BEFORE INSERT OR UPDATE ON relay_spools
      FOR EACH ROW EXECUTE FUNCTION test_written_at();`);
  const replicas = [
    await bed.replica({ REPLICA_ID: 'replica-a', ...holdback }),
    await bed.replica({ REPLICA_ID: 'replica-b', ...holdback }),
    await bed.replica({ REPLICA_ID: 'replica-off', ...holdback }, { clock: shiftedClock(shift) }),
  ];
  // When each transition was recorded, on PostgreSQL's clock (this machine's): a column of this
  // test's database only, filled by its default (the turns write `at` on their replica's clock).
  await bed.pool.query(
    'ALTER TABLE proposal_transitions ADD COLUMN recorded_at timestamptz DEFAULT clock_timestamp()',
  );
  const proposals: Sent[] = [
    ...Array.from({ length: LIFECYCLES }, (_, i) => ({
      nu: 7_360_000 + i,
      eventos: HAPPY_PATH,
      sensitive: false,
    })),
    ...Array.from({ length: SENSITIVE }, (_, i) => ({
      nu: 7_361_000 + i,
      eventos: ORDER_SENSITIVE[i % 2] as readonly Evento[],
      sensitive: true,
    })),
  ].map((p) => ({ ...p, sent: [] }));
  const total = proposals.reduce((n, p) => n + p.eventos.length, 0);
  await Promise.all([roundRobin(replicas, proposals), during()]);
  await waitFor(
    async () =>
      (await count(bed.pool, 'SELECT count(*) AS n FROM events')) === total &&
      (await count(bed.pool, "SELECT count(*) AS n FROM events WHERE status <> 'done'")) === 0,
    `${total} events relayed and processed`,
    120_000,
  );
  // The off replica stops (its relay finishes its turn, and its metrics keep their values): its
  // last heartbeat's row and its uncertainty gauge are then of the same heartbeat.
  await bed.stop(replicas[2] as TestReceiver);
  return { ...(await tally(clock, proposals, replicas[2] as TestReceiver)), replicas };
}

/** Compares every proposal's transitions with one process's (`replay`), and times them. */
async function tally(
  clock: string,
  proposals: readonly Sent[],
  off: TestReceiver,
): Promise<{ row: Row; mismatches: string[] }> {
  const transitions = await rows<{
    nu_proposta: string;
    dedup_key: string;
    evento: string;
    from_status: string | null;
    to_status: string;
    applied: boolean;
    reason: string;
    recorded: string;
    relayed: string;
  }>(
    bed.pool,
    `SELECT t.nu_proposta, e.dedup_key, t.evento, t.from_status, t.to_status, t.applied, t.reason,
       (extract(epoch FROM t.recorded_at) * 1000)::float8 AS recorded,
       (extract(epoch FROM e.relayed_at) * 1000)::float8 AS relayed
     FROM proposal_transitions t JOIN events e ON e.id = t.event_id ORDER BY t.id`,
  );
  const statuses = new Map(
    (
      await rows<{ nu_proposta: string; status: string }>(
        bed.pool,
        'SELECT nu_proposta, status FROM proposals',
      )
    ).map((r) => [r.nu_proposta, r.status]),
  );
  const mismatches: string[] = [];
  const row: Row = {
    clock,
    transitions: 0,
    wrong: 0,
    proposals: proposals.length,
    affected: 0,
    sensitive: 0,
    sensitiveElsewhere: 0,
    p99Ms: 0,
    p50Ms: 0,
    relayP99Ms: 0,
    seenShiftMs: 0,
    idleHoldMs: 0,
    beatWindowMs: 0,
    uncertaintyMs: 0,
  };
  const answered = new Map(proposals.flatMap((p) => p.sent.map((s) => [s.id, s.answeredAt] as const)));
  for (const p of proposals) {
    const expected = replay(p.eventos);
    const got = transitions
      .filter((t) => t.nu_proposta === String(p.nu))
      .map((t) => [t.evento, t.from_status, t.to_status, t.applied, t.reason]);
    const want = expected.transitions.map((t) => [t.evento, t.from, t.to, t.applied, t.reason]);
    const wrong =
      want.filter((w, i) => JSON.stringify(w) !== JSON.stringify(got[i])).length +
      Math.max(0, got.length - want.length);
    row.transitions += want.length;
    row.wrong += wrong;
    if (wrong > 0) {
      row.affected += 1;
      mismatches.push(`${p.nu}: ${JSON.stringify(got)} instead of ${JSON.stringify(want)}`);
    }
    if (p.sensitive) {
      row.sensitive += 1;
      if (statuses.get(String(p.nu)) !== expected.status) row.sensitiveElsewhere += 1;
    }
  }
  const latencies = transitions
    .map((t) => Number(t.recorded) - (answered.get(t.dedup_key) as number))
    .sort((a, b) => a - b);
  row.p99Ms = percentile(latencies, 0.99);
  row.p50Ms = percentile(latencies, 0.5);
  row.relayP99Ms = percentile(
    transitions.map((t) => Number(t.relayed) - (answered.get(t.dedup_key) as number)).sort((a, b) => a - b),
    0.99,
  );
  const [seen] = await rows<{ ms: number }>(
    bed.pool,
    `SELECT (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM received_at - order_at) * 1000))::float8 AS ms
     FROM events WHERE first_replica = 'replica-off'`,
  );
  row.seenShiftMs = Number(seen?.ms);
  // Idle now: how far behind PostgreSQL's clock the off replica's last heartbeat said it covers.
  const [hold] = await rows<{ ms: number; window: number }>(
    bed.pool,
    `SELECT (extract(epoch FROM heartbeat_at - covered_through) * 1000)::float8 AS ms,
       (extract(epoch FROM written_at - heartbeat_at) * 1000)::float8 AS window
     FROM relay_spools WHERE replica = 'replica-off'`,
  );
  row.idleHoldMs = Number(hold?.ms);
  row.beatWindowMs = Number(hold?.window);
  row.uncertaintyMs = 1000 * (await metric(off, 'consig_cluster_clock_uncertainty_seconds'));
  table.push(row);
  return { row, mismatches };
}

/**
 * The off replica's idle heartbeat, bounded on both sides by what the code guarantees (relay.ts
 * `observe`, `ownBeat`; domain/order-time.ts), with no threshold on the machine's speed. The relay
 * reads PostgreSQL's clock, P(t_s), and publishes it as heartbeat_at; then, later on its thread
 * (t_c), computes covered_through from its estimate E of PostgreSQL's time (idle: nothing
 * unrelayed, nothing in flight); then writes its row (written_at, t_w ≥ t_c). The estimate is
 * within the uncertainty U of the truth at t_c (|E − P(t_c)| ≤ U: half the best round trip, the
 * reading's 1 ms resolution, the drift since, which grows by DRIFT_PER_MS over at most the window
 * to t_c; the floor of `orderTimeAt` keeps an earlier estimate only while it is ahead, and idle the
 * previous one is a relay interval old), and covered_through is E cut to whole milliseconds.
 *   heartbeat_at − covered_through ≤ P(t_s) − (P(t_c) − U) + 1 ms ≤ U + 1 ms
 *   heartbeat_at − covered_through ≥ heartbeat_at − (P(t_c) + U) ≥ −(written_at − heartbeat_at) − U
 * A wall clock ahead by s made it −s before issue 36 (outside the lower bound unless s is within
 * the window and U, a few ms on loopback), one behind made it +s (outside the upper).
 */
function holdBounds(row: Row): { lower: number; upper: number } {
  const u = row.uncertaintyMs + DRIFT_PER_MS * (row.beatWindowMs + 1);
  return { lower: -row.beatWindowMs - u, upper: u + 1 };
}

function expectHoldWithinUncertainty(row: Row): void {
  const bounds = holdBounds(row);
  const within = row.idleHoldMs >= bounds.lower && row.idleHoldMs <= bounds.upper;
  expect({ hold: row.idleHoldMs, ...bounds, within }).toEqual({
    hold: row.idleHoldMs,
    ...bounds,
    within: true,
  });
}

async function expectOrdered(o: { row: Row; replicas: TestReceiver[]; mismatches: string[] }): Promise<void> {
  expect({ wrong: o.row.wrong, mismatches: o.mismatches.slice(0, 5) }).toEqual({ wrong: 0, mismatches: [] });
  expect(o.row.sensitiveElsewhere).toBe(0);
  // Nothing was relayed below the watermark.
  for (const r of o.replicas) expect(await metric(r, 'consig_relay_late_total')).toBe(0);
  // The deadline, on a machine quiet enough to measure it (CLUSTER_CLOCK_P99=1): three
  // replicas, PostgreSQL and this test share the cores, and on a loaded 2-core machine the relays'
  // own lag alone passes 1 s whatever the clocks (the reference row shows it).
  if (process.env.CLUSTER_CLOCK_P99 === '1') expect(o.row.p99Ms).toBeLessThanOrEqual(P99_DEADLINE_MS);
}

it.each<[string, number]>([
  ['0 (reference)', 0],
  ['+20 ms', 20],
  ['+100 ms', 100],
  ['−100 ms', -100],
  ['−1 s', -1000],
])(
  'one replica’s wall clock %s: every proposal processed as one process would, and nobody held back by its error',
  async (name, ms) => {
    const o = await run(name, () => ms);
    // The replica did acknowledge on its shifted clock (received_at), and ordered on PostgreSQL's.
    expect(Math.abs(o.row.seenShiftMs - ms)).toBeLessThan(25);
    // Its heartbeats are on PostgreSQL's clock too: a replica 1 s behind no longer holds the
    // watermark back by its error, nor one ahead lets it pass what it has not relayed (before
    // issue 36 the hold was minus the shift: +1000 ms at −1 s, −20 and −101 ms at +20 and +100 ms).
    expectHoldWithinUncertainty(o.row);
    await expectOrdered(o);
  },
  180_000,
);

it('a wall clock that steps back 1 s mid-run: found at the next heartbeat, and no delivery misordered', async () => {
  let shift = 0;
  const o = await run(
    'stepping 0 → −1 s',
    () => shift,
    async () => {
      await sleep(500);
      shift = -1000;
    },
  );
  expectHoldWithinUncertainty(o.row);
  await expectOrdered(o);
  const off = o.replicas[2] as TestReceiver;
  expect(await metric(off, 'consig_cluster_clock_steps_total\\{clock="wall"\\}')).toBe(1);
  // The wall clock's step is no step of the order clock (the failure shows any such warning whole).
  const orderSteps = o.replicas.flatMap((r) =>
    r.logs.lines.filter((l) => String(l.msg).includes("estimate of PostgreSQL's clock stepped")),
  );
  expect(orderSteps).toEqual([]);
  expect(off.logs.lines.some((l) => String(l.msg).includes('wall clock stepped'))).toBe(true);
}, 180_000);

describe('what the offset measurement cannot see', () => {
  let proxy: LatencyProxy | null = null;
  afterEach(async () => {
    await proxy?.close();
    proxy = null;
  });

  it('a replica whose round trips to PostgreSQL are too slow to bound its offset within 25 ms says so: a warning naming the bound, and the metric', async () => {
    const { port } = new URL(bed.url);
    // 40 ms each way: every round trip at least 80 ms, so the offset is known within 40 ms at best.
    proxy = await startLatencyProxy({ host: '127.0.0.1', port: Number(port) }, 40);
    const near = await bed.replica({ REPLICA_ID: 'replica-near' });
    const far = await bed.replica({ REPLICA_ID: 'replica-far', DATABASE_URL: proxy.through(bed.url) });
    const uncertain = (r: TestReceiver) =>
      r.logs.lines.filter((l) => String(l.msg).includes('too slow to bound its clock offset'));
    await waitFor(() => uncertain(far).length > 0, 'the far replica’s warning');
    expect(uncertain(far)[0]).toMatchObject({ level: 'warn', bound_ms: 25 });
    expect(Number(uncertain(far)[0]?.uncertainty_ms)).toBeGreaterThan(25);
    expect(await metric(far, 'consig_cluster_clock_uncertainty_seconds')).toBeGreaterThan(0.025);
    // The near one's is within the bound (loopback round trips; its first reading may have been
    // slow on a loaded machine, a tighter one replaces it).
    await waitFor(
      async () => (await metric(near, 'consig_cluster_clock_uncertainty_seconds')) <= 0.025,
      'the near replica within the bound',
    );
  }, 60_000);
});
