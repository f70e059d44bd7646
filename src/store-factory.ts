import type { ClusterConfig, Config } from './config';

/**
 * The store factory: which store holds the log, chosen once from the configuration (contract
 * §10), and the one place one store is told from the other. Each audience builds what it runs on
 * the store through {@link onStore}, once: the server its mode (main.ts: runtime/single/ or
 * runtime/cluster/), the commands their store (open-store.ts `commandStores`), the sender's thread
 * what it sends from (runtime/sender-worker.ts). Nothing else compares stores: the code written once
 * for both (core/) asks the store port and its dialect for what differs (core/store-port.ts,
 * domain/sql/dialect.ts).
 */

/** The SQLite file at DATABASE_PATH holds the log. */
export interface SqliteTarget {
  readonly kind: 'sqlite';
  readonly databasePath: string;
}

/**
 * PostgreSQL at DATABASE_URL holds the log (cluster mode); the SQLite file at DATABASE_PATH is then
 * the replica's spool.
 */
export interface PostgresTarget {
  readonly kind: 'postgres';
  /** The spool's path. */
  readonly databasePath: string;
  readonly cluster: ClusterConfig;
}

/** Which store holds the log: plain data, so that the sender's thread receives it as it is. */
export type StoreTarget = SqliteTarget | PostgresTarget;

/** The store `config` names: PostgreSQL when DATABASE_URL is set, else the SQLite file. */
export function storeTarget(config: Pick<Config, 'databasePath' | 'cluster'>): StoreTarget {
  const { databasePath, cluster } = config;
  return cluster === null ? { kind: 'sqlite', databasePath } : { kind: 'postgres', databasePath, cluster };
}

/** What an audience builds on each store. */
export interface OnStore<R> {
  sqlite(target: SqliteTarget): R;
  postgres(target: PostgresTarget): R;
}

/** What `build` makes on `target`'s store: the one comparison of stores. */
export function onStore<R>(target: StoreTarget, build: OnStore<R>): R {
  return target.kind === 'sqlite' ? build.sqlite(target) : build.postgres(target);
}
