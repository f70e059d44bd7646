import type { Dialect } from './dialect';

/**
 * How the code written once for both stores (src/core/) reaches the log, on either store — the
 * SQLite file or PostgreSQL (issue 24; the pattern pg-boss uses for its backends: one SQL path, an
 * adapter per database, a few capability flags): {@link StoreSql} opens a snapshot or a transaction,
 * {@link StoreQuery} runs the statements in it. sqlite/sqlite-statements.ts and
 * postgres/pg-statements.ts are the two adapters. Statements use PostgreSQL's `$1`, `$2`, … (SQLite
 * runs them as sqlite/sqlite-prepare.ts `prepareShared` does).
 *
 * Rows come back in the SQLite log's representation in both stores: ids and counts as numbers,
 * flags 0/1, instants as `Date#toISOString()` text (postgres/pg-statements.ts STORE_TYPES), so one mapper
 * serves both. Where the stores differ, the code asks {@link StoreQuery.dialect}, one value per store
 * of the primitives that differ (domain/sql/dialect.ts).
 */

/**
 * Statements on one connection of either store, inside the snapshot or transaction {@link StoreSql}
 * opened: one of the three statement runners (with PostgreSQL's postgres/pg-sql.ts `PgSql`, which
 * is one too, and a partner's domain/event-router.ts `HandlerSql`).
 */
export interface StoreQuery {
  readonly dialect: Dialect;
  /** The rows of a statement. */
  rows<R>(text: string, params?: readonly unknown[]): Promise<R[]>;
  /** A statement that writes; how many rows it changed. */
  run(text: string, params?: readonly unknown[]): Promise<number>;
}

/**
 * The snapshots and transactions of either store, each handed to a function as the
 * {@link StoreQuery} its statements run on. `Q`: what that is; an adapter may hand more (PostgreSQL's
 * is a PgSql, so that the store's own figures read in the same snapshot).
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
