import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { migrationFolder, readMigrationFiles } from '../core/migration-folder';
import { MigrationError } from '../domain/errors';
import { checkOut, type ClusterLogger } from './pg-sql';
import { transactionOn } from './pg-store-sql';
import { type MigrationFile, migrationFileName, unknownVersions } from '../domain/migration-files';

/**
 * The PostgreSQL migrations of cluster mode (`migrations-pg/0001_init.sql`, …), run the way
 * src/store/migrate.ts runs SQLite's and graphile-worker runs its own: numbered files, forward-only,
 * each in its own transaction that records it first. On top of that, because replicas share the
 * database and start together:
 * - one session advisory lock serialises the runners: the first migrates, the others wait for it,
 *   then find nothing to do;
 * - a database holding a version this code does not know is refused (newer code wrote it);
 * - a file whose content changed since it was applied is refused (a checksum is recorded), since
 *   replicas running different texts of "the same" migration would not share one schema.
 */

export interface PgMigration extends MigrationFile {
  /** SHA-256 (hex) of the file with CRLF read as LF, so a Windows checkout is not "edited". */
  checksum: string;
}

/** What migratePostgres logs. */
type MigrationLogger = Pick<ClusterLogger, 'info'>;

export interface MigratePostgresOptions {
  /** The folder of `NNNN_name.sql` files. @default `migrations-pg/` next to the package */
  dir?: string;
  /** Where to say what was applied, and that another replica holds the lock. @default silent */
  logger?: MigrationLogger;
}

/**
 * The advisory-lock key of the migration runner (ASCII "consigMG"). Advisory locks are one namespace
 * per database, shared with anything else using them (a job engine too), hence a key no one picks
 * by chance.
 */
export const MIGRATION_LOCK_KEY = 0x636f6e7369674d47n;

const TABLE = 'schema_migrations';

export function checksum(sql: string): string {
  return createHash('sha256').update(sql.replace(/\r\n/g, '\n')).digest('hex');
}

/** Reads and checks `dir` (default: `migrations-pg/` by the package): `NNNN_name.sql`, 0001… without gaps. */
export function loadPgMigrations(dir: string = migrationFolder('migrations-pg')): PgMigration[] {
  return readMigrationFiles('migrations-pg', dir).map((m) => ({ ...m, checksum: checksum(m.sql) }));
}

/** A row of `schema_migrations`, as far as the checks need it. */
export interface AppliedRow {
  version: number;
  name: string;
  checksum: string;
}

/**
 * Applies the pending migrations in order and returns those this call applied (none when another
 * replica got there first), on one connection borrowed from `pool` and given back. Throws
 * MigrationError naming the file or the unknown version.
 */
export async function migratePostgres(
  pool: Pool,
  options: MigratePostgresOptions = {},
): Promise<PgMigration[]> {
  const migrations = loadPgMigrations(options.dir);
  const client = await checkOut(pool);
  let broken = false;
  try {
    await lock(client, options.logger);
    try {
      return await migrateLocked(client, migrations, options.logger);
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY.toString()]).catch(() => {
        // A connection that cannot unlock must not go back to a pool still holding the lock.
        broken = true;
      });
    }
  } finally {
    client.release(broken);
  }
}

type Queryable = Pick<PoolClient, 'query'>;

/**
 * A session lock (not a transaction one): it must cover every migration, each in a transaction of
 * its own. The connection's end releases it too, so a runner that dies frees the others. Session
 * locks need a real session: point DATABASE_URL at PostgreSQL or a session-mode pooler, not at a
 * transaction-mode PgBouncer, for migrations.
 */
async function lock(client: Queryable, logger: MigrationLogger | undefined): Promise<void> {
  const key = MIGRATION_LOCK_KEY.toString();
  const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
    key,
  ]);
  if (rows[0]?.locked) return;
  logger?.info({ lockKey: key }, 'another process is migrating the PostgreSQL database; waiting for it');
  await client.query('SELECT pg_advisory_lock($1)', [key]);
}

async function migrateLocked(
  client: Queryable,
  migrations: readonly PgMigration[],
  logger: MigrationLogger | undefined,
): Promise<PgMigration[]> {
  await client.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text        NOT NULL
  )`);
  const { rows } = await client.query<AppliedRow>(
    `SELECT version, name, checksum FROM ${TABLE} ORDER BY version`,
  );
  assertCompatible(rows, migrations);
  const applied = new Set(rows.map((r) => r.version));
  const done: PgMigration[] = [];
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    await applyOne(client, m);
    logger?.info({ migration: migrationFileName(m) }, 'applied PostgreSQL migration');
    done.push(m);
  }
  return done;
}

/** Refuses versions this code does not know, and known ones whose file changed since. */
export function assertCompatible(applied: readonly AppliedRow[], migrations: readonly PgMigration[]): void {
  const known = new Map(migrations.map((m) => [m.version, m]));
  const unknown = unknownVersions(applied, migrations);
  if (unknown.length > 0) {
    throw new MigrationError(
      `the PostgreSQL database has migration(s) ${unknown.map(migrationFileName).join(', ')} that this version does not know; it was migrated by a newer consig-receiver — run that version, or restore a backup`,
    );
  }
  for (const r of applied) {
    const m = known.get(r.version);
    if (m && (m.checksum !== r.checksum || m.name !== r.name)) {
      throw new MigrationError(
        `migrations-pg/${migrationFileName(m)} differs from the ${migrationFileName(r)} applied to the database (checksum ${m.checksum.slice(0, 12)}… ≠ ${r.checksum.slice(0, 12)}…); released migrations are never edited — restore the file and put the change in a new migration`,
      );
    }
  }
}

/** Records the version first, then runs the file, in one transaction: both happen or neither. */
async function applyOne(client: Queryable, m: PgMigration): Promise<void> {
  try {
    await transactionOn(client, async () => {
      const record = `INSERT INTO ${TABLE} (version, name, checksum) VALUES ($1, $2, $3)`;
      await client.query(record, [m.version, m.name, m.checksum]);
      // No parameters: the simple query protocol, which runs a file of several statements.
      await client.query(m.sql);
    });
  } catch (err) {
    const message = `PostgreSQL migration ${migrationFileName(m)} failed: ${(err as Error).message}`;
    throw new MigrationError(message, { cause: err });
  }
}
