import {
  answeredWithin,
  type ConnectionSettings,
  type PgConnection,
  pgConnection,
  type PgPool,
} from '../../postgres/connection';
import type { CircuitState } from '../../domain/forwarding/circuit';
import { asError } from '../../domain/handler-failure';
import type { Destination } from '../../domain/forwarding/destinations';
import type { SenderStore } from '../../domain/forwarding/sender-store';
import { senderStore } from '../../core/sender-queries';
import { pgStoreSql, poolRunners } from '../../postgres/pg-statements';
import type { ClusterLogger } from '../../postgres/pg-sql';
import { OUTBOX_CHANNEL } from '../../postgres/pg-outbox';

/**
 * Forwarding in cluster mode (contract §8 and §10): the outbox lives in PostgreSQL
 * (`migrations-pg/0003_forwarding.sql`), every replica runs a ClusterForwarder, and **each
 * destination is sent by exactly one replica at a time: the holder of that destination's
 * PostgreSQL session advisory lock**.
 *
 * - The locks are taken on a dedicated connection (a `pg.Client`, never a pool's: a pool hands its
 *   connections round and ends idle ones, and a session lock lives and dies with its connection).
 *   The same connection `LISTEN`s on `consig_forward`, which the turn notifies after committing new
 *   messages, and each notification nudges the senders.
 * - Every `lockRetryMs` the replica tries the locks it does not hold (`pg_try_advisory_lock`, never
 *   waiting); for each lock taken it starts a sender for that one destination (the same
 *   forwarding/sender.ts as SQLite mode, on the same store, core/sender-queries.ts). When every
 *   lock is held the same query is a heartbeat.
 * - The whole forwarder runs in the forwarding thread (runtime/sender-worker.ts), as SQLite
 *   mode's sender does: on the main thread its senders' turns and their garbage held webhook answers
 *   for 50–100 ms at a time on a starved core (issue 23).
 * - When the lock connection errors or ends (PostgreSQL restarted or failed over,
 *   `pg_terminate_backend`, a heartbeat unanswered for LOCK_QUERY_TIMEOUT_MS), the locks are gone and
 *   another replica may already be sending: every sender is stopped at once, what is in flight
 *   aborted. An aborted request the destination did receive is sent again by the next holder with the
 *   same `webhook-id` (at-least-once, as a crash in SQLite mode). Then the replica reconnects with
 *   backoff and tries again. It never crashes the process: every client has an 'error' listener.
 * - Exclusivity comes from PostgreSQL alone, so it holds across any number of replicas; a replica
 *   that dies frees its locks with its connection (the lock connection turns on TCP keepalives, so
 *   the server notices a replica that vanished without closing its socket within about 25 s).
 * - stop(): senders stop first (their answers recorded), then the locks are released, so the next
 *   holder never re-sends what this one recorded.
 *
 * Why session locks rather than a pg-boss job per destination (docs/cluster.md §5.5 sketched one): a
 * sender is a long-lived stream — in-memory circuit and rate-limit state, keep-alive agents, per-line
 * ordering with 16 requests in flight. A job per destination would have to run for ever with
 * heartbeats, and would move between replicas on every run; a session lock gives the same
 * exclusivity, and PostgreSQL frees it the moment the holder's connection dies.
 *
 * Lock keys: the two-int form `(FORWARD_LOCK_CLASS, hashtext(name))`, a key space PostgreSQL keeps
 * apart from the one-bigint form the relay, the migrations and the turns use. Two destination names
 * with the same hash share one lock: one replica then sends both, which is still exclusive.
 */

/** What a destination's sender offers the forwarder: forwarding/sender.ts's ForwardSender fits. */
export interface DestinationSender {
  start(): void;
  nudge(): void;
  /** Stops sending; waits up to `timeoutMs` for requests in flight, then aborts them. */
  stop(timeoutMs: number): Promise<boolean>;
  readonly inFlight: number;
  circuits(): Map<string, CircuitState>;
}

export interface ClusterForwarderOptions {
  /** The pool the senders read and record on. */
  pool: PgPool;
  /** Where the lock connection goes: the database `pool` reaches (`DATABASE_URL`). */
  connectionString: string;
  destinations: readonly Destination[];
  /**
   * Builds the sender of one destination on the PostgreSQL store (main:
   * `new ForwardSender(store, [destination], { clock, logger, metrics, pollIntervalMs, concurrency })`).
   * Passed in: cluster/ imports nothing of forwarding/ (the layering lint).
   */
  createSender(destination: Destination, store: SenderStore): DestinationSender;
  logger: Pick<ClusterLogger, 'info' | 'warn'>;
  /**
   * How often the locks this replica does not hold are tried (and the lock connection checked):
   * a dead holder's destinations are taken over within about this long.
   * @default 2000
   */
  lockRetryMs?: number;
  /**
   * The longest wait between two attempts to reconnect the lock connection.
   * @default 30000
   */
  maxBackoffMs?: number;
  /**
   * The lock connection's `application_name` (pg_stat_activity), one per replica.
   * @default 'consig-receiver:forwarder'
   */
  applicationName?: string;
  /**
   * connection.ts's settings (server-side keepalives and bounds) for the lock connection.
   * @default client-side keepalives and KEEPALIVES only
   */
  settings?: ConnectionSettings;
  /** This replica took (true) or gave up (false) a destination, for a metric. @default none */
  onHeld?(destination: string, held: boolean): void;
  /**
   * Every `consig_forward` notification (new messages committed anywhere), after the senders were
   * nudged: the change feed's long-polls wake on it. Given, the lock connection runs (and listens)
   * even with no destination configured.
   * @default none
   */
  onNotify?(): void;
}

/** The class of the forwarding locks, first key of the two-int form (ASCII "cfFW"). */
export const FORWARD_LOCK_CLASS = 0x63664657;

const TRY_LOCKS = `SELECT t.name, pg_try_advisory_lock($1::int, hashtext(t.name)) AS locked
  FROM unnest($2::text[]) AS t(name)`;
// The server notices a replica that vanished (no FIN, no RST) only by its keepalives: the OS default
// is 2 hours, during which the dead replica's locks would hold its destinations.
const KEEPALIVES =
  'SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3';
/**
 * A frozen holder (SIGSTOP, a long pause) keeps its socket and answers keepalives: only its silence
 * tells. The lock connection speaks every lockRetryMs (a heartbeat or a try), so the server ends it
 * after IDLE_SESSION_ROUNDS rounds without a word (at least IDLE_SESSION_MIN_MS) and its locks go
 * with it: another replica takes the destinations within the bound plus lockRetryMs. Servers before
 * 14 have no idle_session_timeout: the set is skipped there.
 */
const IDLE_SESSION_ROUNDS = 4;
const IDLE_SESSION_MIN_MS = 10_000;
const IDLE_SESSION = `SELECT set_config(name, $1, false) FROM pg_settings WHERE name = 'idle_session_timeout'`;
/** A query on the lock connection unanswered this long counts as the connection lost. */
const LOCK_QUERY_TIMEOUT_MS = 10_000;

export class ClusterForwarder {
  private readonly store: SenderStore;
  private readonly byName: Map<string, Destination>;
  private readonly senders = new Map<string, DestinationSender>();
  private client: PgConnection | null = null;
  private running = false;
  /** stop() has closed the lock connection: a tick still connecting closes what it opens. */
  private closed = false;
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  /** Senders stopped after the lock connection was lost: no sender of theirs starts before they are done. */
  private retiring: Promise<unknown> = Promise.resolve();
  private failures = 0;

  constructor(private readonly options: ClusterForwarderOptions) {
    this.store = senderStore(pgStoreSql(poolRunners(options.pool), options.pool));
    this.byName = new Map(options.destinations.map((d) => [d.name, d]));
    // A connection of the pool dropped while idle (a restart) must not be an uncaught 'error'.
    options.pool.on('error', () => undefined);
  }

  /** Starts trying the locks (in the background: PostgreSQL being away only delays it). */
  start(): void {
    if (this.running || (this.byName.size === 0 && this.options.onNotify === undefined)) return;
    this.running = true;
    this.closed = false;
    this.tick();
  }

  /** New messages were committed (or an operator replayed some): the senders this replica runs look now. */
  nudge(): void {
    for (const sender of this.senders.values()) sender.nudge();
  }

  /** Deliveries sent and not yet recorded, by the senders of this replica. */
  get inFlight(): number {
    let n = 0;
    for (const sender of this.senders.values()) n += sender.inFlight;
    return n;
  }

  /** The circuit of each destination this replica sends (the others' are in their holders). */
  circuits(): Map<string, CircuitState> {
    const all = new Map<string, CircuitState>();
    for (const sender of this.senders.values()) for (const [name, c] of sender.circuits()) all.set(name, c);
    return all;
  }

  /** The destinations this replica sends now (holds the lock of), sorted. */
  holding(): string[] {
    return [...this.senders.keys()].sort();
  }

  /** Whether the lock connection is up. */
  get connected(): boolean {
    return this.client !== null;
  }

  /**
   * Stops the senders (each waits up to `timeoutMs` for its requests in flight and records their
   * answers), then releases the locks and closes the lock connection. True when everything in
   * flight finished in time.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await within(this.ticking ?? Promise.resolve(), timeoutMs);
    const finished = await this.retire(timeoutMs);
    await this.retiring;
    // Before the close: a tick that connects while it runs closes its own connection.
    this.closed = true;
    await this.closeClient();
    return finished;
  }

  /** Releases the locks and closes the lock connection (bounded: the server may be gone). */
  private async closeClient(): Promise<void> {
    const client = this.client;
    this.client = null;
    if (client === null) return;
    await within(client.query('SELECT pg_advisory_unlock_all()'), 2000);
    await within(client.end(), 2000);
  }

  private tick(): void {
    this.timer = null;
    if (!this.running || this.ticking !== null) return;
    this.ticking = this.tickOnce().then(async (delayMs) => {
      this.ticking = null;
      // Stopped meanwhile. The locks go only once the senders are done (stop() releases them after
      // it retired them): a tick that ends during a stop leaves the connection to stop(). Only one
      // that ends after stop() is over (it gave up waiting for it while connecting) closes what it opened.
      if (!this.running) return this.closed ? this.closeClient() : undefined;
      this.timer = setTimeout(() => this.tick(), delayMs);
      this.timer.unref();
    });
  }

  /** Connects if needed and tries the locks not held. Never rejects; resolves to the wait until the next tick. */
  private async tickOnce(): Promise<number> {
    const retryMs = this.options.lockRetryMs ?? 2000;
    try {
      await this.retiring;
      const client = this.client ?? (await this.connect());
      await this.takeLocks(client);
      if (this.failures > 0)
        this.options.logger.info(
          { failures: this.failures },
          'forwarding: lock connection to PostgreSQL back',
        );
      this.failures = 0;
      return retryMs;
    } catch (err) {
      this.failures += 1;
      this.lost(this.client, err);
      // Once, then every 30th: PostgreSQL away for long is reported by the cluster's own alerts.
      if (this.failures === 1 || this.failures % 30 === 0)
        this.options.logger.warn(
          { err: asError(err).message, failures: this.failures },
          'forwarding: cannot take the destinations’ locks on PostgreSQL; trying again',
        );
      return Math.min(this.options.maxBackoffMs ?? 30_000, retryMs * 2 ** Math.min(this.failures - 1, 10));
    }
  }

  private async connect(): Promise<PgConnection> {
    const client = pgConnection({
      connectionString: this.options.connectionString,
      application_name: this.options.applicationName ?? 'consig-receiver:forwarder',
      keepAlive: true,
      connectionTimeoutMillis: 5000,
      ...this.options.settings,
    });
    // Listeners before connect(): an error then is the caller's rejection, never an uncaught event.
    client.on('error', (err) => this.lost(client, err));
    client.on('end', () => this.lost(client, new Error('the lock connection ended')));
    client.on('notification', () => {
      this.nudge();
      this.options.onNotify?.();
    });
    try {
      await this.timed(client.connect());
      await this.timed(client.query(KEEPALIVES));
      const idleMs = Math.max(IDLE_SESSION_MIN_MS, IDLE_SESSION_ROUNDS * (this.options.lockRetryMs ?? 2000));
      await this.timed(client.query(IDLE_SESSION, [String(idleMs)]));
      await this.timed(client.query(`LISTEN ${OUTBOX_CHANNEL}`));
    } catch (err) {
      void client.end().catch(() => undefined);
      throw err;
    }
    this.client = client;
    return client;
  }

  private async takeLocks(client: PgConnection): Promise<void> {
    const wanted = [...this.byName.keys()].filter((name) => !this.senders.has(name));
    if (wanted.length === 0) {
      await this.timed(client.query('SELECT 1')); // the heartbeat: a dead connection fails it
      return;
    }
    const { rows } = await this.timed(
      client.query<{ name: string; locked: boolean }>(TRY_LOCKS, [FORWARD_LOCK_CLASS, wanted]),
    );
    // Lost meanwhile: whatever was granted went with the connection. Stopping: stop() unlocks.
    if (client !== this.client || !this.running) return;
    for (const row of rows) if (row.locked) this.startSender(row.name);
  }

  private startSender(name: string): void {
    const destination = this.byName.get(name);
    if (destination === undefined || this.senders.has(name)) return;
    const sender = this.options.createSender(destination, this.store);
    this.senders.set(name, sender);
    sender.start();
    this.options.onHeld?.(name, true);
    this.options.logger.info({ destination: name }, 'forwarding: this replica now sends to the destination');
  }

  /** The lock connection is gone (or failed a query): so are its locks. Stops every sender at once. */
  private lost(client: PgConnection | null, err: unknown): void {
    if (client === null || client !== this.client) return;
    this.client = null;
    void client.end().catch(() => undefined);
    if (this.senders.size > 0)
      this.options.logger.warn(
        { err: asError(err).message, destinations: this.holding() },
        'forwarding: lost the lock connection to PostgreSQL; stopped sending (what was in flight is sent again by the next holder, same webhook-id)',
      );
    void this.retire(0);
  }

  /** Stops every sender (bounded by `timeoutMs` each, then aborted); resolves true when none was cut short. */
  private retire(timeoutMs: number): Promise<boolean> {
    const senders = [...this.senders];
    this.senders.clear();
    for (const [name] of senders) this.options.onHeld?.(name, false);
    const done = Promise.all(senders.map(([, s]) => s.stop(timeoutMs).catch(() => false))).then((all) =>
      all.every(Boolean),
    );
    this.retiring = Promise.all([this.retiring, done]);
    return done;
  }

  /** `work`, or a rejection once LOCK_QUERY_TIMEOUT_MS passed (a connection that stopped answering). */
  private timed<T>(work: Promise<T>): Promise<T> {
    return answeredWithin(work, LOCK_QUERY_TIMEOUT_MS, 'on the lock connection');
  }
}

/** Waits for `work` (settled either way) at most `ms`. clock.ts's settlesWithin, which cluster/ may not import. */
async function within(work: Promise<unknown>, ms: number): Promise<void> {
  await answeredWithin(work, ms, 'in time').catch(() => undefined);
}
