import {
  answeredWithin,
  type ConnectionSettings,
  describeDatabase,
  type PgConnection,
  pgConnection,
  redactedMessage,
} from '../../postgres/connection';
import type { ClusterLogger } from '../../postgres/pg-sql';

/**
 * Whether this replica reaches PostgreSQL now (issue 22, item 2): `consig_cluster_connected`,
 * `consig_processing_holder` and `/readyz`'s `processing` follow it. A connection of its own runs
 * `SELECT 1` every INTERVAL_MS; a query unanswered within TIMEOUT_MS, an error or the connection
 * ending (a server stopped, restarted, failed over) marks the replica disconnected at once, and the
 * next answered heartbeat marks it connected again. So the figures drop within interval + timeout
 * (10 s) of losing PostgreSQL, usually at once (a stopped server closes the socket).
 *
 * Its own connection, not one of the pool's: a pool busy with a long relay catch-up or admin reads
 * would make a heartbeat wait for a connection and report a healthy server as lost.
 */

const INTERVAL_MS = 5000;
const TIMEOUT_MS = 5000;
/** While PostgreSQL stays away, the error is said again this often. */
const REPEAT_MS = 60_000;

export interface LivenessOptions {
  connectionString: string;
  settings: ConnectionSettings;
  applicationName: string;
  logger: Pick<ClusterLogger, 'info' | 'error'>;
}

export class Liveness {
  private client: PgConnection | null = null;
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private up = false;
  /** When the current outage began (ms), and when it was last logged; null while connected. */
  private downSince: number | null = null;
  private loggedAt = 0;

  constructor(private readonly options: LivenessOptions) {}

  /** True while the last heartbeat was answered and the connection has not failed since. */
  get connected(): boolean {
    return this.up;
  }

  /** Starts beating; `initiallyUp`: the caller just reached PostgreSQL (it started the cluster). */
  start(initiallyUp: boolean): void {
    if (this.running) return;
    this.running = true;
    this.up = initiallyUp;
    this.tick();
  }

  /** Stops beating; a beat in flight is not waited for (it may wait for a server that is away). */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  private tick(): void {
    this.timer = null;
    if (!this.running) return;
    void this.beat().then(() => {
      if (!this.running) return;
      this.timer = setTimeout(() => this.tick(), INTERVAL_MS);
      this.timer.unref();
    });
  }

  private async beat(): Promise<void> {
    try {
      const client = this.client ?? (await this.connect());
      await this.timed(client.query('SELECT 1'));
      if (this.running) this.markUp();
    } catch (err) {
      if (this.running) this.markDown(this.client, err);
    }
  }

  private async connect(): Promise<PgConnection> {
    const client = pgConnection({
      connectionString: this.options.connectionString,
      application_name: this.options.applicationName,
      connectionTimeoutMillis: TIMEOUT_MS,
      ...this.options.settings,
    });
    // Listeners before connect(): a server that goes away is an event here, never an uncaught one.
    client.on('error', (err) => this.markDown(client, err));
    client.on('end', () => this.markDown(client, new Error('the connection to PostgreSQL ended')));
    try {
      await this.timed(client.connect());
      if (!this.running) throw new Error('stopped');
    } catch (err) {
      void client.end().catch(() => undefined);
      throw err;
    }
    this.client = client;
    return client;
  }

  private markUp(): void {
    const now = Date.now();
    if (!this.up && this.downSince !== null)
      this.options.logger.info(
        { database: describeDatabase(this.options.connectionString), down_ms: now - this.downSince },
        'cluster mode: PostgreSQL reachable again',
      );
    this.up = true;
    this.downSince = null;
  }

  /** The connection failed (or never opened): disconnected now; said once, then every REPEAT_MS. */
  private markDown(client: PgConnection | null, err: unknown): void {
    if (client !== null && client === this.client) {
      this.client = null;
      void client.end().catch(() => undefined);
    } else if (client !== null) return; // an old connection's late event
    const now = Date.now();
    const wasUp = this.up;
    this.up = false;
    this.downSince ??= now;
    if (!wasUp && now - this.loggedAt < REPEAT_MS) return;
    this.loggedAt = now;
    this.options.logger.error(
      {
        err: redactedMessage(err, this.options.connectionString),
        database: describeDatabase(this.options.connectionString),
        down_ms: now - this.downSince,
      },
      'cluster mode: PostgreSQL unreachable; acknowledging from the spool, relay and processing wait for it',
    );
  }

  private timed<T>(work: Promise<T>): Promise<T> {
    return answeredWithin(work, TIMEOUT_MS, 'from PostgreSQL');
  }
}
