import type { LogQuery, LogSql } from '../domain/sql/log-sql';
import type { Db } from './database';
import { prepareShared, type SharedStatement } from './handler-sql';

/** Distinct statement texts kept prepared (filters build a few variants each); bounds a runaway. */
const CACHE_LIMIT = 512;

/**
 * The SQLite adapter of {@link LogSql} (domain/sql/log-sql.ts) on `db`: statements prepared once
 * each ({@link prepareShared}), run synchronously, answered as resolved promises. A read needs no
 * snapshot of its own: nothing else runs on the connection while `fn`'s statements, which resolve
 * at once, run. A write is one `BEGIN IMMEDIATE` … `COMMIT` on the connection.
 */
export function sqliteLogSql(db: Db): LogSql {
  const prepared = new Map<string, SharedStatement<unknown>>();
  const statement = (text: string): SharedStatement<unknown> => {
    let s = prepared.get(text);
    if (s === undefined) {
      if (prepared.size >= CACHE_LIMIT) prepared.clear();
      s = prepareShared(db, text);
      prepared.set(text, s);
    }
    return s;
  };
  const settle = <T>(fn: () => T): Promise<T> => {
    try {
      return Promise.resolve(fn());
    } catch (err) {
      return Promise.reject(err as Error);
    }
  };
  const q: LogQuery = {
    dialect: 'sqlite',
    rows: <R>(text: string, params: readonly unknown[] = []) =>
      settle(() => statement(text).all(params) as R[]),
    run: (text, params = []) => settle(() => statement(text).run(params)),
  };
  return {
    dialect: 'sqlite',
    read: (fn) => fn(q),
    write: async (fn) => {
      // Already inside a transaction (a caller's, on this connection): its statements join it.
      if (db.inTransaction) return fn(q);
      db.exec('BEGIN IMMEDIATE');
      // Fires only if the event loop moves on while the transaction is open: then something other
      // than `q` was awaited, and other code may have run inside this transaction.
      let moved = false;
      const watch = setImmediate(() => (moved = true));
      try {
        const result = await fn(q);
        if (moved) throw new Error('a SQLite log write awaited something other than its statements');
        db.exec('COMMIT');
        return result;
      } finally {
        clearImmediate(watch);
        if (db.inTransaction) db.exec('ROLLBACK');
      }
    },
  };
}
