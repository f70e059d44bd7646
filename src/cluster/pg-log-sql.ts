import { type ClientBase, type Pool, type PoolClient, types } from 'pg';
import { postgresDialect } from '../domain/sql/dialect';
import type { LogQuery, LogSql } from '../domain/sql/log-sql';
import { checkOut } from './sql';

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

/**
 * The PostgreSQL adapter of {@link LogSql} (domain/sql/log-sql.ts): reads in the admin log's
 * read-only snapshot, writes in its transaction (pg-admin-log.ts runners: the replica's pool, the
 * running() guard, the statement timeout, StorageError while PostgreSQL cannot answer), every row
 * in the SQLite log's representation ({@link LOG_TYPES}).
 */
export function pgLogSql(runners: {
  read<T>(fn: (client: PoolClient) => Promise<T>): Promise<T>;
  writing<T>(fn: (client: PoolClient) => Promise<T>): Promise<T>;
}): LogSql {
  return {
    dialect: postgresDialect,
    read: (fn) => runners.read((client) => fn(pgLogQuery(client))),
    write: (fn) => runners.writing((client) => fn(pgLogQuery(client))),
  };
}

/**
 * On `pool` (the caller's; it must have an 'error' listener), with no guard of its own: its errors
 * are PostgreSQL's, for a caller that retries (the forwarding sender). Lone statements
 * ({@link LogSql.lone}) on any connection of the pool; a read or a write on a client checked out
 * for it ({@link inPoolTransaction}).
 */
export function pgPoolLogSql(pool: Pool): LogSql {
  const on = <T>(begin: string, fn: (q: LogQuery) => Promise<T>) =>
    inPoolTransaction(pool, begin, (client) => fn(pgLogQuery(client)));
  return {
    dialect: postgresDialect,
    read: (fn) => on('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', fn),
    write: (fn) => on('BEGIN', fn),
    lone: pgLogQuery(pool),
  };
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
    await client.query(begin);
    const result = await fn(client);
    await client.query('COMMIT');
    ok = true;
    return result;
  } finally {
    if (!ok) await client.query('ROLLBACK').catch(() => undefined);
    // A client that failed mid-transaction may be broken (the server went away): not reused.
    client.release(!ok);
  }
}

/** Statements on one connection (a pool's client inside a transaction, or a command's own client). */
export function pgLogQuery(client: Pick<ClientBase, 'query'>): LogQuery {
  return {
    dialect: postgresDialect,
    rows: async <R>(text: string, params: readonly unknown[] = []) =>
      (await client.query({ text, values: [...params], types: LOG_TYPES })).rows as R[],
    run: async (text, params = []) => (await client.query({ text, values: [...params] })).rowCount ?? 0,
  };
}

/**
 * A command's own connection (pg-command-log.ts): reads as it stands (already in the command's
 * read-only snapshot, or following each commit), each write BEGIN … COMMIT on it.
 */
export function pgClientLogSql(client: Pick<ClientBase, 'query'>): LogSql {
  const q = pgLogQuery(client);
  return {
    dialect: postgresDialect,
    read: (fn) => fn(q),
    write: (fn) => transactionOn(client, () => fn(q)),
  };
}

/** `fn` in one transaction on `client`: BEGIN … COMMIT, or ROLLBACK when it rejects. */
export async function transactionOn<T>(client: Pick<ClientBase, 'query'>, fn: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await fn();
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
