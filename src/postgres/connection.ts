import { Client, type ClientConfig, Pool, type PoolClient, type PoolConfig } from 'pg';

/**
 * What every connection of a replica to PostgreSQL carries, so that no replica — frozen (SIGSTOP,
 * a long GC pause), partitioned or slow — can hold a lock the others wait for beyond a bound
 * (issue 22, item 3). The locks in play: the relay's advisory lock, the turn locks (pg-locks.ts),
 * the outbox lock and row locks of a turn (pg-boss's transactions), the destinations' session locks
 * (forwarder.ts).
 *
 * - `idle_in_transaction_session_timeout`: the server ends a session that sits in an open
 *   transaction without sending a statement for this long. A frozen or partitioned replica is just
 *   that, whatever TCP still says (a stopped process's kernel keeps answering keepalives), so its
 *   transaction-scoped locks are freed after it. The replica, continued, finds its connection gone:
 *   the transaction rolled back, and what it was relaying is relayed again (the spool's cursor moves
 *   only after a commit).
 * - TCP keepalives and `tcp_user_timeout` on the server's side: a replica whose machine vanished
 *   (no FIN, no RST) is noticed in about 25 s instead of the OS default of 2 hours, and data the
 *   server is sending to it stays unacknowledged at most 15 s. On the client's side (`keepAlive`),
 *   the replica notices a server that vanished.
 * - `lock_timeout` is not a session setting here: it is set by the transactions whose wait may fail
 *   and be tried again (the relay's, relay.ts), never on the migrations, which wait for one another
 *   on purpose.
 *
 * These go as the startup packet's `options` (`-c name=value`), which PostgreSQL applies before the
 * first statement. Options given in DATABASE_URL (`?options=...`) replace them (node-postgres lets
 * the URL win). A pooler must pass them through (PgBouncer: `ignore_startup_parameters` must not
 * list `options`), as it must already give the listener a session connection.
 */

export interface ConnectionLimits {
  /**
   * PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: the longest a replica's transaction may sit between two
   * statements before the server ends it (and frees its locks). A partner's cluster handler that
   * awaits longer than this inside a turn has its batch rolled back and retried.
   * @default 10000
   */
  idleInTransactionMs: number;
  /**
   * PG_LOCK_TIMEOUT_MS: the longest the relay waits for a lock (the relay lock, a key's turn lock)
   * before it gives its batch up and tries again, so that it does not hold the relay lock for the
   * others while it waits behind a slow turn. @default 5000
   */
  lockTimeoutMs: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = Object.freeze({
  idleInTransactionMs: 10_000,
  lockTimeoutMs: 5_000,
});

/** Seconds of silence before the server probes a replica's socket, between probes, and probes lost. */
const SERVER_KEEPALIVES = { idle: 10, interval: 5, count: 3 } as const;
/** The longest data the server sent may stay unacknowledged before it drops the connection. */
const SERVER_TCP_USER_TIMEOUT_MS = 15_000;
/** The replica's own sockets: first keepalive probe after this much silence. */
const CLIENT_KEEPALIVE_DELAY_MS = 10_000;

/**
 * A node-postgres client with an 'error' listener from birth. The pool takes its own listener off a
 * client while the client is checked out, and whoever checks it out with `pool.connect()` can add
 * one only after its await; when a query's last answer and the server's FATAL (PostgreSQL SIGKILLed
 * or restarted: `57P01`) arrive in one read, the client is handed to the next waiter and emits
 * 'error' in between with nobody listening, an uncaught exception (it happened in CI). The
 * statement that fails still rejects, and the pool still drops a dead idle client; this listener
 * only keeps the event from being fatal. test/integration/connection-errors.test.ts.
 */
export class GuardedClient extends Client {
  constructor(config?: string | ClientConfig) {
    super(config);
    this.on('error', () => undefined);
  }
}

/**
 * node-postgres, the driver, as the rest of the receiver reaches it: only src/postgres/ imports
 * `pg`. A pool of connections, one of its connections checked out, a connection of its own (a
 * listener, a holder of session locks).
 */
export type PgPool = Pool;
export type PgPoolClient = PoolClient;
export type PgConnection = Client;

/** A pool of connections to PostgreSQL, made with `config` (its connectionString, size, settings). */
export function pgPool(config: PoolConfig): PgPool {
  return new Pool(config);
}

/** A connection of its own to PostgreSQL, made with `config`, not yet connected. */
export function pgConnection(config: ClientConfig): PgConnection {
  return new Client(config);
}

/** The node-postgres settings of a replica's pools and clients (pg-boss's pool included). */
export type ConnectionSettings = ReturnType<typeof connectionSettings>;

/**
 * The settings for a pg Pool or Client: spread them into its config. `Client` is the class a pool
 * makes its clients with (pg-pool's option).
 */
export function connectionSettings(limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS) {
  const gucs: Record<string, number> = {
    idle_in_transaction_session_timeout: limits.idleInTransactionMs,
    tcp_keepalives_idle: SERVER_KEEPALIVES.idle,
    tcp_keepalives_interval: SERVER_KEEPALIVES.interval,
    tcp_keepalives_count: SERVER_KEEPALIVES.count,
    tcp_user_timeout: SERVER_TCP_USER_TIMEOUT_MS,
  };
  return {
    Client: GuardedClient,
    keepAlive: true as const,
    keepAliveInitialDelayMillis: CLIENT_KEEPALIVE_DELAY_MS,
    options: Object.entries(gucs)
      .map(([name, value]) => `-c ${name}=${value}`)
      .join(' '),
  };
}

/**
 * DATABASE_URL as it may be logged: scheme, user, host, port and database, never the password nor
 * the query string (which may carry one). An unparsable value is not echoed at all.
 */
export function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    const user = u.username === '' ? '' : `${decodeURIComponent(u.username)}@`;
    return `${u.protocol}//${user}${u.host}${u.pathname}`;
  } catch {
    return '(DATABASE_URL unparsable)';
  }
}

/**
 * An error's message (or a text) as it may be logged or shown next to DATABASE_URL: the password
 * (as written, decoded, or encoded again) and the whole URL, should a driver ever echo them,
 * replaced. PostgreSQL's own messages name the user, never the password; this is the guard for the
 * ones that are not PostgreSQL's.
 */
export function redactedMessage(err: unknown, url: string): string {
  let message = err instanceof Error ? err.message : String(err);
  if (message === '') message = (err as { code?: string } | null)?.code ?? 'unknown error';
  const secrets = [url];
  try {
    const password = new URL(url).password;
    const decoded = decodeURIComponent(password);
    if (password !== '') secrets.push(password, decoded, encodeURIComponent(decoded));
  } catch {
    // An unparsable URL: only the whole value is replaced.
  }
  for (const secret of secrets.filter((s) => s.length > 0).sort((a, b) => b.length - a.length))
    message = message.split(secret).join('***');
  return message;
}

/**
 * `work`, or a rejection once `ms` passed without it (`no answer <from> within <ms> ms`): a
 * connection that stopped answering (a frozen or partitioned server) holds its caller no longer.
 */
export function answeredWithin<T>(work: Promise<T>, ms: number, from: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer ${from} within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
