import { existsSync } from 'node:fs';
import type { Config } from './config';
import { migrationFileName } from './domain/migration-files';
import { pgPool } from './postgres/connection';
import { inspectPostgres, migratePostgres, type PgMigration } from './postgres/pg-migrate';
import { describePgTarget, pgError, pgTarget } from './postgres/pg-reads';
import { openDatabase } from './sqlite/database';
import {
  appliedVersions,
  assertKnown,
  loadMigrations,
  type Migration,
  migrate,
} from './sqlite/sqlite-migrate';
import type { PostgresTarget } from './store-factory';

/**
 * `migrate` (cli/migrate-command.ts, issue 46), each store's way, as the commands' store chooses
 * (open-store.ts `commandStores`): with DATABASE_URL, PostgreSQL under the runner's advisory lock,
 * then the spool at DATABASE_PATH when that file exists; without it, the SQLite file, created when
 * missing. `dryRun`: what would be applied, nothing changed (schema_migrations read, the file
 * read-only).
 */

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

/** `migrate` in SQLite mode: the SQLite file, created when missing. */
export function migrateSqliteStore(config: Config, dryRun: boolean): StoreMigration[] {
  return [migrateSqlite(config, dryRun)];
}

/**
 * `migrate` in cluster mode: PostgreSQL under the runner's advisory lock, then the spool at
 * DATABASE_PATH when that file exists (a Job run without the replica's volume creates no stray
 * spool).
 */
export async function migratePostgresStores(
  config: Config,
  target: PostgresTarget,
  dryRun: boolean,
  say: (line: string) => void,
): Promise<StoreMigration[]> {
  const pg = await migratePg(target.cluster.databaseUrl, dryRun, say);
  if (existsSync(target.databasePath)) return [pg, migrateSqlite(config, dryRun)];
  const skipped = 'no spool there (a replica migrates its own at start, or run `migrate` beside it)';
  return [pg, { store: 'sqlite', target: target.databasePath, applied: [], skipped }];
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
