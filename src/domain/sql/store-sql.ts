import type { Dialect } from './dialect';

/**
 * The one shape through which code written once for both stores reaches the log (issue 24; the
 * pattern pg-boss uses for its backends: one SQL path, a one-method adapter per database, a few
 * capability flags). src/core/ holds that code; sqlite/sqlite-statements.ts (SQLite) and
 * postgres/pg-statements.ts (PostgreSQL) are the two adapters. Statements use PostgreSQL's `$1`, `$2`, …
 * (SQLite runs them as sqlite/sqlite-prepare.ts `prepareShared` does).
 *
 * Rows come back in the SQLite log's representation in both stores: ids and counts as numbers,
 * flags 0/1, instants as `Date#toISOString()` text (postgres/pg-statements.ts STORE_TYPES), so one mapper
 * serves both. Where the stores differ, the code asks {@link StoreQuery.dialect}, one value per store
 * of the primitives that differ (domain/sql/dialect.ts).
 */

/** Statements on one connection, inside the snapshot or transaction {@link StoreSql} opened. */
export interface StoreQuery {
  readonly dialect: Dialect;
  /** The rows of a statement. */
  rows<R>(text: string, params?: readonly unknown[]): Promise<R[]>;
  /** A statement that writes; how many rows it changed. */
  run(text: string, params?: readonly unknown[]): Promise<number>;
}

/**
 * `Q`: what the statements run on; an adapter may hand more than {@link StoreQuery} (PostgreSQL's
 * carries its connection, so that the store's own figures read in the same snapshot).
 */
export interface StoreSql<Q extends StoreQuery = StoreQuery> {
  readonly dialect: Dialect;
  /**
   * `fn`'s reads in one consistent snapshot (PostgreSQL: REPEATABLE READ READ ONLY, with a statement
   * timeout). Rejects with a StorageError while the store cannot answer.
   */
  read<T>(fn: (q: Q) => Promise<T>): Promise<T>;
  /**
   * `fn`'s statements in one transaction, committed when it resolves, rolled back when it rejects.
   * `fn` must await nothing but `q`: on SQLite the transaction holds the file's one connection, and
   * the adapter refuses (rolls back and rejects) a write during which the event loop moved on.
   */
  write<T>(fn: (q: Q) => Promise<T>): Promise<T>;
  /**
   * Lone statements, each run on its own with no transaction opened around it (one statement is
   * its own snapshot), where the adapter has such a path: the forwarding sender's reads, which run
   * for every message sent, take no BEGIN … COMMIT. Without it, {@link loneRows} runs the statement
   * inside {@link read}.
   */
  readonly lone?: StoreQuery;
}

/** The rows of one statement read on its own ({@link StoreSql.lone}, else in a snapshot of its own). */
export function loneRows<R>(log: StoreSql, text: string, params: readonly unknown[] = []): Promise<R[]> {
  return log.lone !== undefined ? log.lone.rows<R>(text, params) : log.read((q) => q.rows<R>(text, params));
}
