import { type ClientBase, type Pool, type PoolClient, types } from 'pg';
import { postgresDialect } from '../domain/sql/dialect';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import { checkOut } from './pg-sql';

const { INT8, NUMERIC, BOOL, TIMESTAMPTZ } = types.builtins;
const parseTimestamptz = types.getTypeParser(TIMESTAMPTZ, 'text') as (v: string) => Date;

/**
 * The SQLite log's representation, applied by the driver to every column of these reads: given with
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

/**
 * A statement handle on one PostgreSQL connection, with the connection: PostgreSQL's own figures
 * read on it, in the same snapshot as the core's statements.
 */
export type PgQuery = StoreQuery & { readonly client: PgClient };

/** What the statements run on: a pg client (a pool's, or a command's own) or a pool. */
export type PgClient = Pick<ClientBase, 'query'>;

/** How a {@link pgStoreSql} reaches a connection for a snapshot or a transaction. */
export interface PgRunners {
  read<T>(fn: (client: PgClient) => Promise<T>): Promise<T>;
  writing<T>(fn: (client: PgClient) => Promise<T>): Promise<T>;
}

/**
 * The PostgreSQL adapter of {@link StoreSql} (domain/sql/store-sql.ts), one for every way of reaching
 * PostgreSQL — a replica's guarded pool (pg-port.ts), a pool with no guard
 * ({@link poolRunners}: the forwarding sender, which retries), a command's own connection
 * ({@link clientRunners}) — every row in the SQLite store's representation ({@link STORE_TYPES}).
 * `lone`: where lone statements run with no transaction around them.
 */
export function pgStoreSql(runners: PgRunners, lone?: PgClient): StoreSql<PgQuery> {
  return {
    dialect: postgresDialect,
    read: (fn) => runners.read((client) => fn(pgStoreQuery(client))),
    write: (fn) => runners.writing((client) => fn(pgStoreQuery(client))),
    ...(lone === undefined ? {} : { lone: pgStoreQuery(lone) }),
  };
}

/** A read's transaction: one snapshot, in which nothing can be written. */
export const SNAPSHOT = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY';

/**
 * On `pool` (the caller's; it must have an 'error' listener), with no guard of its own: its errors
 * are PostgreSQL's. A read or a write on a client checked out for it ({@link inPoolTransaction}).
 */
export function poolRunners(pool: Pool): PgRunners {
  return {
    read: (fn) => inPoolTransaction(pool, SNAPSHOT, fn),
    writing: (fn) => inPoolTransaction(pool, 'BEGIN', fn),
  };
}

/**
 * A command's own connection: reads as it stands (already in the command's read-only snapshot, or
 * following each commit), each write BEGIN … COMMIT on it.
 */
export function clientRunners(client: PgClient): PgRunners {
  return { read: (fn) => fn(client), writing: (fn) => transactionOn(client, () => fn(client)) };
}

/**
 * `fn` in one transaction opened with `begin`, on a client of `pool` checked out for it (checkOut:
 * a dropped connection cannot crash the process); COMMIT, or ROLLBACK when it rejects.
 */
export async function inPoolTransaction<T>(
  pool: Pool,
  begin: string,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await checkOut(pool);
  let ok = false;
  try {
    const result = await transactionOn(client, () => fn(client), begin);
    ok = true;
    return result;
  } finally {
    // A client that failed mid-transaction may be broken (the server went away): not reused.
    client.release(!ok);
  }
}

/** Statements on one connection (a pool's client inside a transaction, or a command's own client). */
export function pgStoreQuery(client: PgClient): PgQuery {
  return {
    client,
    dialect: postgresDialect,
    rows: async <R>(text: string, params: readonly unknown[] = []) =>
      (await client.query({ text, values: [...params], types: STORE_TYPES })).rows as R[],
    run: async (text, params = []) => (await client.query({ text, values: [...params] })).rowCount ?? 0,
  };
}

/**
 * `fn` in one transaction on `client`: `begin` … COMMIT (ROLLBACK when `commit` says no), or
 * ROLLBACK when it rejects.
 */
export async function transactionOn<T>(
  client: Pick<ClientBase, 'query'>,
  fn: () => Promise<T>,
  begin = 'BEGIN',
  commit: (result: T) => boolean = () => true,
): Promise<T> {
  await client.query(begin);
  try {
    const result = await fn();
    await client.query(commit(result) ? 'COMMIT' : 'ROLLBACK');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
