import { existsSync, rmSync, statSync } from 'node:fs';
import { withPgCommandStore, type LocalSpool, type PgCommandAccess } from './postgres/pg-port';
import { describePgTarget, knownSpools, pgError, pgTarget, verifySpool } from './postgres/pg-reads';
import { inspectPostgres, migratePostgres, type PgMigration } from './postgres/pg-migrate';
import { pgPool } from './postgres/connection';
import { migrationFileName } from './domain/migration-files';
import type { Config } from './config';
import { consoleAudit } from './core/console-session-queries';
import { type CommandStore, commandStore, type StorePort } from './core/store-port';
import type { NewAuditEntry } from './domain/console';
import type { StoreQuery } from './domain/sql/store-sql';
import { StorageError, UsageError } from './domain/errors';
import type { SpoolVerdict } from './domain/relay-gap';
import { EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase } from './sqlite/database';
import { privateDatabaseFile, stderrModeNotice } from './sqlite/file-mode';
import { deliveryAlarmRepo } from './sqlite/sqlite-delivery-alarm';
import {
  appliedVersions,
  assertKnown,
  loadMigrations,
  type Migration,
  migrate,
} from './sqlite/sqlite-migrate';
import { openSpool } from './sqlite/spool';
import { openStore, type Store } from './sqlite/store';
import { sqliteStorePort } from './sqlite/sqlite-port';

/**
 * The one place the commands open a store (issue 33): PostgreSQL when DATABASE_URL is set (cluster
 * mode, contract §10), else the SQLite file; the port (core/store-port.ts) is opened here and
 * nowhere else in cli/, and the commands get the facade built from it ({@link CommandStore}). The
 * server's composition root (receiver-mode.ts) builds the same port on its own connections.
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

/** Opens the store of `config`, runs `use` on its facade and closes it, whatever happens. */
export function withCommandStore<T>(
  config: Config,
  session: CommandSession,
  use: (store: CommandStore) => Promise<T>,
): Promise<T> {
  return withStorePort(config, session, (port) => use(commandStore(port)));
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
  if (!config.cluster && !existsSync(config.databasePath)) return null;
  return withStorePort(config, { access: 'write', command }, async (port) => {
    await consoleAudit(port.sql).record(entry);
    return port.name;
  });
}

/** Opens the store port of `config` (the mode chosen here), runs `use` on it and closes it. */
async function withStorePort<T>(
  config: Config,
  session: CommandSession,
  use: <Q extends StoreQuery>(port: StorePort<Q>) => Promise<T>,
): Promise<T> {
  const cluster = config.cluster; // the one place the commands look at the mode
  if (cluster) {
    const checked = session.spool ? spoolBeside(config) : null;
    return withPgCommandStore(cluster.databaseUrl, session, () => checked ?? spoolBeside(config), use);
  }
  const store =
    session.access === 'write' ? openWritable(config, session.create ?? false) : openReadOnly(config);
  try {
    return await use(sqliteStorePort(store));
  } finally {
    store.close();
  }
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

/** `migrate`: applies the SQLite file's pending migrations; returns those it applied. */
export function migrateFile(config: Config): ReturnType<typeof migrate> {
  const db = openDatabase(config.databasePath, {
    synchronous: config.sqlite.synchronous,
    // A start waits for the write lock longer than a request would: another process starting at the
    // same moment (a rolling restart, `migrate` beside `serve`) may hold it for a whole migration, and
    // 1 s (SQLITE_BUSY_TIMEOUT_MS's default) failed first starts with "database is locked" on a loaded
    // host (test/e2e/concurrent-migrations.test.ts). Nothing answers on this connection meanwhile.
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, MIGRATION_BUSY_TIMEOUT_MS),
  });
  try {
    return migrate(db, loadMigrations());
  } finally {
    db.close();
  }
}

/** How long a migration waits for SQLite's write lock at least. */
export const MIGRATION_BUSY_TIMEOUT_MS = 30_000;

/**
 * The delivery alarm's stored run (http/delivery-watch.ts), on a connection of its own to
 * DATABASE_PATH with a short busy timeout: a write of the alarm's row must not hold the event loop
 * for SQLITE_BUSY_TIMEOUT_MS when another connection has the lock.
 */
export function openDeliveryAlarm(config: Pick<Config, 'databasePath'>) {
  const db = openDatabase(config.databasePath, {
    // The run is an alarm, not a delivery: losing its last change to a power cut is acceptable.
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  return { repo: deliveryAlarmRepo(db), close: () => db.close() };
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

/** What `relay verify` compares: each spool file's verdict, and every spool PostgreSQL knows. */
export interface SpoolsVerified {
  database: string;
  verdicts: (SpoolVerdict & { path: string })[];
  known: { spool: string; replica: string; relayed_through: number }[];
}

/**
 * `relay verify` (cluster mode): the spool files at `paths` (default DATABASE_PATH, the spool of a
 * replica run beside this command) read in one snapshot each, then compared with PostgreSQL.
 */
export async function verifySpools(config: Config, paths: readonly string[]): Promise<SpoolsVerified> {
  const cluster = config.cluster;
  if (!cluster)
    throw new UsageError('relay verify compares spools with PostgreSQL: set DATABASE_URL (cluster mode)');
  const files = paths.length > 0 ? paths : [config.databasePath];
  const facts = files.map((path) => {
    if (!existsSync(path)) throw new StorageError(`no spool at ${path}`);
    const store = openStore(path, { readonly: true, busyTimeoutMs: config.sqlite.busyTimeoutMs });
    try {
      return { path, facts: openSpool(store.db).facts() };
    } finally {
      store.close();
    }
  });
  const none = () => ({ path: config.databasePath, prune: null });
  return withPgCommandStore(cluster.databaseUrl, { access: 'read', command: 'relay-verify' }, none, (port) =>
    port.sql.read(async (q) => {
      const verdicts: SpoolsVerified['verdicts'] = [];
      for (const f of facts) verdicts.push({ path: f.path, ...(await verifySpool(q, f.facts)) });
      return { database: port.name, verdicts, known: await knownSpools(q) };
    }),
  );
}

/** What one store got (or would get). */
export interface StoreMigration {
  store: 'postgres' | 'sqlite';
  /** postgres://host:port/database, or the SQLite file's path. */
  target: string;
  /** The migrations applied (or, dry run, to apply), in order; PostgreSQL's with their compat. */
  applied: { file: string; compat?: string }[];
  /** Set when nothing was done to this store, and why (no file there). */
  skipped?: string;
  /** Said once when PostgreSQL's schema is newer than this code and every newer migration is `previous`. */
  note?: string;
}

/**
 * `migrate` (cli/migrate-command.ts, issue 46): with DATABASE_URL, PostgreSQL under the runner's
 * advisory lock, then the spool at DATABASE_PATH when that file exists (a Job run without the
 * replica's volume creates no stray spool); without it, the SQLite file, created when missing.
 * `dryRun`: what would be applied, nothing changed (schema_migrations read, the file read-only).
 */
export async function migrateStores(
  config: Config,
  dryRun: boolean,
  say: (line: string) => void = () => {},
): Promise<StoreMigration[]> {
  if (config.cluster === null) return [migrateSqlite(config, dryRun)];
  const pg = await migratePg(config.cluster.databaseUrl, dryRun, say);
  if (existsSync(config.databasePath)) return [pg, migrateSqlite(config, dryRun)];
  const skipped = 'no spool there (a replica migrates its own at start, or run `migrate` beside it)';
  return [pg, { store: 'sqlite', target: config.databasePath, applied: [], skipped }];
}

async function migratePg(
  databaseUrl: string,
  dryRun: boolean,
  say: (line: string) => void,
): Promise<StoreMigration> {
  const target = pgTarget(databaseUrl);
  const pool = pgPool({
    connectionString: databaseUrl,
    max: 1,
    connectionTimeoutMillis: 10_000,
    application_name: 'consig-receiver migrate',
  });
  pool.on('error', () => {});
  let note: string | undefined;
  try {
    let applied: PgMigration[];
    if (dryRun) {
      const { verdict, pending } = await inspectPostgres(pool);
      if (verdict.kind === 'newer') note = verdict.message;
      applied = pending;
    } else
      applied = await migratePostgres(pool, {
        logger: migrationLines(say),
        onVerdict: (v) => {
          if (v.kind === 'newer') note = v.message;
        },
      });
    const files = applied.map((m) => ({ file: migrationFileName(m), compat: m.compat }));
    return { store: 'postgres', target: describePgTarget(target), applied: files, ...(note ? { note } : {}) };
  } catch (err) {
    throw pgError(err, target, databaseUrl, false);
  } finally {
    await pool.end().catch(() => {});
  }
}

/**
 * What the runner logs while it waits (another runner's lock, a lock conflict tried again), as
 * lines: its message, then which file, which try, how long. What it applied is the command's result.
 */
function migrationLines(say: (line: string) => void) {
  const line = (fields: Record<string, unknown>, message: string) => {
    const { migration, attempt, retry_in_ms: retryIn, err } = fields;
    const detail = [
      migration === undefined ? '' : `${String(migration)}`,
      attempt === undefined ? '' : `try ${String(attempt)}`,
      retryIn === undefined ? '' : `again in ${String(retryIn)} ms`,
      err === undefined ? '' : String(err),
    ].filter((d) => d !== '');
    say(detail.length === 0 ? message : `${message} (${detail.join('; ')})`);
  };
  return {
    info: (fields: Record<string, unknown>, message: string) => {
      if (fields.lockKey !== undefined) line({}, message);
    },
    warn: line,
  };
}

function migrateSqlite(config: Config, dryRun: boolean): StoreMigration {
  const path = config.databasePath;
  const applied = dryRun ? pendingSqlite(config) : migrateFile(config);
  return { store: 'sqlite', target: path, applied: applied.map((m) => ({ file: migrationFileName(m) })) };
}

/** What `migrate` would apply to the SQLite file, read without writing (all of them for no file). */
function pendingSqlite(config: Config): Migration[] {
  const migrations = loadMigrations();
  if (!existsSync(config.databasePath)) return migrations;
  const db = openDatabase(config.databasePath, {
    readonly: true,
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, MIGRATION_BUSY_TIMEOUT_MS),
  });
  try {
    assertKnown(db, migrations);
    const done = new Set(appliedVersions(db));
    return migrations.filter((m) => !done.has(m.version));
  } finally {
    db.close();
  }
}
