import type { ClientBase, PoolClient } from 'pg';
import type { LogQuery, LogSql } from '../domain/sql/log-sql';
import { LOG_TYPES } from './pg-reads';

/**
 * The PostgreSQL adapter of {@link LogSql} (domain/sql/log-sql.ts): reads in the admin log's
 * read-only snapshot, writes in its transaction (pg-admin-log.ts runners: the replica's pool, the
 * running() guard, the statement timeout, StorageError while PostgreSQL cannot answer), every row
 * in the SQLite log's representation (pg-reads.ts LOG_TYPES).
 */
export function pgLogSql(runners: {
  read<T>(fn: (client: PoolClient) => Promise<T>): Promise<T>;
  writing<T>(fn: (client: PoolClient) => Promise<T>): Promise<T>;
}): LogSql {
  return {
    dialect: 'postgres',
    read: (fn) => runners.read((client) => fn(pgLogQuery(client))),
    write: (fn) => runners.writing((client) => fn(pgLogQuery(client))),
  };
}

/** Statements on one connection (a pool's client inside a transaction, or a command's own client). */
export function pgLogQuery(client: Pick<ClientBase, 'query'>): LogQuery {
  return {
    dialect: 'postgres',
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
    dialect: 'postgres',
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
