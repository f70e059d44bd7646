import { sqliteDialect } from '../domain/sql/dialect';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import type { Db } from './database';
import { preparedCache, prepareShared } from './sqlite-prepare';

/**
 * The SQLite adapter of {@link StoreSql} (domain/sql/store-sql.ts) on `db`: statements prepared once
 * each ({@link prepareShared}), run synchronously, answered as resolved promises. A read is one
 * deferred transaction (one snapshot), a write one `BEGIN IMMEDIATE` … `COMMIT`; a lone statement
 * ({@link StoreSql.lone}) runs as it is, with no BEGIN or COMMIT of its own.
 */
export function sqliteStoreSql(db: Db): StoreSql {
  // Filters build a few variants of a text each; the bound only stops a runaway.
  const statement = preparedCache(512, (text) => prepareShared(db, text));
  const settle = <T>(fn: () => T): Promise<T> => {
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(err as Error);
    }
  };
  const q: StoreQuery = {
    dialect: sqliteDialect,
    rows: <R>(text: string, params: readonly unknown[] = []) =>
      settle(() => statement(text).all(params) as R[]),
    run: (text, params = []) => settle(() => statement(text).run(params)),
  };
  /**
   * `fn` inside `begin` … COMMIT on the connection (or inside the caller's transaction, which its
   * statements join). Refused, rolled back, if the event loop moved on meanwhile: something other
   * than `q` was awaited, and other code may have run inside this transaction.
   */
  const within = async <T>(begin: string, fn: (q: StoreQuery) => Promise<T>): Promise<T> => {
    if (db.inTransaction) return fn(q);
    db.exec(begin);
    let moved = false;
    const watch = setImmediate(() => (moved = true));
    try {
      const result = await fn(q);
      if (moved) throw new Error('a SQLite log transaction awaited something other than its statements');
      db.exec('COMMIT');
      return result;
    } finally {
      clearImmediate(watch);
      if (db.inTransaction) db.exec('ROLLBACK');
    }
  };
  return {
    dialect: sqliteDialect,
    // A deferred transaction: its first read fixes the snapshot (WAL), so another connection's
    // commit (the sender thread's, another process's) cannot land between two of `fn`'s reads.
    read: (fn) => within('BEGIN', fn),
    write: (fn) => within('BEGIN IMMEDIATE', fn),
    // A statement alone on the connection: its own implicit transaction, or the caller's.
    lone: q,
  };
}
