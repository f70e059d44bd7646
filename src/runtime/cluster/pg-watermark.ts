import { type RelayBeat, type Watermark, watermarkOf } from '../../domain/watermark';
import { lockOrder } from '../../postgres/pg-locks';
import type { PgSql } from '../../postgres/pg-sql';

/**
 * The hold-back window on PostgreSQL (docs/cluster.md §10; the rule is src/domain/watermark.ts):
 * each relay's heartbeat in `relay_spools`, and `held_keys`, the work keys whose pending events are
 * above the watermark. Every pending event is either processed, or its key has a queued turn, or a
 * row in `held_keys` that a relay's beat releases (queueing its turn) once the watermark reaches it:
 * - the relay writes a row for each key of its batch whose events are all above the watermark, and
 *   queues a turn for the others (relay.ts);
 * - a turn stops a key at its first event above the watermark and writes that event's received_at;
 * - every relay's beat (a batch, or an idle pause) deletes the rows the watermark has reached and
 *   queues their keys' turns, in one transaction.
 * A row may be released, or written, once too often (a turn then finds nothing to do); none is lost:
 * a release skips the rows another transaction has locked, which are left for the next beat.
 */

/** CLUSTER_HOLDBACK_MAX_MS's default: a silent relay is waited for this long, then dropped. */
export const DEFAULT_HOLDBACK_MAX_MS = 5000;

/** Keys released per beat; the next beat (RELAY_INTERVAL_MS at most) takes the rest. */
const RELEASE_LIMIT = 2000;

/** The heartbeats of every spool, and PostgreSQL's clock as it read them. */
export interface Beats {
  beats: RelayBeat[];
  now: Date;
  /** Each spool's `relayed_through`: the last spool id PostgreSQL holds of it (relay.ts checks its own). */
  recorded: Map<string, number>;
  /** The timeline PostgreSQL writes on (one more at each promotion; migrations-pg/0007_failover.sql). */
  timeline: number;
}

export async function readBeats(sql: PgSql): Promise<Beats> {
  const rows = await sql.query<{
    now: Date;
    spool: string | null;
    replica: string;
    covered_through: Date;
    heartbeat_at: Date;
    live_since: Date;
    relayed_through: string | null;
    timeline: string;
  }>(
    `SELECT statement_timestamp() AS now, consig_timeline() AS timeline, s.spool, s.replica, s.covered_through, s.heartbeat_at, s.live_since,
       s.relayed_through
     FROM (SELECT 1) AS one LEFT JOIN relay_spools s ON true`,
  );
  const spools = rows.filter((r) => r.spool !== null);
  const beats = spools.map((r) => ({
    spool: r.spool as string,
    replica: r.replica,
    coveredThrough: r.covered_through,
    heartbeatAt: r.heartbeat_at,
    liveSince: r.live_since,
  }));
  const recorded = new Map(spools.map((r) => [r.spool as string, Number(r.relayed_through ?? 0)]));
  return { beats, now: rows[0]?.now ?? new Date(), recorded, timeline: Number(rows[0]?.timeline ?? 0) };
}

/** The watermark now, as a turn sees it (one statement). */
export async function currentWatermark(sql: PgSql, maxMs: number): Promise<Watermark> {
  const { beats, now } = await readBeats(sql);
  return watermarkOf(beats, now, maxMs);
}

/**
 * A spool's heartbeat, as its relay publishes it (in the batch's transaction, or an idle beat's):
 * `heartbeatAt` is PostgreSQL's clock, read in the same transaction.
 */
export interface Beat extends RelayBeat {
  /** The spool's relayed_through (kept if higher). */
  relayedThrough: number;
  /** A batch's: received_at of its newest delivery (`last_received_at`), and the row's last_relayed_at. */
  lastReceivedAt?: string;
  clockOffsetMs: number;
}

export async function publishBeat(sql: PgSql, b: Beat): Promise<void> {
  const batch = b.lastReceivedAt !== undefined;
  await sql.query(
    `INSERT INTO relay_spools (spool, replica, relayed_through, last_received_at, covered_through, heartbeat_at,
       live_since, clock_offset_ms)
     VALUES ($1, $2, $3, $8, $4, $5, $6, $7)
     ON CONFLICT (spool) DO UPDATE SET replica = excluded.replica,
       relayed_through = greatest(relay_spools.relayed_through, excluded.relayed_through),
       covered_through = excluded.covered_through, heartbeat_at = excluded.heartbeat_at,
       live_since = excluded.live_since, clock_offset_ms = excluded.clock_offset_ms
       ${batch ? ', last_relayed_at = now(), last_received_at = excluded.last_received_at' : ''}`,
    [
      b.spool,
      b.replica,
      b.relayedThrough,
      b.coveredThrough,
      b.heartbeatAt,
      b.liveSince,
      b.clockOffsetMs,
      b.lastReceivedAt ?? null,
    ],
  );
}

/** A key held back until the watermark reaches `until` (the received_at of its oldest such event). */
export interface Hold {
  key: string;
  until: Date;
}

/**
 * Writes holds, keeping the earlier `until` of a key already held. Keys in the one sorted order
 * every writer uses (postgres/pg-locks.ts `lockOrder`): two writers of overlapping keys cannot deadlock.
 */
export async function hold(sql: PgSql, holds: readonly Hold[]): Promise<void> {
  if (holds.length === 0) return;
  const earliest = new Map<string, Date>();
  for (const h of holds) {
    const seen = earliest.get(h.key);
    if (seen === undefined || h.until.getTime() < seen.getTime()) earliest.set(h.key, h.until);
  }
  const keys = lockOrder(earliest.keys());
  await sql.query(
    `INSERT INTO held_keys (key, until) SELECT * FROM unnest($1::text[], $2::timestamptz[])
     ON CONFLICT (key) DO UPDATE SET until = least(held_keys.until, excluded.until)`,
    [keys, keys.map((k) => earliest.get(k) as Date)],
  );
}

/** Deletes the holds the watermark `at` has reached (skipping any another transaction holds); their keys. */
export async function release(sql: PgSql, at: Date | null): Promise<string[]> {
  const rows = await sql.query<{ key: string }>(
    `DELETE FROM held_keys WHERE key IN (
       SELECT key FROM held_keys WHERE $1::timestamptz IS NULL OR until <= $1
       ORDER BY until LIMIT ${RELEASE_LIMIT} FOR UPDATE SKIP LOCKED)
     RETURNING key`,
    [at],
  );
  return rows.map((r) => r.key);
}
