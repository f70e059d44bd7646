import { MigrationError } from './errors';

/**
 * The rules of a migrations folder, for both stores (SQLite's `migrations/`, PostgreSQL's
 * `migrations-pg/`): files named `NNNN_name.sql`, numbered 0001, 0002, … without gaps, applied in
 * that order. Pure: the callers read the folder.
 */

export interface MigrationFile {
  version: number;
  name: string;
  sql: string;
}

const FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/**
 * The `.sql` files of a folder in the order they apply. `folder` names it in the errors
 * (`migrations`, `migrations-pg`). Throws MigrationError for a badly named file or a gap.
 */
export function orderMigrationFiles(
  files: readonly { file: string; sql: string }[],
  folder: string,
): MigrationFile[] {
  const migrations = files
    .filter((f) => f.file.endsWith('.sql'))
    .map(({ file, sql }) => {
      const m = FILE.exec(file);
      if (!m?.[1] || !m[2]) throw new MigrationError(`migration file ${file} is not named NNNN_name.sql`);
      return { version: Number(m[1]), name: m[2], sql };
    })
    .sort((a, b) => a.version - b.version);
  migrations.forEach((m, i) => {
    if (m.version !== i + 1)
      throw new MigrationError(
        `${folder} must be numbered 0001, 0002, … without gaps; found ${m.version} at position ${i + 1}`,
      );
  });
  return migrations;
}

/** `0007_forwarding.sql` for version 7, name `forwarding`. */
export function migrationFileName(m: { version: number; name: string }): string {
  return `${String(m.version).padStart(4, '0')}_${m.name}.sql`;
}

/**
 * What a database has applied that these migrations do not know (a newer consig-receiver wrote
 * it): both stores refuse to run on it.
 */
export function unknownVersions<A extends number | { version: number }>(
  applied: readonly A[],
  migrations: readonly { version: number }[],
): A[] {
  const known = new Set(migrations.map((m) => m.version));
  return applied.filter((a) => !known.has(typeof a === 'number' ? a : a.version));
}
