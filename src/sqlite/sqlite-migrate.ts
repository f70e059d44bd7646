import { readMigrationFiles } from '../core/migration-folder';
import { MigrationError } from '../domain/errors';
import { type MigrationFile, unknownVersions } from '../domain/migration-files';
import type { Db } from './database';

/**
 * Forward-only numbered migrations (`migrations/0001_init.sql`, …), in the manner of
 * graphile-worker: each runs in its own transaction and records itself in the same transaction;
 * a database that has migrations this code does not know is refused.
 */

export type Migration = MigrationFile;

/** `dir`'s files, by default `migrations/` next to the package (core/migration-folder.ts). */
export function loadMigrations(dir?: string): Migration[] {
  return readMigrationFiles('migrations', dir);
}

/**
 * Creates `schema_migrations` when missing, in a write transaction of its own: a process that finds
 * the table missing and one that creates it at the same moment must not both try. An existing
 * table costs no write lock.
 */
function ensureTable(db: Db): void {
  if (tableExists(db)) return;
  db.transaction(() => {
    db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version    INTEGER PRIMARY KEY,
      name       TEXT NOT NULL,
      applied_at TEXT NOT NULL
    )`);
  }).immediate();
}

function tableExists(db: Db): boolean {
  return (
    db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get() !==
    undefined
  );
}

export function appliedVersions(db: Db): number[] {
  if (!tableExists(db)) return [];
  return (
    db.prepare('SELECT version FROM schema_migrations ORDER BY version').all() as { version: number }[]
  ).map((r) => r.version);
}

/** Refuses a database that has migrations the code does not know (it was used by newer code). */
export function assertKnown(db: Db, migrations: readonly Migration[]): number[] {
  const applied = appliedVersions(db);
  const unknown = unknownVersions(applied, migrations);
  if (unknown.length > 0) {
    throw new MigrationError(
      `the database has migration(s) ${unknown.join(', ')} that this version does not know; it was written by a newer consig-receiver — run that version, or restore a backup`,
    );
  }
  return applied;
}

/**
 * Applies the pending migrations in order; returns the versions this call applied. Safe when several
 * processes start on one file at once: each migration's transaction is `BEGIN IMMEDIATE` (one
 * writer at a time) and re-reads, inside it, whether another process applied that version after
 * this one looked; if so it is skipped, not applied twice.
 */
export function migrate(
  db: Db,
  migrations: readonly Migration[] = loadMigrations(),
  now: () => Date = () => new Date(),
): Migration[] {
  ensureTable(db);
  const applied = new Set(assertKnown(db, migrations));
  const isApplied = db.prepare<[number], { one: number }>(
    'SELECT 1 AS one FROM schema_migrations WHERE version = ?',
  );
  const record = db.prepare<[number, string, string]>(
    'INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)',
  );
  const done: Migration[] = [];
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    const keysOff = FOREIGN_KEYS_OFF.test(m.sql);
    const run = db.transaction((): boolean => {
      if (isApplied.get(m.version)) return false;
      record.run(m.version, m.name, now().toISOString());
      db.exec(m.sql);
      if (keysOff) refuseBrokenKeys(db);
      return true;
    });
    try {
      if (keysOff) db.pragma('foreign_keys = OFF');
      if (run.immediate()) done.push(m);
    } catch (err) {
      throw new MigrationError(
        `migration ${String(m.version).padStart(4, '0')}_${m.name} failed: ${(err as Error).message}`,
        { cause: err },
      );
    } finally {
      if (keysOff) db.pragma('foreign_keys = ON');
    }
  }
  return done;
}

/**
 * A migration whose first line is `-- sqlite: foreign_keys off` runs with foreign keys off: SQLite's
 * procedure for a change ALTER TABLE cannot make (a CHECK, a NOT NULL), which rebuilds a table that
 * other tables reference (https://www.sqlite.org/lang_altertable.html#otheralter). The pragma is a
 * no-op inside a transaction, so it is set around it; every key is checked before the commit.
 */
const FOREIGN_KEYS_OFF = /^-- sqlite: foreign_keys off\r?\n/;

function refuseBrokenKeys(db: Db): void {
  const broken = db.pragma('foreign_key_check') as unknown[];
  if (broken.length > 0) throw new Error(`foreign_key_check found ${broken.length} broken reference(s)`);
}
