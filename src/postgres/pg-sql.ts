import { type Pool, type PoolClient, type QueryConfig, types } from 'pg';
import type { NamedStatement } from '../core/effects';
import type { HandlerLogger, HandlerSql } from '../domain/event-router';
import { postgresDialect } from '../domain/sql/dialect';
import type { StoreQuery } from '../domain/sql/store-sql';

/**
 * Statements on PostgreSQL: a pg Pool, a PoolClient inside a transaction, the transaction pg-boss
 * hands a transactional worker, or a command's own connection. One of the three statement runners
 * (with {@link StoreQuery}, which it is too, and a partner's HandlerSql): the store's statements
 * (`rows`, `run`: rows in the SQLite log's representation, {@link STORE_TYPES}), and the driver's own
 * for the cluster runtime and this adapter (`query`, `prepared`: rows as node-postgres returns
 * them). Parameterised queries only.
 */
export interface PgSql extends StoreQuery {
  query<R>(text: string, values?: readonly unknown[]): Promise<R[]>;
  /**
   * Runs `statement` as a named prepared statement: the connection parses it once, and after a few
   * runs plans it once too. For the statements that run once per event (turn.ts, core/effects.ts):
   * parsing, analysis and planning were a third of PostgreSQL's CPU per event (measured with perf
   * on the processing benchmark). Only for statements whose generic plan stays right as tables
   * grow: see the note on turn.ts's statements. One name, one text (core/effects.ts
   * NamedStatement): node-postgres refuses a name it has seen with another text.
   */
  prepared<R>(statement: NamedStatement, values: readonly unknown[]): Promise<R[]>;
}

const { INT8, NUMERIC, BOOL, TIMESTAMPTZ } = types.builtins;
const parseTimestamptz = types.getTypeParser(TIMESTAMPTZ, 'text') as (v: string) => Date;

/**
 * The SQLite log's representation, applied by the driver to every column of `rows`: given with
 * each query, so they read the same on any connection or pool, and the global parsers stay as they
 * are. bigint → number: ids and counts stay far below 2^53. numeric → number: SQLite keeps
 * vl_emprestimo as a REAL. timestamptz → its instant as `Date#toISOString()` writes it.
 */
export const STORE_TYPES = {
  getTypeParser: ((id: number, format?: 'text' | 'binary') => {
    if (format === undefined || format === 'text') {
      if (id === INT8 || id === NUMERIC) return (v: string) => Number(v);
      if (id === BOOL) return (v: string) => (v === 't' ? 1 : 0);
      if (id === TIMESTAMPTZ) return (v: string) => parseTimestamptz(v).toISOString();
    }
    return types.getTypeParser(id, format);
  }) as typeof types.getTypeParser,
};

/** `{ name, text, values }`: what node-postgres takes for a named prepared statement. */
function config(statement: NamedStatement, values: readonly unknown[]): QueryConfig {
  const { name, text, rowMode } = statement;
  return { name, text, values: [...values], ...(rowMode === undefined ? {} : { rowMode }) };
}

/** What sqlOf needs of a node-postgres Pool or Client. */
interface Queryable {
  query(
    text: string | QueryConfig,
    values?: unknown[],
  ): Promise<{ rows: unknown[]; rowCount?: number | null }>;
}

/** A node-postgres Pool or Client (or pg-boss's transaction, {@link sqlOfBossDb}) as a {@link PgSql}. */
export function sqlOf(client: Queryable): PgSql {
  return {
    dialect: postgresDialect,
    rows: async <R>(text: string, params: readonly unknown[] = []) =>
      (await client.query({ text, values: [...params], types: STORE_TYPES })).rows as R[],
    run: async (text, params = []) => (await client.query({ text, values: [...params] })).rowCount ?? 0,
    query: async <R>(text: string, values?: readonly unknown[]) =>
      (await client.query(text, values === undefined ? undefined : [...values])).rows as R[],
    prepared: async <R>(statement: NamedStatement, values: readonly unknown[]) =>
      (await client.query(config(statement, values))).rows as R[],
  };
}

/** What the cluster runtime and postgres/ log through, pino's `logger.level(fields, message)` shape (as a partner's handlers). */
export type ClusterLogger = HandlerLogger;

/** pg-boss's database shape (`executeSql`), for its `db` option: its writes join our transaction. */
export interface BossDb {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export function bossDbOf(sql: PgSql): BossDb {
  return { executeSql: async (text, values) => ({ rows: await sql.query(text, values) }) };
}

/**
 * pg-boss's transaction as a {@link PgSql}. It hands its first argument to node-postgres's
 * client.query as it is (pg-boss 12 dist/db.js beginTransaction), and client.query takes a query
 * config there: a named statement goes through unchanged. Tested
 * (test/integration/cluster-turn-batch.test.ts), so that a pg-boss that stopped passing it through
 * would fail there, not in production.
 */
export function sqlOfBossDb(db: BossDb): PgSql {
  return sqlOf({ query: (text, values) => db.executeSql(text as string, values) });
}

/** `sql` as a partner's handler sees it (domain/event-router.ts): the same statements, rows in `{ rows }`. */
export function handlerSqlOf(sql: PgSql): HandlerSql {
  return {
    query: async <R>(text: string, params?: readonly unknown[]) => ({
      rows: await sql.query<R>(text, params),
    }),
  };
}

/** ISO-8601 text as the SQLite log holds it (and node-postgres returns Date for timestamptz). */
export function iso(value: Date | string | null): string | null {
  if (value === null) return null;
  return value instanceof Date ? value.toISOString() : new Date(value).toISOString();
}

const guarded = new WeakSet<object>();

/**
 * A client from `pool` that cannot take the process down. node-postgres removes the pool's 'error'
 * listener from a client while it is checked out; a connection dropped then (PostgreSQL restarted,
 * a failover) emits 'error' with no listener, an uncaught exception. The query in flight still
 * fails and its caller handles that; this listener only keeps the 'error' event from being fatal.
 */
export async function checkOut(pool: Pool): Promise<PoolClient> {
  const client = await pool.connect();
  if (!guarded.has(client)) {
    guarded.add(client);
    client.on('error', () => undefined);
  }
  return client;
}
