import type { Pool, PoolClient, QueryConfig } from 'pg';
import type { EffectStatement } from '../core/effects';
import type { HandlerLogger, HandlerSql } from '../domain/event-router';
/**
 * The one shape cluster mode's SQL runs through: a pg Pool, a PoolClient inside a transaction, or
 * the transaction pg-boss hands a transactional worker. Parameterised queries only.
 */
export interface Sql {
  query<R>(text: string, values?: readonly unknown[]): Promise<R[]>;
  /**
   * Runs `statement` as a named prepared statement: the connection parses it once, and after a few
   * runs plans it once too. For the statements that run once per event (kick.ts, core/effects.ts):
   * parsing, analysis and planning were a third of PostgreSQL's CPU per event (measured with perf
   * on the processing benchmark). Only for statements whose generic plan stays right as tables
   * grow: see the note on kick.ts's statements.
   */
  prepared<R>(statement: Statement, values: readonly unknown[]): Promise<R[]>;
}

/**
 * A statement with a name of its own, prepared once per connection (core/effects.ts's shape). One
 * name, one text: node-postgres refuses a name it has seen with another text, so each is a module
 * constant.
 */
export type Statement = EffectStatement;

/** `{ name, text, values }`: what node-postgres takes for a named prepared statement. */
function config(statement: Statement, values: readonly unknown[]): QueryConfig {
  const { name, text, rowMode } = statement;
  return { name, text, values: [...values], ...(rowMode === undefined ? {} : { rowMode }) };
}

/** What sqlOf needs of a node-postgres Pool or Client. */
interface Queryable {
  query(text: string | QueryConfig, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A node-postgres Pool or Client as a {@link Sql}. */
export function sqlOf(client: Queryable): Sql {
  return {
    query: async <R>(text: string, values?: readonly unknown[]) =>
      (await client.query(text, values === undefined ? undefined : [...values])).rows as R[],
    prepared: async <R>(statement: Statement, values: readonly unknown[]) =>
      (await client.query(config(statement, values))).rows as R[],
  };
}

/** What the cluster runtime and postgres/ log through, pino's `logger.level(fields, message)` shape (as a partner's handlers). */
export type ClusterLogger = HandlerLogger;

/** pg-boss's database shape (`executeSql`), for its `db` option: its writes join our transaction. */
export interface BossDb {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export function bossDbOf(sql: Sql): BossDb {
  return { executeSql: async (text, values) => ({ rows: await sql.query(text, values) }) };
}

/**
 * pg-boss's transaction as a {@link Sql}. It hands its first argument to node-postgres's
 * client.query as it is (pg-boss 12 dist/db.js beginTransaction), and client.query takes a query
 * config there: a named statement goes through unchanged. Tested
 * (test/integration/cluster-kick-batch.test.ts), so that a pg-boss that stopped passing it through
 * would fail there, not in production.
 */
export function sqlOfBossDb(db: BossDb): Sql {
  return sqlOf({ query: (text, values) => db.executeSql(text as string, values) });
}

/** `sql` as a partner's handler sees it (domain/event-router.ts): the same statements, rows in `{ rows }`. */
export function handlerSqlOf(sql: Sql): HandlerSql {
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
