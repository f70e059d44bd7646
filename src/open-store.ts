import { existsSync, rmSync, statSync } from 'node:fs';
import type { Config } from './config';
import { consoleAudit } from './core/console-session-queries';
import { type CommandStore, commandStore, type StorePort } from './core/store-port';
import type { NewAuditEntry } from './domain/console';
import { UsageError, StorageError } from './domain/errors';
import type { StoreQuery } from './domain/sql/store-sql';
import { migratePostgresStores, migrateSqliteStore, type StoreMigration } from './migrate-stores';
import { type LocalSpool, type PgCommandAccess, withPgCommandStore } from './postgres/pg-port';
import { privateDatabaseFile, stderrModeNotice } from './sqlite/file-mode';
import { sqliteStorePort } from './sqlite/sqlite-port';
import { openSpool } from './sqlite/spool';
import { openStore, type Store } from './sqlite/store';
import { onStore, type PostgresTarget, type SqliteTarget, storeTarget } from './store-factory';
import { type SpoolsVerified, verifySpools } from './verify-spools';

/**
 * The commands' store (issue 33): PostgreSQL when DATABASE_URL is set (cluster mode, contract
 * §10), else the SQLite file, chosen once by the store factory ({@link commandStores}); the port
 * (core/store-port.ts) is opened here and nowhere else in cli/, and the commands get the facade
 * built from it ({@link CommandStore}). The server builds the same port on its own connections
 * (each mode's composition in src/runtime/).
 */

/**
 * How a command uses the store. `read`: reads in one snapshot (a read-only SQLite file). `follow`:
 * reads that see each new commit (`feed --follow`). `write`: a writable store. `command` names the
 * command's PostgreSQL connection (application_name `consig-receiver <command>`).
 */
export interface CommandSession {
  access: PgCommandAccess;
  command?: string;
  /**
   * With `write`: a SQLite file that does not exist yet is created and migrated (`start-averbacao`
   * tracks what it started in a database a receiver opens later). PostgreSQL's schema is the
   * replicas' to migrate.
   */
  create?: boolean;
  /**
   * Cluster mode: the spool at DATABASE_PATH too, when there is one (`prune`). Checked before
   * PostgreSQL is touched: a spool that cannot be opened stops the command first.
   */
  spool?: boolean;
}

/** What the commands do with the store of their configuration, each store its own way. */
export interface CommandStores {
  /** Opens the store port for `session`, runs `use` on it and closes it, whatever happens. */
  withPort<T>(
    session: CommandSession,
    use: <Q extends StoreQuery>(port: StorePort<Q>) => Promise<T>,
  ): Promise<T>;
  /** Whether there is a log to record in (a SQLite file that does not exist is not created for it). */
  hasLog(): boolean;
  /** `migrate` (migrate-stores.ts); `say`: the lines of a runner that waits. */
  migrate(dryRun: boolean, say: (line: string) => void): Promise<StoreMigration[]>;
  /** `relay verify` (verify-spools.ts): cluster mode only. */
  verifySpools(paths: readonly string[]): Promise<SpoolsVerified>;
}

/** The commands' store, chosen once (store-factory.ts). */
export function commandStores(config: Config): CommandStores {
  return onStore(storeTarget(config), {
    sqlite: (target) => sqliteCommands(config, target),
    postgres: (target) => postgresCommands(config, target),
  });
}

function sqliteCommands(config: Config, target: SqliteTarget): CommandStores {
  return {
    withPort: async (session, use) => {
      const store =
        session.access === 'write' ? openWritable(config, session.create ?? false) : openReadOnly(config);
      try {
        return await use(sqliteStorePort(store));
      } finally {
        store.close();
      }
    },
    hasLog: () => existsSync(target.databasePath),
    migrate: async (dryRun) => migrateSqliteStore(config, dryRun),
    verifySpools: () =>
      Promise.reject(
        new UsageError('relay verify compares spools with PostgreSQL: set DATABASE_URL (cluster mode)'),
      ),
  };
}

function postgresCommands(config: Config, target: PostgresTarget): CommandStores {
  return {
    withPort: (session, use) => {
      const checked = session.spool ? spoolBeside(config) : null;
      return withPgCommandStore(
        target.cluster.databaseUrl,
        session,
        () => checked ?? spoolBeside(config),
        use,
      );
    },
    hasLog: () => true,
    migrate: (dryRun, say) => migratePostgresStores(config, target, dryRun, say),
    verifySpools: (paths) => verifySpools(config, target, paths),
  };
}

/** Opens the store of `config`, runs `use` on its facade and closes it, whatever happens. */
export function withCommandStore<T>(
  config: Config,
  session: CommandSession,
  use: (store: CommandStore) => Promise<T>,
): Promise<T> {
  return commandStores(config).withPort(session, (port) => use(commandStore(port)));
}

/**
 * Records a command's row in `console_audit` (contract §9), through the console's own writer
 * (core/console-session-queries.ts), on the log of `config`: PostgreSQL with DATABASE_URL, else the
 * SQLite file at DATABASE_PATH. Returns the log's name, or null when there is no log to record in
 * (no DATABASE_URL, no file at DATABASE_PATH: none is created for it). A log that exists but takes
 * no write throws, so the command stops before it does what it would have recorded.
 */
export async function recordCommandAudit(
  config: Config,
  command: string,
  entry: NewAuditEntry,
): Promise<string | null> {
  const stores = commandStores(config);
  if (!stores.hasLog()) return null;
  return stores.withPort({ access: 'write', command }, async (port) => {
    await consoleAudit(port.sql).record(entry);
    return port.name;
  });
}

/** The SQLite file, read-only; a missing one is said clearly. */
export function openReadOnly(config: Config): Store {
  try {
    statSync(config.databasePath);
  } catch {
    throw new StorageError(
      `no database at ${config.databasePath} (set DATABASE_PATH, or create it with \`consig-receiver migrate\`)`,
    );
  }
  return openStore(config.databasePath, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
}

/**
 * A writable store; a missing database is said clearly (as the read commands do), or created when
 * `create`. A receiver may be writing to the same file: a command waits for its lock rather than fail.
 */
function openWritable(config: Config, create: boolean): Store {
  if (!create) openReadOnly(config).close();
  return openStore(config.databasePath, {
    migrate: create,
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
}

/**
 * `backup <file>`: SQLite's online backup of the file into `target`, which is created 0600 first
 * (sqlite/file-mode.ts: a backup holds what the log holds), or tightened to it when `--force`
 * overwrites a file readable by others. A target this created is removed if the copy fails.
 */
export async function backupDatabase(config: Config, target: string): Promise<{ totalPages: number }> {
  const store = openReadOnly(config);
  const created = !existsSync(target);
  try {
    privateDatabaseFile(target, { create: true, notice: stderrModeNotice });
    const result = await store.db.backup(target);
    recordBackup(config, target);
    return result;
  } catch (err) {
    if (created) rmSync(target, { force: true });
    throw err;
  } finally {
    store.close();
  }
}

/**
 * Writes the backup's path in the log's `backups` (migration 0016), so that `subject erase` reaches
 * it too (issue 45). A log not migrated that far has no table: the backup stands, unrecorded.
 */
function recordBackup(config: Config, target: string): void {
  try {
    recordBackupIn(config, target);
  } catch (err) {
    process.stderr.write(
      `consig-receiver: backup written, but not recorded in the log's backups (an erasure will not reach it): ${(err as Error).message}\n`,
    );
  }
}

function recordBackupIn(config: Config, target: string): void {
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    store.db
      .prepare(
        `INSERT INTO backups (path, created_at) VALUES (?, ?)
         ON CONFLICT (path) DO UPDATE SET created_at = excluded.created_at`,
      )
      .run(target, new Date().toISOString());
  } finally {
    store.close();
  }
}

/** The spool at DATABASE_PATH as `prune` finds it: checked readable now; `prune` null when there is none. */
function spoolBeside(config: Config): LocalSpool {
  const path = config.databasePath;
  if (!existsSync(path)) return { path, prune: null };
  openReadOnly(config).close();
  return {
    path,
    prune: (cutoff) => {
      const store = openStore(path, { busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000) });
      try {
        return openSpool(store.db).prune(cutoff);
      } finally {
        store.close();
      }
    },
  };
}
