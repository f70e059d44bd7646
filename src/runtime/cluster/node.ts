import { type BackgroundGate, gateCleared } from '../../domain/answer-first';
import type { PollOutcome } from '../../domain/registry';
import type { SharedAnswers } from '../../domain/delivery-alarm';
import type { StoreQuery } from '../../domain/sql/store-sql';
import { storeGauges } from '../../core/gauges';
import {
  EVENTS_QUEUE,
  type Engine,
  type TurnData,
  POLL_QUEUE,
  type PollData,
  startEngine,
} from '../../postgres/pg-queues';
import { type TurnOptions, runTurns } from './turn';
import { destinationGauges } from '../../core/sender-queries';
import type { DestinationGauges } from '../../domain/forwarding/sender-store';
import type { StorePort } from '../../core/store-port';
import { pgPoolStorePort } from '../../postgres/pg-port';
import { describePgTarget, pgTarget } from '../../postgres/pg-reads';
import type { TokenFingerprints } from '../../domain/console';
import { END_OTHER_SESSIONS, endOtherSessionsParams } from '../../domain/sql/console-session-statements';
import { inPoolTransaction, pgStoreSql } from '../../postgres/pg-statements';
import { readSharedAnswers } from '../../postgres/pg-delivery-alarm';
import {
  inspectPostgres,
  loadPgMigrations,
  migratePostgres,
  type PgMigration,
  SchemaRefused,
} from '../../postgres/pg-migrate';
import { type ClusterRetentionOptions, startClusterRetention } from './pg-retention';
import { type PollJobDeps, runPollJob, type StatusClient } from './poll-job';
import type { SpoolGap } from '../../domain/relay-gap';
import { type OrderClock, ReadingLog } from './order-clock';
import { type BeatFigures, Relay, type RelayOptions, type RelaySpool } from './relay';
import {
  answeredWithin,
  type ConnectionLimits,
  type ConnectionSettings,
  connectionSettings,
  DEFAULT_CONNECTION_LIMITS,
  describeDatabase,
  type PgPool,
  type PgPoolClient,
  pgPool,
  redactedMessage,
} from '../../postgres/connection';
import { Liveness } from './liveness';
import { type BossDb, checkOut, iso, type PgSql, sqlOf, sqlOfBossDb } from '../../postgres/pg-sql';
import type { Job } from 'pg-boss';
import { type Readiness, readyForTraffic } from '../../domain/watermark';
import { MigrationError } from '../../domain/errors';
import { schemaHold } from '../../domain/migration-compat';
import { DEFAULT_HOLDBACK_MAX_MS } from './pg-watermark';

/**
 * One replica's part of cluster mode (contract §10): once PostgreSQL answers, migrate it (replicas
 * starting together wait for one another), start pg-boss, the relay from this replica's spool, the
 * turn workers and, when the service's API is configured, the registry-poll workers. Until then,
 * and whenever PostgreSQL is away later, the replica keeps acknowledging from its spool: nothing
 * here is on the path of an answer.
 *
 * An ingest-only replica (`concurrency` 0, CLUSTER_CONCURRENCY=0) relays and queues turns but runs
 * no turn or registry-poll worker and sends no destination: its event loop answers webhooks and
 * moves them to PostgreSQL, and the replicas with workers process and send everything.
 */

/** The turns' and the relay's settings, passed on as they are (turn.ts, relay.ts). */
export interface ClusterNodeOptions
  extends
    Omit<TurnOptions, 'queueTurns' | 'schedulePoll' | 'onProcessed' | 'onError' | 'random'>,
    Pick<RelayOptions, 'replicaId' | 'oldestInFlight'> {
  databaseUrl: string;
  relayBatch: number;
  relayIntervalMs: number;
  /**
   * Turn workers in this replica. 0: an ingest-only replica (no turn or registry-poll workers, no
   * destination's lock); another replica must process.
   */
  concurrency: number;
  spool: RelaySpool;
  /** The service's status query; null: registry polls are not run (SERVICE_BASE_URL unset). */
  statusClient: StatusClient | null;
  /**
   * Sending (forwarder.ts, in the forwarding thread: runtime/sender-thread.ts): started once
   * connected, after the migrations (it reads tables they create); stopped before the turns, so
   * that what was answered is recorded before the locks are given back.
   * @default none (nothing is sent; the outbox still fills for the feed)
   */
  sender?: {
    start(): void;
    stop(timeoutMs: number): Promise<boolean>;
    /** The destinations this replica sends now (holds the lock of), sorted. */
    holding(): string[];
  };
  /**
   * The fingerprints of the console's configured tokens: on connecting, the sessions of any other
   * token (rotated or removed) are deleted, for every replica at once (the sessions are shared).
   * @default undefined (sessions are left as they are)
   */
  consoleTokens?: TokenFingerprints;
  /** Seconds a dead replica's turn stays claimed. @default 10 */
  turnExpireSeconds?: number;
  /**
   * MIGRATE_ON_START (issue 46): false: PostgreSQL is not migrated here; a schema behind this code
   * keeps the replica not ready (webhooks 503), checked again every `schemaCheckMs`. @default true
   */
  migrateOnStart?: boolean;
  /**
   * How often a running replica reads `schema_migrations` for a breaking migration a newer replica
   * applied, and how often a refused one checks again. @default 5000
   */
  schemaCheckMs?: number;
  /**
   * Issue 36: this replica's estimate of PostgreSQL's clock (order-clock.ts), which the webhook
   * route stamps each request with; the relay reads PostgreSQL's clock into it at every heartbeat.
   * @default none (order on this replica's own clock, as before)
   */
  orderClock?: OrderClock;
  /**
   * Answers first (issue 23): the relay's batches, the turns and the registry polls wait while a
   * webhook answer is being made on this replica, as SQLite mode's pipeline does. Waiting drops
   * nothing: rows wait in the spool, turns in pg-boss, events pending in PostgreSQL.
   * @default none (never waits)
   */
  gate?: BackgroundGate;
  /**
   * The bounds every connection carries (connection.ts): PG_IDLE_IN_TRANSACTION_TIMEOUT_MS and
   * PG_LOCK_TIMEOUT_MS. @default DEFAULT_CONNECTION_LIMITS
   */
  limits?: ConnectionLimits;
  /**
   * RETENTION_DAYS (pg-retention.ts, core/prune-pass.ts): PostgreSQL pruned once per hour by one
   * replica (a pg-boss throttled job); passed on to startClusterRetention. @default undefined
   * (everything is kept)
   */
  retention?: Pick<ClusterRetentionOptions, 'days' | 'offerEveryMs' | 'slotSeconds' | 'onPass'>;
  metrics?: {
    relayed?(rows: number, delays: readonly number[]): void;
    relayError?(): void;
    processed?(evento: string, outcome: 'done' | 'retry' | 'dead'): void;
    handlerFailure?(evento: string): void;
    poll?(outcome: PollOutcome): void;
    /** PostgreSQL knew another spool of this REPLICA_ID and not this one (see checkSpoolIdentity). */
    spoolReplaced?(): void;
    beat?(beat: BeatFigures): void;
    late?(rows: number): void;
    /** PostgreSQL lacked `gap` of this spool (a failover lost commits); `resend` rows go again. */
    gap?(gap: SpoolGap, resend: number): void;
  };
}

/** The longest a read for `/metrics` or the alarms waits for PostgreSQL, client side. */
const READ_SHORT_MS = 2500;
const SCHEMA_CHECK_MS = 5000;
/** How long a replica that finds a breaking migration while it runs waits for its turns to finish. */
const REFUSAL_STOP_MS = 10_000;

export class ClusterNode {
  private readonly pool: PgPool;
  /** Sending, as given (a thread of its own); null without. */
  readonly sending: NonNullable<ClusterNodeOptions['sender']> | null;
  private engine: Engine | null = null;
  private relay: Relay | null = null;
  private starting: Promise<void> | null = null;
  private stopping = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private bossErrors = 0;
  /** Batches of turns whose transaction failed, since start (logged the first and every 30th time). */
  private turnFailures = 0;
  private retention: { stop(): void } | null = null;
  /** Whether PostgreSQL answers now, once started (a heartbeat on a connection of its own). */
  private readonly liveness: Liveness;
  /** What every connection carries (connection.ts): the bounds on what a stalled replica holds. */
  private readonly settings: ConnectionSettings;
  state: 'connecting' | 'running' | 'stopped' = 'connecting';
  /** When start() was called (this process's clock), and whether the relay has published a heartbeat since. */
  private startedAt: number | null = null;
  private beaten = false;
  /** The PostgreSQL timeline this process last saw (a promotion starts a new one). */
  private timeline: number | null = null;
  /**
   * Why this replica refuses PostgreSQL's schema (issue 46): a newer one with a breaking migration,
   * or, with MIGRATE_ON_START=false, one behind; null while it runs on it. While set, `/readyz` and
   * the webhook routes answer 503 with it.
   */
  private refusal: string | null = null;
  private schemaTimer: NodeJS.Timeout | null = null;
  /** Migrating PostgreSQL at start, or waiting for another runner's lock: not ready (issue 46). */
  private migrating = false;
  /** The schema was read (and run on) in this run: until then webhooks wait (domain/migration-compat.ts `schemaHold`). */
  private schemaRead = false;
  /** The last try to reach PostgreSQL failed: webhooks are acknowledged into the spool meanwhile. */
  private unreachable = false;
  /** The migrations this code knows (migrations-pg/), read once. */
  private readonly migrations: PgMigration[] = loadPgMigrations();
  /**
   * The store port (core/store-port.ts) on this replica's pool, for the admin API and the console
   * (postgres/pg-port.ts); each call rejects with a StorageError while PostgreSQL is away.
   */
  readonly storePort: StorePort<PgSql>;

  constructor(private readonly options: ClusterNodeOptions) {
    this.settings = connectionSettings(options.limits ?? DEFAULT_CONNECTION_LIMITS);
    this.sending = options.sender ?? null;
    this.pool = pgPool({
      connectionString: options.databaseUrl,
      max: 4,
      application_name: `consig-receiver:${options.replicaId}`,
      connectionTimeoutMillis: 5000,
      ...this.settings,
    });
    this.liveness = new Liveness({
      connectionString: options.databaseUrl,
      settings: this.settings,
      applicationName: `consig-receiver:${options.replicaId}:liveness`,
      logger: options.logger,
    });
    // An idle connection dropped by a restart or failover: the pool replaces it, nothing to do.
    this.pool.on('error', () => undefined);
    this.storePort = pgPoolStorePort({
      pool: this.pool,
      name: describePgTarget(pgTarget(options.databaseUrl)),
      running: () => this.state === 'running',
      queueTurns: (sql, keys) => this.started().queueTurns(sql, keys),
      schedulePoll: (sql, requestId, at) => this.started().schedulePoll(sql, requestId, at),
      gauges: (cutoffs) => this.sharedGauges((q) => storeGauges(q, cutoffs)),
    });
  }

  private started(): Engine {
    if (this.engine === null) throw new Error('cluster mode has not started its engine yet');
    return this.engine;
  }

  /** Starts in the background; PostgreSQL being away only delays it (tried again every few seconds). */
  start(): void {
    this.startedAt ??= Date.now();
    this.starting ??= this.connect(1);
  }

  /**
   * `/readyz`: whether a load balancer may send this replica traffic, as far as order across
   * replicas goes (domain/watermark.ts `readyForTraffic`): once its relay has published a heartbeat
   * in this run, or CLUSTER_HOLDBACK_MAX_MS after it started whatever PostgreSQL says.
   */
  readiness(): Readiness {
    const sinceStartMs = this.startedAt === null ? 0 : Date.now() - this.startedAt;
    const maxMs = this.options.holdbackMaxMs ?? DEFAULT_HOLDBACK_MAX_MS;
    const hold = schemaHold({
      refusal: this.refusal,
      migrating: this.migrating,
      read: this.schemaRead,
      unreachable: this.unreachable,
      sinceStartMs,
      holdbackMaxMs: maxMs,
    });
    const holding = hold === null ? {} : { holdWebhooks: hold };
    if (this.refusal !== null)
      return { ready: false, ordered: this.beaten, refused: this.refusal, ...holding };
    // Issue 46: not ready until the schema is in place, however long a migration waits for its locks.
    if (this.migrating) return { ready: false, ordered: this.beaten, migrating: true, ...holding };
    const ready = readyForTraffic({ beaten: this.beaten, sinceStartMs, maxMs });
    return { ready, ordered: this.beaten, ...holding };
  }

  /** Whether this replica runs on PostgreSQL's schema (`consig_schema_compatible`); see {@link refusal}. */
  get schemaCompatible(): boolean {
    return this.refusal === null;
  }

  /**
   * Whether this replica processes: connected, with its turn workers registered in pg-boss (false
   * on an ingest-only replica). `/readyz` `processing` and `consig_processing_holder` say it.
   */
  get processing(): boolean {
    return this.connected && this.workerQueues().includes(EVENTS_QUEUE);
  }

  /**
   * Started and reaching PostgreSQL now (`consig_cluster_connected`): false within about 10 s of
   * losing it (liveness.ts), true again once a heartbeat is answered.
   */
  get connected(): boolean {
    return this.state === 'running' && this.liveness.connected;
  }

  /** The queues this replica has pg-boss workers on, as pg-boss lists them (none before it connects). */
  workerQueues(): string[] {
    const names = this.engine?.boss.getWipData().map((w) => w.name) ?? [];
    return [...new Set(names)].sort();
  }

  /** A delivery was just spooled. */
  nudge(): void {
    this.relay?.nudge();
  }

  /**
   * The cluster-wide figures of /metrics, `gauges` (core/gauges.ts, composed by receiver-mode.ts)
   * read from PostgreSQL with this cluster's forwarding gauges; null when it does not answer within
   * 2 s (the scrape then keeps the last values, and consig_cluster_connected says why).
   */
  sharedGauges<T extends object>(
    gauges: (q: StoreQuery) => Promise<T>,
  ): Promise<(T & { forwarding?: DestinationGauges[] }) | null> {
    return this.readShort(async (q) => {
      const figures: T & { forwarding?: DestinationGauges[] } = await gauges(q);
      const names = this.options.outbox?.destinations.map((d) => d.name) ?? [];
      if (names.length > 0) figures.forwarding = await destinationGauges(q, names);
      return figures;
    });
  }

  /** Every replica's answers, for the deactivation and silence alarms; null as for {@link sharedGauges}. */
  sharedAnswers(): Promise<SharedAnswers | null> {
    return this.readShort(readSharedAnswers);
  }

  /**
   * A read of at most 2 s on one pooled connection; null when not connected or when it fails. The
   * server's statement_timeout bounds a slow read; a server that does not answer at all (frozen,
   * partitioned) cannot enforce it, so the connection is also dropped here after READ_SHORT_MS:
   * a `/metrics` scrape never hangs on PostgreSQL.
   */
  private async readShort<T>(read: (sql: PgSql) => Promise<T>): Promise<T | null> {
    if (!this.connected) return null;
    const client = await checkOut(this.pool).catch(() => null);
    if (client === null) return null;
    const work = (async () => {
      await client.query("SET statement_timeout = '2s'");
      const result = await read(sqlOf(client));
      await client.query('RESET statement_timeout');
      return result;
    })();
    try {
      const result = await answeredWithin(work, READ_SHORT_MS, 'to a short read');
      client.release();
      return result;
    } catch {
      // Dropped: the query still in flight then fails, and nobody waits for it.
      client.release(true);
      work.catch(() => undefined);
      return null;
    }
  }

  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.schemaTimer) clearTimeout(this.schemaTimer);
    this.retention?.stop();
    await this.liveness.stop();
    await this.relay?.stop();
    await this.drainSpool(timeoutMs);
    // Senders first record what was answered, then give their destinations' locks back.
    await this.options.sender?.stop(timeoutMs).catch(() => undefined);
    await this.engine?.stop(timeoutMs).catch(() => undefined);
    await this.pool.end().catch(() => undefined);
    this.state = 'stopped';
  }

  /**
   * SIGTERM (issue 46): what the spool holds is relayed before the process exits, within
   * `timeoutMs` (SHUTDOWN_TIMEOUT_MS), so that a replica replaced mid-roll leaves nothing for the next
   * version to carry late. A replica that never ran on PostgreSQL (away, or its schema refused)
   * relays nothing; what is left stays in the spool for its next start, and is said.
   */
  private async drainSpool(timeoutMs: number): Promise<void> {
    const { relay, options } = this;
    const drained = relay !== null && this.refusal === null ? await relay.drain(timeoutMs) : false;
    const left = options.spool.backlog?.().count ?? 0;
    if (drained || left === 0) return;
    options.logger.warn(
      { left, replica: options.replicaId, timeout_ms: timeoutMs },
      'cluster mode: stopping with deliveries not relayed to PostgreSQL; they stay in the spool and are relayed when a replica starts on it again',
    );
  }

  /**
   * PostgreSQL's schema, before anything runs on it: migrated (under the runner's lock), or with
   * MIGRATE_ON_START=false only read. A schema this replica refuses (newer and breaking, or behind
   * without migrating) sets the refusal and throws SchemaRefused.
   */
  private async prepareSchema(): Promise<void> {
    const { logger } = this.options;
    try {
      if (this.options.migrateOnStart === false) {
        const { verdict } = await inspectPostgres(this.pool, this.migrations);
        if (verdict.kind === 'behind') throw new SchemaRefused(verdict.message);
        if (verdict.kind === 'newer') logger.info({ replica: this.options.replicaId }, verdict.message);
      } else {
        await migratePostgres(this.pool, {
          logger,
          onConnected: () => {
            this.migrating = true;
          },
        });
      }
      this.refusal = null;
      this.migrating = false;
      this.schemaRead = true;
      this.unreachable = false;
    } catch (err) {
      if (err instanceof SchemaRefused) this.refusal = err.message;
      // A migration PostgreSQL answered but that did not finish (it failed, or its lock conflicts
      // outlasted the runner's retries) keeps the replica not ready until a later try succeeds; a
      // PostgreSQL out of reach does not (the spool acknowledges meanwhile, as at any start).
      if (!(err instanceof MigrationError) || err instanceof SchemaRefused) this.migrating = false;
      if (!(err instanceof MigrationError)) this.unreachable = true;
      throw err;
    }
  }

  /**
   * Issue 46: a running replica reads `schema_migrations` every `schemaCheckMs`; a breaking
   * migration it does not know (another, newer replica migrated) makes it stop taking work.
   */
  private watchSchema(): void {
    const every = this.options.schemaCheckMs ?? SCHEMA_CHECK_MS;
    const tick = async (): Promise<void> => {
      this.schemaTimer = null;
      if (this.stopping || this.state !== 'running') return;
      try {
        await inspectPostgres(this.pool, this.migrations);
      } catch (err) {
        if (err instanceof SchemaRefused) return this.refuseWhileRunning(err.message);
        // PostgreSQL away (liveness says so), or a changed file (said at the next start): not ours.
      }
      if (this.stopping || this.state !== 'running') return;
      this.schemaTimer = setTimeout(() => void tick(), every);
      this.schemaTimer.unref();
    };
    this.schemaTimer = setTimeout(() => void tick(), every);
    this.schemaTimer.unref();
  }

  /**
   * A breaking migration landed while this replica ran: it stops relaying and processing (its code
   * would write what the new schema does not mean), answers `/readyz` and the webhooks 503, and
   * checks again as a replica that starts on that schema does. Its spool keeps what it holds for the
   * next version started on it.
   */
  private async refuseWhileRunning(message: string): Promise<void> {
    this.refusal = message;
    this.state = 'connecting';
    this.options.logger.error(
      { err: message, replica: this.options.replicaId },
      'cluster mode: a breaking migration landed while this replica ran (a newer replica migrated): it stops relaying and processing, and answers /readyz and webhooks 503',
    );
    this.retention?.stop();
    this.retention = null;
    await this.liveness.stop();
    await this.relay?.stop();
    this.relay = null;
    await this.options.sender?.stop(REFUSAL_STOP_MS).catch(() => undefined);
    await this.engine?.stop(REFUSAL_STOP_MS).catch(() => undefined);
    this.engine = null;
    if (!this.stopping) this.starting = this.connect(1);
  }

  private async connect(attempt: number): Promise<void> {
    const { logger } = this.options;
    try {
      await this.prepareSchema();
      await this.checkSpoolIdentity();
      await this.endRotatedSessions();
      this.engine = await startEngine(this.options.databaseUrl, {
        max: this.options.concurrency + 4,
        settings: this.settings,
        logger: {
          error: (fields, message) => this.bossError(fields, message),
          warn: (fields, message) => logger.warn(fields, message),
        },
        turnExpireSeconds: this.options.turnExpireSeconds,
      });
      if (this.stopping) return;
      await this.startWorkers(this.engine);
      this.retention = await this.startRetention(this.engine);
      this.relay = this.startRelay(this.engine);
      // After the migrations: the senders read tables they create.
      this.options.sender?.start();
      this.state = 'running';
      this.liveness.start(true);
      this.watchSchema();
      logger.info(
        { replica: this.options.replicaId, concurrency: this.options.concurrency },
        this.options.concurrency === 0
          ? 'cluster mode: connected to PostgreSQL; relay running; ingest-only (CLUSTER_CONCURRENCY=0): no turn or registry-poll workers, no destinations'
          : 'cluster mode: connected to PostgreSQL; relay and workers running',
      );
    } catch (err) {
      if (this.stopping) return;
      await this.engine?.stop(1000).catch(() => undefined);
      this.engine = null;
      const delay = this.retryDelay(err, attempt);
      // An error, at most 30 s apart: a replica that never reaches PostgreSQL (a wrong host or
      // password, a firewall) processes and relays nothing, and only its log says why.
      const url = this.options.databaseUrl;
      const fields = {
        err: redactedMessage(err, url),
        database: describeDatabase(url),
        attempt,
        retry_in_ms: delay,
      };
      if (!(err instanceof SchemaRefused))
        logger.error(
          fields,
          'cluster mode: cannot start on PostgreSQL yet; acknowledging from the spool meanwhile',
        );
      else if (attempt === 1 || attempt % 12 === 0)
        logger.error(
          fields,
          'cluster mode: this replica refuses the PostgreSQL schema: not ready (/readyz 503), webhooks answered 503, nothing relayed or processed; checked again',
        );
      await new Promise<void>((resolve) => {
        this.retryTimer = setTimeout(resolve, delay);
      });
      if (!this.stopping) await this.connect(attempt + 1);
    }
  }

  /** The pause before connect() tries again: a refused schema is checked every `schemaCheckMs`. */
  private retryDelay(err: unknown, attempt: number): number {
    const backoff = Math.min(30_000, 1000 * 2 ** Math.min(attempt - 1, 5));
    if (!(err instanceof SchemaRefused)) return backoff;
    return Math.min(backoff, this.options.schemaCheckMs ?? SCHEMA_CHECK_MS);
  }

  /**
   * A replica restarted on an empty spool (its volume lost or replaced) relays under a new spool id,
   * and whatever the old spool had acknowledged but not relayed is gone: the service does not send
   * a 200 again. PostgreSQL knows the spools this REPLICA_ID relayed from (relay_spools); when it
   * knows others and not this one, the newest of them is named in an error, with how far it had
   * been relayed, and the metric `consig_relay_spool_replaced` goes to 1 for the life of the process.
   * A spool never relayed from is not known to PostgreSQL either, so this holds from the first start
   * until the new spool's first batch commits, and on every start before that.
   */
  private async checkSpoolIdentity(): Promise<void> {
    const { options } = this;
    const rows = await sqlOf(this.pool).query<{
      spool: string;
      relayed_through: string;
      last_relayed_at: Date | null;
      last_received_at: Date | null;
    }>(
      `SELECT spool, relayed_through, last_relayed_at, last_received_at FROM relay_spools
       WHERE replica = $1 ORDER BY (spool = $2) DESC, last_relayed_at DESC`,
      [options.replicaId, options.spool.id],
    );
    const newest = rows[0];
    if (newest === undefined || newest.spool === options.spool.id) return;
    options.metrics?.spoolReplaced?.();
    options.logger.error(
      {
        replica: options.replicaId,
        spool: options.spool.id,
        previous_spool: newest.spool,
        previous_relayed_through: Number(newest.relayed_through),
        previous_last_received_at: iso(newest.last_received_at),
        previous_last_relayed_at: iso(newest.last_relayed_at),
        spools_before: rows.length,
      },
      'cluster mode: this replica starts on a new spool; deliveries its previous spool acknowledged after previous_last_received_at and never relayed are lost unless that volume is recovered (docs/alert-runbook.md#consigspoolreplaced)',
    );
  }

  /** Console sessions of tokens no longer configured end (see ClusterNodeOptions.consoleTokens). */
  private async endRotatedSessions(): Promise<void> {
    const fps = this.options.consoleTokens;
    if (fps === undefined) return;
    const ended = await this.transaction(
      async (sql) =>
        (await sql.query(`${END_OTHER_SESSIONS} RETURNING 1`, endOtherSessionsParams(fps))).length,
    );
    if (ended > 0)
      this.options.logger.info({ ended }, 'console: sessions of rotated or removed tokens ended');
  }

  /** pg-boss reports every failed fetch while PostgreSQL is away: the first, then every 50th. */
  private bossError(fields: Record<string, unknown>, message: string): void {
    this.bossErrors += 1;
    if (this.bossErrors === 1 || this.bossErrors % 50 === 0)
      this.options.logger.warn({ ...fields, count: this.bossErrors }, message);
  }

  /** The hourly pass on PostgreSQL, run by whichever replica fetches the hour's job. */
  private async startRetention(engine: Engine): Promise<{ stop(): void } | null> {
    const { options } = this;
    if (options.retention === undefined) return null;
    const inTransaction = <T>(fn: (client: PgPoolClient) => Promise<T>) => this.onClient(fn);
    // This replica's id, clock and logger as given.
    return startClusterRetention(engine.boss, {
      ...options,
      ...options.retention,
      log: pgStoreSql({ read: inTransaction, writing: inTransaction }),
      stopping: () => this.stopping,
    });
  }

  private startRelay(engine: Engine): Relay {
    const { options } = this;
    const readings = new ReadingLog(options.logger);
    // Its replica id, clock, logger, holdback, oldest request in flight, order clock and gate as given.
    const relay = new Relay(this.pool, options.spool, {
      ...options,
      batch: options.relayBatch,
      intervalMs: options.relayIntervalMs,
      queueTurns: (sql, keys) => engine.queueTurns(sql, keys),
      lockTimeoutMs: (options.limits ?? DEFAULT_CONNECTION_LIMITS).lockTimeoutMs,
      onBatch: (rows, delays) => options.metrics?.relayed?.(rows, delays),
      onBeat: (beat) => {
        this.beaten = true;
        if (beat.timeline !== this.timeline) this.onTimeline(engine, beat.timeline);
        if (beat.reading !== null) readings.report(beat.reading);
        options.metrics?.beat?.(beat);
      },
      onLate: options.metrics?.late,
      onGap: options.metrics?.gap,
      onError: (err) => {
        options.metrics?.relayError?.();
        engine.recoverFrom(err);
      },
    });
    relay.start();
    return relay;
  }

  /** The turn and registry-poll workers; none on an ingest-only replica. */
  private async startWorkers(engine: Engine): Promise<void> {
    const { options } = this;
    if (options.concurrency === 0) return;
    const turns: TurnOptions = {
      ...options,
      queueTurns: (s, k, startAfter) => engine.queueTurns(s, k, startAfter),
      schedulePoll: (sql, requestId, at) => engine.schedulePoll(sql, requestId, at),
      onProcessed: options.metrics?.processed,
      onError: (_err, event) => options.metrics?.handlerFailure?.(event.evento ?? event.kind),
    };
    await engine.boss.work(
      EVENTS_QUEUE,
      {
        localConcurrency: options.concurrency,
        batchSize: 8,
        // Without a full batch, pg-boss waits its polling interval after every fetch.
        burstWhenBatchFull: true,
        pollingIntervalSeconds: 0.5,
        // With LISTEN/NOTIFY on, this is the polling interval (30 s by default). NOTIFY fires only
        // when a job is inserted: a retry whose startAfter comes due, or a turn freed by an expired
        // claim after a crash, is found only by polling (docs/cluster.md §5.6).
        notifyPollingIntervalSeconds: 2,
        transactional: true,
      },
      async (jobs: Job<TurnData>[], tx: BossDb) => {
        // Answers first: the batch is claimed and its transaction begun (pg-boss offers no hook
        // before the claim), but nothing is read or locked yet. The wait is bounded by the gate's
        // floor (DEFAULT_DEFERRAL: 500 ms), well inside the claim's expiry and the idle-in-transaction
        // bound.
        await gateCleared(options.gate, () => this.stopping);
        const sql = sqlOfBossDb(tx);
        const keys = jobs.map((job) => job.data.key);
        try {
          await runTurns(sql, keys, turns);
        } catch (err) {
          // Not an event's failure (those are recorded in `events`): the batch's transaction failed,
          // and pg-boss retries its turns with backoff. Said, so that a key held back is visible.
          this.turnFailures += 1;
          if (this.turnFailures === 1 || this.turnFailures % 30 === 0)
            options.logger.warn(
              { err: (err as Error).message, keys: keys.length, count: this.turnFailures },
              'a batch of turns failed; pg-boss retries it',
            );
          throw err;
        }
      },
    );
    if (options.statusClient === null) return;
    // The turns' clock, schedule, logger and queues.
    const polls: PollJobDeps = {
      ...turns,
      client: options.statusClient,
      transaction: (fn) => this.transaction(fn),
      query: (text, values) => sqlOf(this.pool).query(text, values),
      onPoll: options.metrics?.poll,
    };
    await engine.boss.work<PollData>(
      POLL_QUEUE,
      { localConcurrency: 2, pollingIntervalSeconds: 1, notifyPollingIntervalSeconds: 5 },
      async (jobs) => {
        await gateCleared(options.gate, () => this.stopping);
        for (const job of jobs) await runPollJob(job.data.requestId, polls);
      },
    );
  }

  /**
   * A timeline this process had not seen (its first beat, or after a promotion): the first replica
   * to see it releases the job claims left from before (postgres/pg-queues.ts `releaseClaimsBefore`). Tried
   * again at the next beat if it fails.
   */
  private onTimeline(engine: Engine, timeline: number): void {
    const previous = this.timeline;
    this.timeline = timeline;
    this.transaction((sql) => engine.releaseClaimsBefore(sql, timeline))
      .then((released) => {
        if (previous !== null)
          this.options.logger.warn(
            { timeline, previous, released },
            'PostgreSQL is on a new timeline (a standby was promoted): job claims left from before released',
          );
        else if (released > 0)
          this.options.logger.info(
            { timeline, released },
            'first replica on this PostgreSQL timeline: old job claims released',
          );
      })
      .catch(() => {
        this.timeline = previous;
      });
  }

  private transaction<T>(fn: (sql: PgSql) => Promise<T>): Promise<T> {
    return this.onClient((client) => fn(sqlOf(client)));
  }

  /** `fn` in one transaction on a connection of the pool (postgres/pg-statements.ts `inPoolTransaction`). */
  private async onClient<T>(fn: (client: PgPoolClient) => Promise<T>): Promise<T> {
    try {
      return await inPoolTransaction(this.pool, 'BEGIN', fn);
    } catch (err) {
      this.engine?.recoverFrom(err);
      throw err;
    }
  }
}
