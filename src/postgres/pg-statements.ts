import type { ClientBase, Pool, PoolClient } from 'pg';
import { postgresDialect } from '../domain/sql/dialect';
import type { StoreSql } from '../domain/sql/store-sql';
import { checkOut, type PgSql, sqlOf } from './pg-sql';

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
 * ({@link clientRunners}) — its statements on pg-sql.ts's {@link PgSql}, every row in the SQLite
 * store's representation (pg-sql.ts STORE_TYPES). `lone`: where lone statements run with no
 * transaction around them.
 */
export function pgStoreSql(runners: PgRunners, lone?: PgClient): StoreSql<PgSql> {
  return {
    dialect: postgresDialect,
    read: (fn) => runners.read((client) => fn(sqlOf(client))),
    write: (fn) => runners.writing((client) => fn(sqlOf(client))),
    ...(lone === undefined ? {} : { lone: sqlOf(lone) }),
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
