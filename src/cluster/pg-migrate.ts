import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { migrationFolder, readMigrationFiles } from '../core/migration-folder';
import { MigrationError } from '../domain/errors';
import { checkOut, type ClusterLogger } from './pg-sql';
import { transactionOn } from './pg-store-sql';
import { type MigrationFile, migrationFileName } from '../domain/migration-files';
import {
  type AppliedCompat,
  type Compat,
  migrationCompat,
  RELEASED_COMPAT,
  schemaVerdict,
  type SchemaVerdict,
} from '../domain/migration-compat';

/**
 * The PostgreSQL migrations of cluster mode (`migrations-pg/0001_init.sql`, …), run the way
 * src/store/migrate.ts runs SQLite's and graphile-worker runs its own: numbered files, forward-only,
 * each in its own transaction that records it first. On top of that, because replicas share the
 * database and start together:
 * - one session advisory lock serialises the runners: the first migrates, the others wait for it,
 *   then find nothing to do;
 * - a database holding versions this code does not know (newer code wrote them) is run on when
 *   every one of them is recorded `previous`, and refused otherwise (issue 46,
 *   domain/migration-compat.ts): each file says its compat, recorded in `schema_migrations.compat`;
 * - a file whose content changed since it was applied is refused (a checksum is recorded), since
 *   replicas running different texts of "the same" migration would not share one schema.
 */

export interface PgMigration extends MigrationFile {
  /** SHA-256 (hex) of the file with CRLF read as LF, so a Windows checkout is not "edited". */
  checksum: string;
  /** Whether the previous release runs on the schema this makes (domain/migration-compat.ts). */
  compat: Compat;
}

/** What migratePostgres logs. */
type MigrationLogger = Pick<ClusterLogger, 'info'>;

export interface MigratePostgresOptions {
  /** The folder of `NNNN_name.sql` files. @default `migrations-pg/` next to the package */
  dir?: string;
  /** Where to say what was applied, and that another replica holds the lock. @default silent */
  logger?: MigrationLogger;
  /**
   * Told what the schema was found to be before anything was applied (a newer schema this code
   * runs on: `newer`). @default nothing
   */
  onVerdict?: (verdict: SchemaVerdict) => void;
}

/**
 * A newer schema this replica's code must not run on (a breaking migration it does not know):
 * thrown by the runner, read by the replica (cluster/node.ts) as "not ready, webhooks 503".
 */
export class SchemaRefused extends MigrationError {}

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

/**
 * Reads and checks `dir` (default: `migrations-pg/` by the package): `NNNN_name.sql`, 0001… without
 * gaps, each after 0011 starting with its `-- compat:` line (MigrationError naming the file).
 */
export function loadPgMigrations(dir: string = migrationFolder('migrations-pg')): PgMigration[] {
  return readMigrationFiles('migrations-pg', dir).map((m) => ({
    ...m,
    checksum: checksum(m.sql),
    compat: migrationCompat(m),
  }));
}

/** A row of `schema_migrations`, as far as the checks need it (compat null: not recorded). */
export interface AppliedRow extends AppliedCompat {
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
      return await migrateLocked(client, migrations, options);
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
  options: MigratePostgresOptions,
): Promise<PgMigration[]> {
  const { logger } = options;
  await ensureTable(client);
  const rows = await readApplied(client);
  const verdict = assertCompatible(rows, migrations);
  options.onVerdict?.(verdict);
  if (verdict.kind === 'newer') {
    logger?.info({}, verdict.message);
    return [];
  }
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

/**
 * `schema_migrations`, with the column `compat` (issue 46) added by the runner itself, and filled
 * for the versions released before it from the list in code (domain/migration-compat.ts). Under the
 * advisory lock.
 */
async function ensureTable(client: Queryable): Promise<void> {
  await client.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text        NOT NULL
  )`);
  await client.query(`ALTER TABLE ${TABLE} ADD COLUMN IF NOT EXISTS compat text`);
  const listed = Object.entries(RELEASED_COMPAT);
  await client.query(
    `UPDATE ${TABLE} s SET compat = k.compat
     FROM unnest($1::int[], $2::text[]) AS k (version, compat)
     WHERE s.version = k.version AND s.compat IS NULL`,
    [listed.map(([v]) => Number(v)), listed.map(([, c]) => c.compat)],
  );
}

/**
 * What `schema_migrations` records, read only: none when the table is missing, compat null when a
 * runner from before issue 46 made the table (MIGRATE_ON_START=false and `migrate --dry-run` read
 * it without changing it).
 */
export async function readApplied(client: Queryable): Promise<AppliedRow[]> {
  const { rows: found } = await client.query<{ t: boolean; c: boolean }>(
    `SELECT to_regclass('${TABLE}') IS NOT NULL AS t,
            EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = '${TABLE}' AND column_name = 'compat') AS c`,
  );
  if (!found[0]?.t) return [];
  const compat = found[0].c ? 'compat' : 'NULL::text AS compat';
  const { rows } = await client.query<AppliedRow>(
    `SELECT version, name, checksum, ${compat} FROM ${TABLE} ORDER BY version`,
  );
  return rows;
}

/**
 * The schema as this code finds it (domain/migration-compat.ts `schemaVerdict`); throws
 * SchemaRefused for a newer schema with a breaking migration, and MigrationError for a known
 * migration whose file changed since it was applied.
 */
export function assertCompatible(
  applied: readonly AppliedRow[],
  migrations: readonly PgMigration[],
): SchemaVerdict {
  const known = new Map(migrations.map((m) => [m.version, m]));
  const verdict = schemaVerdict(applied, migrations);
  if (verdict.kind === 'refused') throw new SchemaRefused(verdict.message);
  for (const r of applied) {
    const m = known.get(r.version);
    if (m && (m.checksum !== r.checksum || m.name !== r.name)) {
      throw new MigrationError(
        `migrations-pg/${migrationFileName(m)} differs from the ${migrationFileName(r)} applied to the database (checksum ${m.checksum.slice(0, 12)}… ≠ ${r.checksum.slice(0, 12)}…); released migrations are never edited — restore the file and put the change in a new migration`,
      );
    }
  }
  return verdict;
}

/**
 * Reads the schema without changing anything (MIGRATE_ON_START=false, a running replica's watch,
 * `migrate --dry-run`): the verdict, and the pending migrations. Throws as assertCompatible.
 */
export async function inspectPostgres(
  pool: Pool,
  from: string | readonly PgMigration[] = loadPgMigrations(),
): Promise<{ verdict: SchemaVerdict; pending: PgMigration[] }> {
  const migrations = typeof from === 'string' ? loadPgMigrations(from) : from;
  const client = await checkOut(pool);
  try {
    const rows = await readApplied(client);
    const verdict = assertCompatible(rows, migrations);
    const done = new Set(rows.map((r) => r.version));
    return {
      verdict,
      pending: verdict.kind === 'newer' ? [] : migrations.filter((m) => !done.has(m.version)),
    };
  } finally {
    client.release();
  }
}

/** Records the version first, then runs the file, in one transaction: both happen or neither. */
async function applyOne(client: Queryable, m: PgMigration): Promise<void> {
  try {
    await transactionOn(client, async () => {
      const record = `INSERT INTO ${TABLE} (version, name, checksum, compat) VALUES ($1, $2, $3, $4)`;
      await client.query(record, [m.version, m.name, m.checksum, m.compat]);
      // No parameters: the simple query protocol, which runs a file of several statements.
      await client.query(m.sql);
    });
  } catch (err) {
    const message = `PostgreSQL migration ${migrationFileName(m)} failed: ${(err as Error).message}`;
    throw new MigrationError(message, { cause: err });
  }
}
