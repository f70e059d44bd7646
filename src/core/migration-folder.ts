import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { MigrationError } from '../domain/errors';
import { type MigrationFile, orderMigrationFiles } from '../domain/migration-files';

/**
 * The migration folders beside the package, read one way for both stores: SQLite's `migrations/`
 * (sqlite/sqlite-migrate.ts), PostgreSQL's `migrations-pg/` (postgres/pg-migrate.ts). Names and numbering
 * are domain/migration-files.ts's; each store applies them its own way (SQLite synchronously at
 * startup, PostgreSQL under an advisory lock).
 */
export type MigrationFolder = 'migrations' | 'migrations-pg';

/** Finds `folder` above this file: from `src/core` (tests) or `dist/src/core` (built). */
export function migrationFolder(folder: MigrationFolder): string {
  let dir = __dirname;
  for (let i = 0; i < 5; i++) {
    const candidate = resolve(dir, folder);
    if (existsSync(join(candidate, '0001_init.sql'))) return candidate;
    dir = resolve(dir, '..');
  }
  throw new MigrationError(`cannot find the ${folder} folder above ${__dirname}`);
}

/** The `.sql` files of `dir` (by default `folder` beside the package), in the order they apply. */
export function readMigrationFiles(
  folder: MigrationFolder,
  dir: string = migrationFolder(folder),
): MigrationFile[] {
  const files = readdirSync(dir).map((file) => ({
    file,
    sql: file.endsWith('.sql') ? readFileSync(join(dir, file), 'utf8') : '',
  }));
  return orderMigrationFiles(files, folder);
}
