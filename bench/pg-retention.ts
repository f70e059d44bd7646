import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Pool } from 'pg';
import { startLocalPostgres } from '../rigs/local-postgres';
import { migratePostgres } from '../src/postgres/pg-migrate';
import { clientRunners, pgStoreSql } from '../src/postgres/pg-statements';
import { type BatchReport, prunePass } from '../src/core/prune-pass';
import { RELAY_LOCK_KEY } from '../src/postgres/pg-locks';
import { retentionCutoff } from '../src/domain/retention';
import { percentile } from '../rigs/harness';

/**
 * RETENTION_DAYS on PostgreSQL (src/core/prune-pass.ts): how long each batch's transaction
 * holds its row locks, how fast a pass goes, and what a relay-shaped writer contending for the same
 * rows waits meanwhile.
 *
 *   npm run build && node dist/bench/pg-retention.js [--events 100000] [--messages 20000] [--body-bytes 1500]
 *
 * A throwaway PostgreSQL on this machine's binaries with its durable defaults (fsync and
 * synchronous_commit on). Seeded with `--events` finished events received 40 days ago (80 % done,
 * 5 % ignored, 5 % invalid, 10 % dead: the dead keep their bodies) with bodies of `--body-bytes`,
 * and `--messages` forwarded messages of that age delivered to two destinations (one attempt each).
 * Then one pass (RETENTION_DAYS=30) runs while a "relay" loop, in the relay's shape (its advisory
 * lock, then an `ON CONFLICT (dedup_key) DO UPDATE` counting a duplicate on a random old event, one
 * commit), measures its transactions; the same loop runs alone first as the baseline. A second
 * pass (the next hour's, nothing left to remove) is timed last. One JSON line.
 */

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '100000' },
    messages: { type: 'string', default: '20000' },
    'body-bytes': { type: 'string', default: '1500' },
  },
});
const EVENTS = Number(values.events);
const MESSAGES = Number(values.messages);
const BODY_BYTES = Number(values['body-bytes']);

async function seed(pool: Pool): Promise<void> {
  const old = new Date(Date.now() - 40 * 86_400_000);
  await pool.query(
    `INSERT INTO events (dedup_key, webhook_id, kind, evento, nu_proposta, received_at, body, body_bytes, status, processed_at)
     SELECT 'wh_' || g, 'wh_' || g, 'event', 'proposta.criada', (g % 5000)::text, $1::timestamptz + g * interval '1 millisecond',
       convert_to(repeat('x', $2), 'UTF8'), $2,
       CASE WHEN g % 20 < 16 THEN 'done' WHEN g % 20 = 16 THEN 'ignored' WHEN g % 20 = 17 THEN 'invalid' ELSE 'dead' END,
       $1::timestamptz
     FROM generate_series(1, $3) g`,
    [old, BODY_BYTES, EVENTS],
  );
  await pool.query(
    `INSERT INTO forward_messages (webhook_id, type, event_id, evento, nu_proposta, order_key, created_at, body)
     SELECT 'msg_' || g, 'event.received', g, 'proposta.criada', (g % 5000)::text, 'p:' || (g % 5000), $1, '{}'
     FROM generate_series(1, $2) g`,
    [old, MESSAGES],
  );
  await pool.query(
    `INSERT INTO forward_deliveries (message_id, destination, order_key, status, attempts, created_at, updated_at, delivered_at)
     SELECT m.id, d, m.order_key, 'delivered', 1, $1, $1, $1 FROM forward_messages m, unnest(ARRAY['a', 'b']) d`,
    [old],
  );
  await pool.query(
    `INSERT INTO forward_attempts (delivery_id, attempt, started_at, duration_ms, http_status, outcome)
     SELECT id, 1, $1, 12, 200, 'delivered' FROM forward_deliveries`,
    [old],
  );
  await pool.query('VACUUM ANALYZE');
}

/** The relay-shaped writer: until `stop`, one transaction after another; returns their durations (ms). */
async function relayLoop(pool: Pool, stop: () => boolean): Promise<number[]> {
  const client = await pool.connect();
  const times: number[] = [];
  try {
    while (!stop()) {
      const key = `wh_${1 + Math.floor(Math.random() * EVENTS)}`;
      const started = performance.now();
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock($1)', [RELAY_LOCK_KEY.toString()]);
      await client.query(
        `INSERT INTO events AS e (dedup_key, kind, received_at, status) VALUES ($1, 'event', now(), 'pending')
         ON CONFLICT (dedup_key) DO UPDATE SET duplicates = e.duplicates + 1`,
        [key],
      );
      await client.query('COMMIT');
      times.push(performance.now() - started);
    }
  } finally {
    client.release();
  }
  return times;
}

const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

function summary(times: readonly number[]): { n: number; p50: number; p99: number; max: number } {
  const sorted = Float64Array.from(times).sort();
  const round = (v: number) => Math.round(v * 100) / 100;
  return {
    n: sorted.length,
    p50: round(percentile(sorted, 0.5)),
    p99: round(percentile(sorted, 0.99)),
    max: round(sorted[sorted.length - 1] ?? 0),
  };
}

async function main(): Promise<void> {
  const pg = await startLocalPostgres();
  const pool = new Pool({ connectionString: pg.url, max: 4 });
  try {
    await migratePostgres(pool);
    await seed(pool);
    let baselineDone = false;
    const baselineRun = relayLoop(pool, () => baselineDone);
    await new Promise((r) => setTimeout(r, 3000));
    baselineDone = true;
    const baseline = await baselineRun;

    const client = await pool.connect();
    const log = pgStoreSql(clientRunners(client));
    const batches: BatchReport[] = [];
    let passDone = false;
    const during = relayLoop(pool, () => passDone);
    const started = performance.now();
    const now = new Date();
    const result = await prunePass(log, retentionCutoff(now, 30), now, {
      onBatch: (b) => batches.push(b),
    });
    const seconds = (performance.now() - started) / 1000;
    passDone = true;
    const relay = await during;
    // The next hour's pass: the same walk, with nothing left to remove.
    const again = performance.now();
    await prunePass(log, retentionCutoff(new Date(), 30), new Date());
    const secondPass = (performance.now() - again) / 1000;
    client.release();
    const bodies = batches.filter((b) => b.kind === 'bodies').map((b) => b.ms);
    const messages = batches.filter((b) => b.kind === 'messages').map((b) => b.ms);
    console.log(
      JSON.stringify({
        events: EVENTS,
        messages: MESSAGES,
        body_bytes: BODY_BYTES,
        pruned: result.pruned,
        forwarded: result.forwarded,
        pass_seconds: Math.round(seconds * 100) / 100,
        bodies_phase_seconds: Math.round(sum(bodies) / 10) / 100,
        messages_phase_seconds: Math.round(sum(messages) / 10) / 100,
        events_walked_per_s: Math.round(EVENTS / (sum(bodies) / 1000)),
        second_pass_seconds: Math.round(secondPass * 100) / 100,
        messages_removed_per_s: Math.round(result.forwarded / (sum(messages) / 1000)),
        body_batch_ms: summary(bodies),
        message_batch_ms: summary(messages),
        relay_tx_ms_alone: summary(baseline),
        relay_tx_ms_during_pass: summary(relay),
        loadavg_1m: Math.round(loadavg()[0]! * 100) / 100,
      }),
    );
  } finally {
    await pool.end();
    await pg.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
