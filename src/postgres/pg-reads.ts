import { Client, DatabaseError } from 'pg';
import { ConsigError, StorageError } from '../domain/errors';
import { forwardingFigures } from '../core/sender-queries';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import type { ReplicaDeliveries } from '../core/store-reads';
import type { StoreQuery } from '../domain/sql/store-sql';
import { idRuns, type SpoolFacts, type SpoolVerdict } from '../domain/relay-gap';
import { redactedMessage } from './connection';

/**
 * The log commands' way to PostgreSQL in cluster mode (contract §10): their connection, and the
 * errors said in one line without the password. Rows read through StoreSql come in the SQLite
 * log's shapes (pg-statements.ts STORE_TYPES). The reads themselves are written once for both stores
 * (src/core/); here only `stats`' figures that PostgreSQL alone has ({@link readStoreFigures}), and
 * `relay verify`'s.
 */

/**
 * Where DATABASE_URL points, without the user and the password (what messages may show): host,
 * port and database of a `postgres://` URL. A socket directory given as `?host=/run/postgresql` is
 * the host.
 */
export function pgTarget(databaseUrl: string): { host: string; port: number; database: string } {
  const url = new URL(databaseUrl);
  const host = url.searchParams.get('host') ?? (decodeURIComponent(url.hostname) || 'localhost');
  return {
    host,
    port: url.port === '' ? 5432 : Number(url.port),
    database: decodeURIComponent(url.pathname.slice(1)),
  };
}

type PgTarget = ReturnType<typeof pgTarget>;

/** `postgres://host:port/database`: the target as the commands print it. */
export function describePgTarget(t: PgTarget): string {
  return `postgres://${t.host}:${t.port}/${t.database}`;
}

/** A read that waits longer than this for a connection is an unreachable server, said in one line. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * Opens a connection of its own to `databaseUrl` for a command, hands it to `use`, and closes it
 * whatever happens. Connection and server errors become a StorageError of one line naming host,
 * port and database, never the user's password.
 */
export async function withPgConnection<T>(
  databaseUrl: string,
  use: (client: Client) => Promise<T>,
  applicationName = 'consig-receiver log command',
): Promise<T> {
  const target = pgTarget(databaseUrl);
  const client = new Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: applicationName,
  });
  // An error on the idle connection must not crash the command; the next query says it instead.
  client.on('error', () => {});
  try {
    try {
      await client.connect();
    } catch (err) {
      throw pgError(err, target, databaseUrl, true);
    }
    try {
      return await use(client);
    } catch (err) {
      throw pgError(err, target, databaseUrl, false);
    }
  } finally {
    await client.end().catch(() => {});
  }
}

const NETWORK_CODE = /^E[A-Z_]+$/;
// Connection exceptions, insufficient resources (too many connections), operator intervention
// (shutdown, restart, statement timeout) and system errors: the server cannot serve now.
const UNAVAILABLE_SQLSTATE = /^(08|53|57|58)/;

/**
 * Whether `err` means PostgreSQL cannot serve this process now (down, restarting, failing over,
 * out of connections, a connection cut, a timeout), as opposed to a statement it refused: the
 * first is worth asking again later, the second is a fault.
 */
export function isPgUnavailable(err: unknown): boolean {
  // Read by shape: a socket's error may come from another realm than this module's Error (a VM
  // context, Jest's sandbox), where instanceof says no.
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (err instanceof DatabaseError) return typeof code === 'string' && UNAVAILABLE_SQLSTATE.test(code);
  if (typeof code === 'string' && NETWORK_CODE.test(code)) return true;
  // The driver's own: a connection timeout, a connection closed under the query.
  return typeof message === 'string' && /connect|timeout|terminated/i.test(message);
}

/** One line for what went wrong at PostgreSQL; errors of other kinds pass through. */
export function pgError(err: unknown, t: PgTarget, url: string, connecting: boolean): unknown {
  if (err instanceof ConsigError || !(err instanceof Error)) return err;
  const where = `${t.host}:${t.port}`;
  // A message of the server or the driver names no password; this is in case one ever does.
  const scrub = (text: string): string => redactedMessage(text, url);
  const code = (err as { code?: unknown }).code;
  if (err instanceof DatabaseError) {
    if (code === '42P01') {
      return new StorageError(
        `PostgreSQL database "${t.database}" at ${where} has no cluster schema (${scrub(err.message)}): start a replica with this DATABASE_URL to migrate it`,
      );
    }
    return new StorageError(
      `PostgreSQL database "${t.database}" at ${where}: ${scrub(err.message)} (${code})`,
    );
  }
  if (typeof code === 'string' && NETWORK_CODE.test(code))
    return new StorageError(`cannot reach PostgreSQL at ${where} (${code})`);
  // The driver's own: a connection timeout, a connection closed under the query, a TLS refusal.
  if (connecting || /connection|timeout|terminated/i.test(err.message))
    return new StorageError(`cannot reach PostgreSQL at ${where} (${scrub(err.message)})`);
  return err;
}

/**
 * `stats`' figures PostgreSQL keeps its own way, read in the caller's one snapshot: the database's
 * size, who answered the deliveries, the forwarding gauges (null when the database has no
 * forwarding tables yet: migrated by replicas older than migrations-pg/0003). The rest of `stats`
 * is core/store-reads.ts `storeFigures`, the same in both stores.
 */
export async function readStoreFigures(q: StoreQuery, destinations: readonly string[] = []) {
  const [size] = await q.rows<{ bytes: number }>('SELECT pg_database_size(current_database()) AS bytes');
  const replicas = await q.rows<ReplicaDeliveries>(
    `SELECT replica, count(*) AS deliveries, max(received_at) AS last_received_at
     FROM deliveries GROUP BY replica ORDER BY replica COLLATE "C"`,
  );
  // A boolean, read as 0/1 (STORE_TYPES). The configured destinations, then the others.
  const [schema] = await q.rows<{ present: number }>(
    "SELECT to_regclass('forward_destinations') IS NOT NULL AS present",
  );
  const forwarding: DestinationGauges[] | null =
    schema?.present === 1 ? await forwardingFigures(q, destinations) : null;
  return { databaseBytes: size?.bytes ?? 0, replicas, forwarding };
}

const VERIFY_CHUNK = 10_000;

/**
 * `relay verify` (issue 32, docs/cluster-mode.md "PostgreSQL failover"): a spool beside this
 * command compared with what PostgreSQL holds of it. Its relayed deliveries are looked up by
 * (spool, spool_id), the key the relay inserts them under, in chunks of {@link VERIFY_CHUNK}.
 */
export async function verifySpool(q: StoreQuery, spool: SpoolFacts): Promise<SpoolVerdict> {
  const [record] = await q.rows<{ relayed_through: string }>(
    'SELECT relayed_through FROM relay_spools WHERE spool = $1',
    [spool.id],
  );
  const missing: number[] = [];
  for (let i = 0; i < spool.relayedIds.length; i += VERIFY_CHUNK) {
    const chunk = spool.relayedIds.slice(i, i + VERIFY_CHUNK);
    const rows = await q.rows<{ id: string }>(
      `SELECT s.id FROM unnest($2::bigint[]) AS s(id)
       WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.spool = $1 AND d.spool_id = s.id) ORDER BY s.id`,
      [spool.id, chunk],
    );
    missing.push(...rows.map((r) => Number(r.id)));
  }
  return {
    spool: spool.id,
    relayedThrough: spool.relayedThrough,
    recorded: record === undefined ? null : Number(record.relayed_through),
    missing: idRuns(missing),
    backlog: spool.backlog,
  };
}

/** Every spool PostgreSQL knows, with its replica: the others are checked beside their replicas. */
export async function knownSpools(
  q: StoreQuery,
): Promise<{ spool: string; replica: string; relayed_through: number }[]> {
  const rows = await q.rows<{ spool: string; replica: string; relayed_through: string }>(
    'SELECT spool, replica, relayed_through FROM relay_spools ORDER BY replica, spool',
  );
  return rows.map((r) => ({ ...r, relayed_through: Number(r.relayed_through) }));
}
