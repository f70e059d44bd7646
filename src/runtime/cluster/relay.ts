import { type BackgroundGate, gateCleared } from '../../domain/answer-first';
import { type SpoolGap, spoolGap } from '../../domain/relay-gap';
import type { SpoolEvent, SpoolRow } from '../../domain/spool-row';
import {
  clockOffsetMs,
  coveredThrough,
  liveSinceAfterBeat,
  type RelayBeat,
  type Watermark,
  watermarkOf,
} from '../../domain/watermark';
import { sharedWorkKeyOf, workKeyOf, type WorkKeyParts } from '../../domain/work-key';
import { holdKeys, RELAY_LOCK_KEY } from '../../postgres/pg-locks';
import type { ConnectionLimits, PgPool } from '../../postgres/connection';
import type { OrderClock, OrderReading } from './order-clock';
import { type ClusterLogger, type PgSql, sqlOf } from '../../postgres/pg-sql';
import { inPoolTransaction } from '../../postgres/pg-statements';
import {
  type Beat,
  DEFAULT_HOLDBACK_MAX_MS,
  hold,
  type Hold,
  publishBeat,
  readBeats,
  release,
} from './pg-watermark';

/**
 * The relay (contract §10, docs/cluster.md §6): moves what this replica acknowledged from its local
 * SQLite spool into PostgreSQL, in batches, so that the answer to the service never waits for the
 * network. Each batch is one PostgreSQL transaction:
 * 1. an advisory lock shared by every replica's relay, so `events.id` follows commit order (a
 *    turn that processed a proposal's id 10 never later finds a committed id 9 behind it);
 * 2. the delivery rows, keyed by (spool, spool_id): a batch sent again after a lost commit
 *    acknowledgement inserts nothing, and only the rows new to PostgreSQL go on;
 * 3. their events, deduplicated on dedup_key across replicas: a copy already there (acknowledged by
 *    another replica) adds 1 to its `duplicates`; a local `duplicate` answer adds 1 as well;
 * 4. for each work key that got a new pending event: a turn (pg-boss, same transaction) when the
 *    watermark is already past one of its events, else a hold until it is (watermark.ts).
 * The batch also publishes the spool's heartbeat (what it now covers) and releases the holds the
 * watermark has now reached; an idle pass of the loop does both in a transaction of its own
 * (`beat`; docs/cluster.md §10, the hold-back window). The spool's cursor moves only after the commit.
 * PostgreSQL down or failing over: the batch is tried again with backoff while the spool keeps
 * acknowledging.
 */

/** What the relay reads from the spool (src/sqlite/spool.ts implements it on the SQLite file). */
export interface RelaySpool {
  readonly id: string;
  relayedThrough(): number;
  read(afterId: number, limit: number): SpoolRow[];
  advance(throughId: number, at: string): void;
  /** Moves the cursor back (PostgreSQL lacks what came after); how many of those rows the spool holds. */
  rewind(toId: number, at: string): number;
  /** The oldest received_at among the deliveries after `afterId` (not relayed yet); null if none. */
  oldestAfter(afterId: number): string | null;
  /** Deliveries acknowledged here and not relayed yet (sqlite/spool.ts); what a stop leaves is logged. */
  backlog?(): { count: number };
}

export interface RelayOptions {
  replicaId: string;
  batch: number;
  /** Pause when the spool is empty; a nudge (a new delivery) wakes the relay sooner. */
  intervalMs: number;
  queueTurns(sql: PgSql, keys: readonly string[]): Promise<void>;
  now(): Date;
  logger: ClusterLogger;
  /** After each committed batch: rows, and each delivery's seconds from acknowledgement to commit. */
  onBatch?(rows: number, delays: readonly number[]): void;
  onError?(error: Error): void;
  /** PG_LOCK_TIMEOUT_MS: connection.ts {@link ConnectionLimits.lockTimeoutMs}. @default 5000 */
  lockTimeoutMs?: ConnectionLimits['lockTimeoutMs'];
  /**
   * CLUSTER_HOLDBACK_MAX_MS: a relay silent this long is dropped from the watermark (once another
   * has been live as long). @default DEFAULT_HOLDBACK_MAX_MS
   */
  holdbackMaxMs?: number;
  /**
   * The oldest received_at of the requests this replica is answering whose delivery is not in the
   * spool yet (their received_at is taken when they arrive); null if none. @default none
   */
  oldestInFlight?(): string | null;
  /**
   * Answers first (issue 23): each pass of the loop (a batch, or an idle heartbeat) waits while a
   * webhook answer is being made on this replica. The rows wait in the spool; the heartbeat it
   * delays is bounded by the gate's floor (DEFAULT_DEFERRAL: a slice every 500 ms at the latest).
   * @default none (never waits)
   */
  gate?: BackgroundGate;
  /** After each heartbeat: the watermark as this beat saw it, this replica's clock offset, keys released. */
  onBeat?(beat: BeatFigures): void;
  /** Deliveries relayed below the watermark (this spool had been dropped from it): processed late. */
  onLate?(rows: number): void;
  /** PostgreSQL lacked deliveries this spool had relayed (it failed over and lost commits): sent again. */
  onGap?(gap: SpoolGap, resend: number): void;
  /**
   * Issue 36: this replica's estimate of PostgreSQL's clock, which the webhook route stamps each
   * delivery with (`order_at`); every heartbeat reads PostgreSQL's clock into it, and says what it
   * covers on it. @default none: the order time is `now()`, the replica's own clock (as before)
   */
  orderClock?: Pick<OrderClock, 'begin' | 'read' | 'now'>;
}

/** What a transaction of the relay read of the heartbeats, and this spool's own beat as of then. */
interface Observed extends Pick<BeatFigures, 'timeline' | 'clockOffsetMs' | 'reading'> {
  now: Date;
  others: RelayBeat[];
  /** The watermark before this transaction (with this spool's last published beat). */
  before: Watermark;
  liveSince: Date;
  own: Beat;
}

export interface BeatFigures {
  /** PostgreSQL's timeline as this beat read it (a promotion starts a new one). */
  timeline: number;
  watermark: Watermark;
  /** This replica's clock minus PostgreSQL's, ms. */
  clockOffsetMs: number;
  released: number;
  /** The reading of PostgreSQL's clock this heartbeat made (null without an orderClock). */
  reading: OrderReading | null;
}

/**
 * The longest pause between two tries while PostgreSQL is away. A try costs one connection attempt;
 * a longer pause would only delay the catch-up after a failover (5 s measured 5 s of extra lag).
 */
const RETRY_MAX_MS = 1000;

/** Statuses the spool's events arrive with: only `pending` ones are processed in PostgreSQL. */
function relayedStatus(local: string): 'pending' | 'ignored' | 'invalid' {
  // done/failed/dead only exist in a spool that ran in SQLite mode before: replayed here, so that
  // PostgreSQL's tables are built from the whole history.
  return local === 'ignored' || local === 'invalid' ? local : 'pending';
}

/**
 * Thrown inside a relay transaction that found PostgreSQL behind the spool: the transaction is
 * rolled back (it publishes nothing), the cursor has moved back, and the loop goes on at once.
 */
class SpoolRewound extends Error {
  constructor(readonly gap: SpoolGap) {
    super(`PostgreSQL lacks spool ids ${gap.from}-${gap.through}`);
  }
}

/** The pause between two tries of a failed batch while draining at shutdown. */
const DRAIN_RETRY_MS = 100;

export class Relay {
  private running: Promise<void> | null = null;
  private stopped = true;
  private wake: (() => void) | null = null;
  private failures = 0;
  private cursor: number;
  private readonly maxMs: number;
  /**
   * The highest watermark this relay has read. A delivery relayed below it is late even when the
   * watermark stands lower now: a dropped replica's first beat back (an idle beat) republishes its
   * oldest unrelayed delivery and moves the watermark back, but what it passed meanwhile may have
   * been processed. Read before this spool's own beat is written, so a dropped spool sees the others'.
   */
  private passed: Date | null = null;

  constructor(
    private readonly pool: PgPool,
    private readonly spool: RelaySpool,
    private readonly options: RelayOptions,
  ) {
    this.cursor = spool.relayedThrough();
    this.maxMs = options.holdbackMaxMs ?? DEFAULT_HOLDBACK_MAX_MS;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.running = this.loop();
  }

  /** A delivery was just spooled: relay without waiting for the interval. */
  nudge(): void {
    this.wake?.();
  }

  /** Finishes the batch in flight (its commit and cursor), then stops. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.running;
  }

  /**
   * After stop() (issue 46): relays what the spool still holds, batch after batch, until it is empty
   * (true) or `timeoutMs` has passed (false). A batch that fails (PostgreSQL away a moment) is tried
   * again after a short pause, within the same bound. A replica told to stop leaves nothing for the
   * next version to carry late; SHUTDOWN_TIMEOUT_MS bounds it.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    const until = performance.now() + timeoutMs;
    let failures = 0;
    for (;;) {
      const left = until - performance.now();
      if (left <= 0) return false;
      const moved = await this.drainBatch(left).catch((err: unknown) => {
        failures += 1;
        if (failures === 1)
          this.options.logger.warn(
            { err: (err as Error).message },
            'relay: a batch failed while draining the spool at shutdown; tried again within SHUTDOWN_TIMEOUT_MS',
          );
        return null;
      });
      if (moved === 'late') return false;
      if (moved === 0) return true;
      if (moved === null) await new Promise((resolve) => setTimeout(resolve, Math.min(DRAIN_RETRY_MS, left)));
    }
  }

  /** One batch of drain(), or 'late' when `leftMs` passes first (the batch then ends by itself). */
  private async drainBatch(leftMs: number): Promise<number | 'late'> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(resolve, leftMs, 'late');
    });
    const batch = this.relayOnce();
    try {
      const moved = await Promise.race([batch, late]);
      if (moved === 'late') batch.catch(() => undefined);
      return moved;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Relays one batch; returns how many spooled deliveries it moved (0: the spool is drained). A
   * batch that found PostgreSQL behind the spool is abandoned and the batch from the rewound cursor
   * sent instead.
   */
  async relayOnce(): Promise<number> {
    try {
      return await this.relayBatch();
    } catch (err) {
      if (!(err instanceof SpoolRewound)) throw err;
      return this.relayBatch();
    }
  }

  private async relayBatch(): Promise<number> {
    const rows = this.spool.read(this.cursor, this.options.batch);
    if (rows.length === 0) return 0;
    const figures = await inPoolTransaction(this.pool, 'BEGIN', (client) => this.write(sqlOf(client), rows));
    this.options.onBeat?.(figures);
    const through = rows[rows.length - 1]!.id;
    this.cursor = through;
    const now = this.options.now();
    this.spool.advance(through, now.toISOString());
    this.options.onBatch?.(
      rows.length,
      rows.map((r) => Math.max(0, (now.getTime() - Date.parse(r.received_at)) / 1000)),
    );
    return rows.length;
  }

  /**
   * One heartbeat and release, in a transaction of its own: publishes what this spool covers now,
   * then queues the turns of the held keys the watermark has reached. Returns how many it released (0 when it
   * found PostgreSQL behind the spool: it published nothing, and the next batch sends the gap).
   */
  async beat(): Promise<number> {
    try {
      const figures = await inPoolTransaction(this.pool, 'BEGIN', async (client) => {
        const sql = sqlOf(client);
        const o = await this.observe(sql, this.cursor);
        return this.settle(sql, o, o.own, [], []);
      });
      this.options.onBeat?.(figures);
      return figures.released;
    } catch (err) {
      if (err instanceof SpoolRewound) return 0;
      throw err;
    }
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let moved = 0;
      await gateCleared(this.options.gate, () => this.stopped);
      if (this.stopped) break;
      try {
        moved = await this.relayOnce();
        // A batch published the heartbeat and released what it could; an idle pass does it alone.
        if (moved === 0) await this.beat();
        if (this.failures > 0)
          this.options.logger.info(
            { failures: this.failures },
            'relay: PostgreSQL reachable again, catching up',
          );
        this.failures = 0;
      } catch (err) {
        this.failures += 1;
        const error = err as Error;
        this.options.onError?.(error);
        // Once, then every 30th: a failover lasts minutes and the spool keeps everything meanwhile.
        if (this.failures === 1 || this.failures % 30 === 0)
          this.options.logger.warn(
            { err: error.message, failures: this.failures },
            // PostgreSQL's `lock_not_available`: lock_timeout ran out.
            (error as { code?: string }).code === '55P03'
              ? 'relay: a lock stayed held by another transaction longer than PG_LOCK_TIMEOUT_MS; the batch is tried again'
              : 'relay: cannot write to PostgreSQL; deliveries stay in the spool and are relayed when it is back',
          );
      }
      if (this.stopped) break;
      if (moved >= this.options.batch) continue;
      const pause =
        this.failures > 0
          ? Math.min(RETRY_MAX_MS, 100 * 2 ** Math.min(this.failures, 6))
          : this.options.intervalMs;
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        timer = setTimeout(resolve, pause);
      });
      this.wake = null;
      clearTimeout(timer);
    }
  }

  /**
   * Reads every spool's heartbeat (and PostgreSQL's clock, timed on this replica's to measure the
   * offset); the watermark as it stands, and this spool's own heartbeat as of now, once everything
   * through `throughId` is in PostgreSQL.
   */
  private async observe(sql: PgSql, throughId: number): Promise<Observed> {
    const mark = this.options.orderClock?.begin();
    const sentAt = this.options.now();
    const read = await readBeats(sql);
    const receivedAt = this.options.now();
    const reading = mark === undefined ? null : (this.options.orderClock?.read(mark, read.now) ?? null);
    const mine = read.beats.find((b) => b.spool === this.spool.id) ?? null;
    this.reconcile(read.recorded.get(this.spool.id) ?? null);
    const before = watermarkOf(read.beats, read.now, this.maxMs);
    if (before.at !== null && (this.passed === null || before.at > this.passed)) this.passed = before.at;
    const observed = {
      now: read.now,
      others: read.beats.filter((b) => b.spool !== this.spool.id),
      before,
      liveSince: liveSinceAfterBeat(mine, read.now, this.maxMs),
      clockOffsetMs: reading?.wallOffsetMs ?? clockOffsetMs(sentAt, read.now, receivedAt),
      reading,
      timeline: read.timeline,
    };
    return { ...observed, own: this.ownBeat(observed, throughId) };
  }

  /**
   * This spool's heartbeat, covering what is in PostgreSQL once everything through `throughId` is.
   * Read on this thread between awaits: a delivery spooled or a request arrived before it is
   * counted, and anything later has a later received_at.
   */
  private ownBeat(o: Omit<Observed, 'own'>, throughId: number): Beat {
    // On the order clock, as the deliveries' order_at (issue 36): PostgreSQL's time as estimated here.
    const covered = coveredThrough(
      this.options.orderClock?.now() ?? this.options.now(),
      this.spool.oldestAfter(throughId),
      this.options.oldestInFlight?.() ?? null,
      this.maxMs,
    );
    return {
      spool: this.spool.id,
      replica: this.options.replicaId,
      coveredThrough: covered,
      heartbeatAt: o.now,
      liveSince: o.liveSince,
      relayedThrough: throughId,
      clockOffsetMs: o.clockOffsetMs,
    };
  }

  /**
   * The relay never trusts its own cursor over PostgreSQL's record of the spool (docs/cluster.md §6):
   * every transaction reads it before writing anything, and when PostgreSQL holds less than the
   * cursor says (a standby promoted while it lagged), the cursor moves back to it and the
   * transaction is abandoned, publishing nothing: no heartbeat may cover the gap. The next pass sends
   * the difference again (rows keyed by spool id: what PostgreSQL has is skipped).
   */
  private reconcile(recorded: number | null): void {
    const gap = spoolGap(this.cursor, recorded);
    if (gap === null) return;
    const resend = this.spool.rewind(gap.from - 1, this.options.now().toISOString());
    this.cursor = gap.from - 1;
    this.options.onGap?.(gap, resend);
    this.options.logger.error(
      {
        spool: this.spool.id,
        gap_from: gap.from,
        gap_through: gap.through,
        missing: gap.through - gap.from + 1,
        resend,
        postgres_relayed_through: recorded,
      },
      'relay: PostgreSQL lacks deliveries this replica acknowledged and relayed (it failed over and lost commits): ' +
        'sending them again from the spool; the watermark holds later events back until they are in',
    );
    throw new SpoolRewound(gap);
  }

  /** The watermark once `own` is published. */
  private withOwn(o: Observed, own: RelayBeat): Watermark {
    return watermarkOf([...o.others, own], o.now, this.maxMs);
  }

  /**
   * Publishes `own`, this spool's heartbeat (the watermark moves as far as it lets it), writes
   * `holds`, then queues the turns of the held keys the watermark has now reached, and of `keys`.
   */
  private async settle(
    sql: PgSql,
    o: Observed,
    own: Beat,
    holds: readonly Hold[],
    keys: readonly string[],
  ): Promise<BeatFigures> {
    await publishBeat(sql, own);
    const after = this.withOwn(o, own);
    await hold(sql, holds);
    const released = await release(sql, after.at);
    await this.options.queueTurns(sql, [...new Set([...released, ...keys])]);
    return {
      timeline: o.timeline,
      watermark: after,
      clockOffsetMs: o.clockOffsetMs,
      released: released.length,
      reading: o.reading,
    };
  }

  private async write(sql: PgSql, rows: readonly SpoolRow[]): Promise<BeatFigures> {
    const last = rows[rows.length - 1]!;
    // The spool's cursor moves once this commits, and then PostgreSQL holds the only copy the
    // cluster reads: durable whatever the server's default (docs/cluster.md §5.3 lets processing
    // run with synchronous_commit off, never this).
    await sql.query('SET LOCAL synchronous_commit = on');
    await sql.query(
      `SET LOCAL lock_timeout = ${Math.max(1, Math.round(this.options.lockTimeoutMs ?? 5000))}`,
    );
    const o = await this.observe(sql, last.id);
    const plan = planBatch(rows, this.withOwn(o, o.own).at);
    // Before the relay lock, so that waiting for a turn never holds up the other replicas' relays:
    // the turn locks of the keys this batch queues turns for (a turn running on one commits first, and one
    // that starts now waits for this batch: postgres/pg-locks.ts), and the holds of the others.
    await holdKeys(sql, plan.turns);
    await hold(sql, plan.holds);
    await sql.query('SELECT pg_advisory_xact_lock($1)', [RELAY_LOCK_KEY.toString()]);
    const fresh = await this.insertDeliveries(sql, rows);
    const news = rows.filter((r) => fresh.has(r.id));
    const inserted = await this.insertEvents(
      sql,
      news.filter((r) => r.event !== null),
    );
    await this.countDuplicates(
      sql,
      news.filter((r) => r.outcome === 'duplicate' && r.dedup_key !== null),
    );
    await sql.query(
      `UPDATE deliveries d SET event_id = e.id FROM events e
       WHERE d.spool = $1 AND d.spool_id = ANY($2::bigint[]) AND d.dedup_key IS NOT NULL AND e.dedup_key = d.dedup_key
         AND d.outcome IN ('accepted', 'quarantined', 'duplicate')`,
      [this.spool.id, news.map((r) => r.id)],
    );
    const queued = new Set(plan.turns);
    // The heartbeat last, as late as it can be said; what it lets go gets its turn queued with the batch's keys:
    // a turn's work, done here so that a busy relay pays one transaction per batch, not two. An
    // event without a shared key is its own (`e:<id>`), known only now; nobody else can hold it.
    const figures = await this.settle(
      sql,
      o,
      { ...this.ownBeat(o, last.id), lastReceivedAt: last.received_at },
      inserted
        .filter((e) => e.shared === null && !plan.due(e.order_at))
        .map((e) => ({ key: e.key, until: e.order_at })),
      inserted
        .filter((e) => (e.shared === null ? plan.due(e.order_at) : queued.has(e.key)))
        .map((e) => e.key),
    );
    // Below the highest watermark read: another spool's later events may have been processed.
    const passed = this.passed;
    const late = passed === null ? 0 : inserted.filter((e) => e.order_at < passed).length;
    if (late > 0) {
      this.options.onLate?.(late);
      this.options.logger.warn(
        { late, spool: this.spool.id, watermark: passed?.toISOString() ?? null },
        'relay: deliveries relayed after the watermark had passed them (this replica was silent longer than ' +
          'CLUSTER_HOLDBACK_MAX_MS and was dropped from it): processed now, possibly after later events of their proposals',
      );
    }
    return figures;
  }

  /** Returns the spool ids PostgreSQL did not have. */
  private async insertDeliveries(sql: PgSql, rows: readonly SpoolRow[]): Promise<Set<number>> {
    const col = <K extends keyof SpoolRow>(k: K) => rows.map((r) => r[k]);
    const inserted = await sql.query<{ spool_id: string }>(
      `INSERT INTO deliveries (replica, spool, spool_id, received_at, path, outcome, http_status, dedup_key, duration_ms,
         body_bytes, secret_index, remote_addr, detail, order_at)
       SELECT $1::text, $2::text, * FROM unnest($3::bigint[], $4::timestamptz[], $5::text[], $6::text[], $7::int[], $8::text[],
         $9::float8[], $10::int[], $11::int[], $12::text[], $13::text[], $14::timestamptz[])
       ON CONFLICT (spool, spool_id) DO NOTHING RETURNING spool_id`,
      [
        this.options.replicaId,
        this.spool.id,
        col('id'),
        col('received_at'),
        col('path'),
        col('outcome'),
        col('http_status'),
        col('dedup_key'),
        col('duration_ms'),
        col('body_bytes'),
        col('secret_index'),
        col('remote_addr'),
        col('detail'),
        rows.map((r) => r.order_at ?? null),
      ],
    );
    return new Set(inserted.map((r) => Number(r.spool_id)));
  }

  /** Inserts the events; returns the new pending ones, with their work keys. */
  private async insertEvents(sql: PgSql, rows: readonly SpoolRow[]): Promise<InsertedEvent[]> {
    if (rows.length === 0) return [];
    const events = rows.map((r) => r.event!);
    const col = <K extends keyof SpoolEvent>(k: K) => events.map((e) => e[k]);
    const statuses = events.map((e) => relayedStatus(e.status));
    const out = await sql.query<
      WorkKeyParts & { id: string; inserted: boolean; status: string; order_at: Date }
    >(
      `INSERT INTO events AS e (dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa,
         received_at, body, body_bytes, status, last_error, processed_at, first_replica, order_at, trace_context)
       SELECT u.dedup_key, u.webhook_id, u.kind, u.evento, u.nu_proposta, u.request_id, u.registry_status, u.tentativa,
         u.received_at, u.body, u.body_bytes, u.status, u.last_error,
         CASE WHEN u.status = 'pending' THEN NULL ELSE now() END, $14, u.order_at, u.trace_context
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[],
         $9::timestamptz[], $10::bytea[], $11::int[], $12::text[], $13::text[], $15::timestamptz[], $16::text[])
         AS u(dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa, received_at, body,
           body_bytes, status, last_error, order_at, trace_context)
       ON CONFLICT (dedup_key) DO UPDATE SET duplicates = e.duplicates + 1,
         -- A copy another replica acknowledged earlier (a re-send that reached its relay later) is the
         -- first acknowledgement: its time orders the event (docs/cluster.md §10), until it is processed;
         -- the later of the two is then the duplicate's.
         last_duplicate_at = greatest(e.last_duplicate_at, CASE WHEN e.status IN ('pending', 'failed')
           THEN greatest(e.received_at, excluded.received_at) ELSE excluded.received_at END),
         received_at = CASE WHEN e.status IN ('pending', 'failed') THEN least(e.received_at, excluded.received_at)
           ELSE e.received_at END,
         order_at = CASE WHEN e.status IN ('pending', 'failed')
           THEN least(coalesce(e.order_at, e.received_at), excluded.order_at) ELSE e.order_at END
       RETURNING e.id, (e.xmax = 0) AS inserted, e.status, e.nu_proposta, e.request_id, e.order_at`,
      [
        rows.map((r) => r.dedup_key),
        col('webhook_id'),
        col('kind'),
        col('evento'),
        events.map((e) => (e.nu_proposta === null ? null : String(e.nu_proposta))),
        col('request_id'),
        col('registry_status'),
        col('tentativa'),
        col('received_at'),
        col('body'),
        col('body_bytes'),
        statuses,
        col('last_error'),
        this.options.replicaId,
        rows.map(orderTimeOf),
        col('trace_context'),
      ],
    );
    return out
      .filter((e) => e.inserted && e.status === 'pending')
      .map((e) => ({ key: workKeyOf(e), shared: sharedWorkKeyOf(e), order_at: e.order_at }));
  }

  /** Local `duplicate` answers: each adds one to the event's count (grouped per dedup key). */
  private async countDuplicates(sql: PgSql, rows: readonly SpoolRow[]): Promise<void> {
    if (rows.length === 0) return;
    await sql.query(
      `UPDATE events e SET duplicates = e.duplicates + u.n, last_duplicate_at = greatest(e.last_duplicate_at, u.last)
       FROM (SELECT dedup_key, count(*)::int AS n, max(at) AS last FROM unnest($1::text[], $2::timestamptz[]) AS d(dedup_key, at)
         GROUP BY dedup_key) AS u
       WHERE e.dedup_key = u.dedup_key`,
      [rows.map((r) => r.dedup_key), rows.map((r) => r.received_at)],
    );
  }
}

/** A new pending event the batch inserted. */
interface InsertedEvent {
  key: string;
  /** Its proposal's or registration's key; null when it is its own (`e:<id>`). */
  shared: string | null;
  /** What it is ordered by (events.order_at). */
  order_at: Date;
}

/**
 * The time a spooled event is ordered by (issue 36): its delivery's order time, PostgreSQL's clock
 * as the replica estimated it; its received_at when the delivery has none (stamped before the
 * relay's first heartbeat, or spooled by an older version).
 */
function orderTimeOf(r: SpoolRow): string {
  return r.order_at ?? r.event?.received_at ?? r.received_at;
}

/**
 * Which shared keys the batch queues a turn for at once (one of their events, that processing will see, is at
 * or below the watermark `at`: a turn processes it now, and holds the rest itself) and which it
 * holds until the watermark reaches their oldest event. A duplicate may be planned for too: its
 * hold or turn finds nothing.
 */
function planBatch(
  rows: readonly SpoolRow[],
  at: Date | null,
): { turns: string[]; holds: Hold[]; due(receivedAt: Date): boolean } {
  const due = (receivedAt: Date) => at === null || receivedAt.getTime() <= at.getTime();
  const oldest = new Map<string, Date>();
  for (const r of rows) {
    const key =
      r.event === null || relayedStatus(r.event.status) !== 'pending' ? null : sharedWorkKeyOf(r.event);
    if (key === null) continue;
    const seen = oldest.get(key);
    const e = new Date(orderTimeOf(r));
    if (seen === undefined || e.getTime() < seen.getTime()) oldest.set(key, e);
  }
  const turns: string[] = [];
  const holds: Hold[] = [];
  for (const [key, until] of oldest) {
    if (due(until)) turns.push(key);
    else holds.push({ key, until });
  }
  return { turns, holds, due };
}
