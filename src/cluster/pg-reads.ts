import { Client, type ClientBase, DatabaseError, types } from 'pg';
import type { ProposalKey } from '../domain/console';
import type { DeliveryRow } from '../domain/delivery';
import { ConsigError, StorageError } from '../domain/errors';
import type { EventRow } from '../domain/event-status';
import {
  type AverbacaoRow,
  INTEGER_TEXT,
  logNuProposta,
  type ProposalRow,
  type TimelineRow,
  withLogNuProposta,
} from '../domain/log-rows';
import type { DestinationGauges } from '../domain/forwarding/sender-store';
import {
  AVERBACAO,
  averbacoesQuery,
  EVENT_COLUMNS,
  eventsQuery,
  PROPOSAL,
  type SharedQuery,
  TIMELINE,
  whereGiven,
} from '../domain/sql/log-reads';
import type { StuckCutoff } from '../domain/stuck';
import { FORWARD_GAUGES_SQL } from './pg-forward-store';

/**
 * The log commands' reads in cluster mode (contract §10): the tables of contract §5 as PostgreSQL
 * holds them, given back in the shapes the SQLite log has, so that one renderer serves both:
 * timestamps as the ISO-8601 text SQLite stores (`2026-11-21T13:00:00.000Z`), booleans as 0/1,
 * bigint ids, counts and the `numeric` amount as numbers, and a `nu_proposta` that is an integer
 * as a number (SQLite's INTEGER affinity does the same). One function per query family; every
 * value is a parameter. The columns only the cluster has (replica, relayed_at, …) are not
 * selected, except where a command shows them on purpose (`stats`' replicas).
 */

/** What the reads run on: a connection of {@link withPgReads}, or any pg client or pool. */
export type PgReader = Pick<ClientBase, 'query'>;

/** Where DATABASE_URL points, without the user and the password: what messages may show. */
export interface PgTarget {
  host: string;
  port: number;
  database: string;
}

/**
 * Host, port and database of a `postgres://` URL (never its user or password). A socket directory
 * given as `?host=/run/postgresql` is the host.
 */
export function pgTarget(databaseUrl: string): PgTarget {
  const url = new URL(databaseUrl);
  const host = url.searchParams.get('host') ?? (decodeURIComponent(url.hostname) || 'localhost');
  return {
    host,
    port: url.port === '' ? 5432 : Number(url.port),
    database: decodeURIComponent(url.pathname.slice(1)),
  };
}

/** `postgres://host:port/database`: the target as the commands print it. */
export function describePgTarget(t: PgTarget): string {
  return `postgres://${t.host}:${t.port}/${t.database}`;
}

/** A read that waits longer than this for a connection is an unreachable server, said in one line. */
const CONNECT_TIMEOUT_MS = 10_000;

const { INT8, NUMERIC, BOOL, TIMESTAMPTZ } = types.builtins;
const parseTimestamptz = types.getTypeParser(TIMESTAMPTZ, 'text') as (v: string) => Date;

/**
 * The SQLite log's representation, applied by the driver to every column of these reads: given with
 * each query, so they read the same on any connection or pool, and the global parsers stay as they
 * are. bigint → number: ids and counts stay far below 2^53. numeric → number: SQLite keeps
 * vl_emprestimo as a REAL. timestamptz → its instant as `Date#toISOString()` writes it.
 */
export const LOG_TYPES = {
  getTypeParser: ((id: number, format?: 'text' | 'binary') => {
    if (format === undefined || format === 'text') {
      if (id === INT8 || id === NUMERIC) return (v: string) => Number(v);
      if (id === BOOL) return (v: string) => (v === 't' ? 1 : 0);
      if (id === TIMESTAMPTZ) return (v: string) => parseTimestamptz(v).toISOString();
    }
    return types.getTypeParser(id, format);
  }) as typeof types.getTypeParser,
};

const integerText = new RegExp(INTEGER_TEXT);

/**
 * SQLite's order of `nu_proposta` (integers by value before text by bytes) as keys PostgreSQL
 * sorts on: text or not, an integer's length, then the bytes. Proposals with the same `updated_at`
 * so come in the same order in both modes, and a keyset page goes on where SQLite's would.
 */
const NU_KEYS = [
  `(nu_proposta !~ '${INTEGER_TEXT}')`,
  `(CASE WHEN nu_proposta ~ '${INTEGER_TEXT}' THEN length(nu_proposta) ELSE 0 END)`,
  'nu_proposta COLLATE "C"',
];

function nuPropostaOrder(direction: 'ASC' | 'DESC'): string {
  return NU_KEYS.map((k) => `${k} ${direction}`).join(', ');
}

/**
 * `(updated_at, nu keys) < key` (`<`: newest first) or `>` as a condition with its parameters,
 * numbered from `$${first}`.
 */
function afterKey(key: ProposalKey, op: '<' | '>', first: number): { sql: string; params: unknown[] } {
  const nu = String(key.nu_proposta);
  const text = !integerText.test(nu);
  const [a, b, c, d] = [first, first + 1, first + 2, first + 3];
  return {
    sql: `(updated_at, ${NU_KEYS.join(', ')}) ${op} ($${a}::timestamptz, $${b}::boolean, $${c}::int, $${d}::text)`,
    params: [key.updated_at, text, text ? 0 : nu.length, nu],
  };
}

/** The rows of one query, in the SQLite log's representation (LOG_TYPES). */
export async function rows<T>(db: PgReader, sql: string, params: readonly unknown[] = []): Promise<T[]> {
  return (await db.query({ text: sql, values: [...params], types: LOG_TYPES })).rows as T[];
}

/** The rows of a statement shared with SQLite (domain/sql/log-reads.ts), as {@link rows}. */
const sharedRows = <T>(db: PgReader, q: SharedQuery): Promise<T[]> => rows<T>(db, q.text, q.params);

/**
 * Opens a connection to `databaseUrl`, runs `read` in one read-only transaction (one snapshot: the
 * figures of a command agree with each other, and a read command cannot write), and closes it,
 * whatever happens. Connection and server errors become a StorageError of one line naming host,
 * port and database, never the user's password.
 */
export async function withPgReads<T>(
  databaseUrl: string,
  read: (db: Client) => Promise<T>,
  applicationName?: string,
): Promise<T> {
  return withPgConnection(
    databaseUrl,
    async (client) => {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const result = await read(client);
      await client.query('COMMIT');
      return result;
    },
    applicationName,
  );
}

/**
 * Opens a connection of its own to `databaseUrl` for a command that writes (its own transactions)
 * or listens, hands it to `use`, and closes it whatever happens; errors as {@link withPgReads}'.
 */
export async function withPgConnection<T>(
  databaseUrl: string,
  use: (client: Client) => Promise<T>,
  applicationName = 'consig-receiver log command',
): Promise<T> {
  const target = pgTarget(databaseUrl);
  const secret = decodeURIComponent(new URL(databaseUrl).password);
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
      throw pgError(err, target, secret, true);
    }
    try {
      return await use(client);
    } catch (err) {
      throw pgError(err, target, secret, false);
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
function pgError(err: unknown, t: PgTarget, secret: string, connecting: boolean): unknown {
  if (err instanceof ConsigError || !(err instanceof Error)) return err;
  const where = `${t.host}:${t.port}`;
  // A message of the server or the driver names no password; this is in case one ever does.
  const scrub = (text: string): string =>
    secret === '' ? text : text.split(secret).join('***').split(encodeURIComponent(secret)).join('***');
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

/** `events` (domain/sql/log-reads.ts `eventsQuery`); `nuProposta` as stored (text). */
export async function readEvents(
  db: PgReader,
  filter: Parameters<typeof eventsQuery>[0],
): Promise<EventRow[]> {
  const found = await sharedRows<EventRow & { nu_proposta: string | null }>(db, eventsQuery(filter));
  return found.map(withLogNuProposta);
}

/**
 * One event and its raw body as stored (bytea: the bytes received), or undefined when there is no
 * event `id`.
 */
export async function readEvent(
  db: PgReader,
  id: number,
): Promise<{ event: EventRow; body: Buffer | null } | undefined> {
  const [found] = await rows<EventRow & { nu_proposta: string | null; body: Buffer | null }>(
    db,
    `SELECT ${EVENT_COLUMNS}, body FROM events WHERE id = $1`,
    [id],
  );
  if (found === undefined) return undefined;
  const { body, ...event } = found;
  return { event: withLogNuProposta(event), body };
}

/**
 * `deliveries`: newest first by `received_at` (ids are the relay's order, which interleaves the
 * replicas' spools; received_at is when each request arrived). `beforeId` pages backwards in that
 * order: the rows after delivery `beforeId` (the last row of the previous page); none when there is
 * no such delivery.
 */
export async function readDeliveries(
  db: PgReader,
  filter: {
    outcome?: string | undefined;
    /** received_at from (inclusive) and to (exclusive), ISO instants: the console's time range. */
    from?: string | undefined;
    to?: string | undefined;
    beforeId?: number | undefined;
    limit: number;
  },
): Promise<DeliveryRow[]> {
  // Not shared with SQLite: its admin listing goes by id, and its ranged one steers the planner
  // with `+outcome`, which PostgreSQL refuses (store/deliveries.ts, core/console-reads.ts).
  const where = whereGiven([
    ['outcome = $', filter.outcome],
    ['received_at >= $', filter.from],
    ['received_at < $', filter.to],
    ['(received_at, id) < (SELECT received_at, id FROM deliveries WHERE id = $)', filter.beforeId],
  ]);
  return rows<DeliveryRow>(
    db,
    `SELECT id, received_at, path, outcome, http_status, dedup_key, event_id, duration_ms, body_bytes,
       secret_index, remote_addr, detail
     FROM deliveries ${where.text} ORDER BY received_at DESC, id DESC LIMIT $${where.params.length + 1}`,
    [...where.params, filter.limit],
  );
}

/** Deliveries answered by one replica. */
export interface ReplicaDeliveries {
  replica: string;
  deliveries: number;
  last_received_at: string | null;
}

/** The figures of `stats`, from PostgreSQL. */
export interface PgStats {
  databaseBytes: number;
  eventsByStatus: Record<string, number>;
  eventsByKind: Record<string, number>;
  duplicatesTotal: number;
  deliveriesByOutcome: Record<string, number>;
  proposalsByStatus: Record<string, number>;
  /** Per cutoff's status, in the cutoffs' order, 0 included. */
  proposalsStuckByStatus: Record<string, number>;
  /** Over the answers the service waited for a commit (accepted, duplicate, quarantined). */
  ackMs: { avg: number | null; max: number | null };
  lastDeliveryAt: string | null;
  replicas: ReplicaDeliveries[];
  /**
   * Per destination (the configured ones in their order, then the others an operator or the
   * circuit breaker touched, by name): backlog, dead letters, oldest waiting delivery, and whether
   * an operator paused it (0/1). Null when the database has no forwarding tables yet (migrated by
   * replicas older than migrations-pg/0003).
   */
  forwarding: DestinationGauges[] | null;
}

/** Rows of `table` per value of `column` (both names from the caller's code), in SQLite's (byte) order of the values. */
export async function countBy(db: PgReader, table: string, column: string): Promise<Record<string, number>> {
  const found = await rows<{ key: string; n: number }>(
    db,
    `SELECT ${column} AS key, count(*) AS n FROM ${table} GROUP BY ${column} ORDER BY ${column} COLLATE "C"`,
  );
  return Object.fromEntries(found.map((r) => [r.key, r.n]));
}

/** Stuck proposals per cutoff's status, in the cutoffs' order, 0 included. */
export async function stuckCounts(
  db: PgReader,
  cutoffs: readonly StuckCutoff[],
): Promise<Record<string, number>> {
  const found = await rows<{ status: string; n: number }>(
    db,
    `SELECT c.status, count(p.nu_proposta) AS n
     FROM unnest($1::text[], $2::timestamptz[]) AS c (status, before)
     LEFT JOIN proposals p ON p.status = c.status AND p.updated_at < c.before
     GROUP BY c.status`,
    [cutoffs.map((c) => c.status), cutoffs.map((c) => c.before)],
  );
  const n = new Map(found.map((r) => [r.status, r.n]));
  return Object.fromEntries(cutoffs.map((c) => [c.status, n.get(c.status) ?? 0]));
}

/**
 * Everything `stats` shows, read in the caller's one snapshot. One query at a time: a connection
 * runs them in turn anyway (and pg 8 deprecates queueing them).
 */
export async function readStats(
  db: PgReader,
  cutoffs: readonly StuckCutoff[],
  destinations: readonly string[] = [],
): Promise<PgStats> {
  const one = async <T>(sql: string): Promise<T> => (await rows<T>(db, sql))[0] as T;
  const size = await one<{ bytes: number }>('SELECT pg_database_size(current_database()) AS bytes');
  const eventsByStatus = await countBy(db, 'events', 'status');
  const eventsByKind = await countBy(db, 'events', 'kind');
  const dups = await one<{ n: number }>('SELECT coalesce(sum(duplicates), 0) AS n FROM events');
  const deliveriesByOutcome = await countBy(db, 'deliveries', 'outcome');
  const proposalsByStatus = await countBy(db, 'proposals', 'status');
  const proposalsStuckByStatus = await stuckCounts(db, cutoffs);
  const ackMs = await one<{ avg: number | null; max: number | null }>(
    `SELECT avg(duration_ms) AS avg, max(duration_ms) AS max FROM deliveries
     WHERE outcome IN ('accepted', 'duplicate', 'quarantined')`,
  );
  const last = await one<{ at: string | null }>('SELECT max(received_at) AS at FROM deliveries');
  const replicas = await rows<ReplicaDeliveries>(
    db,
    `SELECT replica, count(*) AS deliveries, max(received_at) AS last_received_at
     FROM deliveries GROUP BY replica ORDER BY replica COLLATE "C"`,
  );
  return {
    databaseBytes: size.bytes,
    eventsByStatus,
    eventsByKind,
    duplicatesTotal: dups.n,
    deliveriesByOutcome,
    proposalsByStatus,
    proposalsStuckByStatus,
    ackMs,
    lastDeliveryAt: last.at,
    replicas,
    forwarding: await forwardingGauges(db, destinations),
  };
}

/** `stats`' forwarding figures: the configured destinations, then the others in forward_destinations. */
async function forwardingGauges(
  db: PgReader,
  configured: readonly string[],
): Promise<DestinationGauges[] | null> {
  // A boolean, read as 0/1 (LOG_TYPES).
  const [schema] = await rows<{ present: number }>(
    db,
    "SELECT to_regclass('forward_destinations') IS NOT NULL AS present",
  );
  if (schema?.present !== 1) return null;
  const touched = await rows<{ name: string }>(
    db,
    'SELECT name FROM forward_destinations ORDER BY name COLLATE "C"',
  );
  const names = [...new Set([...configured, ...touched.map((r) => r.name)])];
  return rows<DestinationGauges>(db, FORWARD_GAUGES_SQL, [names]);
}

/** One proposal's row, undefined when it has none (domain/sql/log-reads.ts `PROPOSAL`). */
export async function readProposalRow(db: PgReader, nuProposta: string): Promise<ProposalRow | undefined> {
  const [row] = await rows<ProposalRow & { nu_proposta: string }>(db, PROPOSAL, [nuProposta]);
  return row && { ...row, nu_proposta: logNuProposta(row.nu_proposta) };
}

/** `proposal <nu>`: the row (undefined when none) and every event of it, processed or not. */
export async function readProposal(
  db: PgReader,
  nuProposta: string,
): Promise<{ proposal: ProposalRow | undefined; timeline: TimelineRow[] }> {
  const proposal = await readProposalRow(db, nuProposta);
  return { proposal, timeline: await rows<TimelineRow>(db, TIMELINE, [nuProposta]) };
}

/** What `proposals` lists of a proposal (`nu_cpf` as stored: the command masks it). */
export interface PgProposalListRow {
  nu_proposta: number | string;
  nu_cpf: string | null;
  stage: string;
  status: string;
  last_evento: string | null;
  updated_at: string;
}

const LIST_COLUMNS = 'nu_proposta, nu_cpf, stage, status, last_evento, updated_at';

function listRows(found: (PgProposalListRow & { nu_proposta: string })[]): PgProposalListRow[] {
  return found.map((r) => ({ ...r, nu_proposta: logNuProposta(r.nu_proposta) }));
}

// Both listings read one status at a time over proposals_status_updated (a LATERAL page per status,
// as SQLite's proposal-lists.ts runs one statement per status), then merge: a page costs the rows
// it shows, never a sort of every proposal at those statuses.

/**
 * `proposals`: those at `statuses`, the most recently changed first; `before` = the last row of
 * the previous page (the console's keyset).
 */
export async function readLatestProposals(
  db: PgReader,
  statuses: readonly string[],
  limit: number,
  before?: ProposalKey,
): Promise<PgProposalListRow[]> {
  const key = before === undefined ? undefined : afterKey(before, '<', 3);
  const order = `updated_at DESC, ${nuPropostaOrder('DESC')}`;
  return listRows(
    await rows(
      db,
      `SELECT p.* FROM unnest($1::text[]) AS s (status) CROSS JOIN LATERAL (
         SELECT ${LIST_COLUMNS} FROM proposals WHERE status = s.status ${key ? `AND ${key.sql}` : ''}
         ORDER BY ${order} LIMIT $2) p
       ORDER BY ${order} LIMIT $2`,
      [statuses, limit, ...(key?.params ?? [])],
    ),
  );
}

/**
 * `proposals --stuck`: those older than their status's cutoff, the longest unchanged first; `after`
 * = the last row of the previous page (the console's keyset).
 */
export async function readStuckProposals(
  db: PgReader,
  cutoffs: readonly StuckCutoff[],
  limit: number,
  after?: ProposalKey,
): Promise<PgProposalListRow[]> {
  const key = after === undefined ? undefined : afterKey(after, '>', 4);
  const order = `updated_at, ${nuPropostaOrder('ASC')}`;
  return listRows(
    await rows(
      db,
      `SELECT p.* FROM unnest($1::text[], $2::timestamptz[]) AS c (status, before) CROSS JOIN LATERAL (
         SELECT ${LIST_COLUMNS} FROM proposals
         WHERE status = c.status AND updated_at < c.before ${key ? `AND ${key.sql}` : ''}
         ORDER BY ${order} LIMIT $3) p
       ORDER BY ${order} LIMIT $3`,
      [cutoffs.map((c) => c.status), cutoffs.map((c) => c.before), limit, ...(key?.params ?? [])],
    ),
  );
}

export type PgAverbacaoRow = AverbacaoRow;

/** `averbacoes` (domain/sql/log-reads.ts `averbacoesQuery`): the most recently created first. */
export async function readAverbacoes(
  db: PgReader,
  filter: Parameters<typeof averbacoesQuery>[0],
): Promise<PgAverbacaoRow[]> {
  const found = await sharedRows<PgAverbacaoRow & { nu_proposta: string | null }>(
    db,
    averbacoesQuery(filter),
  );
  return found.map(withLogNuProposta);
}

/** One tracked registration, or undefined when `requestId` is not tracked. */
export async function readAverbacao(db: PgReader, requestId: string): Promise<PgAverbacaoRow | undefined> {
  const [found] = await rows<PgAverbacaoRow & { nu_proposta: string | null }>(db, AVERBACAO, [requestId]);
  return found && withLogNuProposta(found);
}
