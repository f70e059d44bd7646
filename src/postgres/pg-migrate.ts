import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { migrationFolder, readMigrationFiles } from '../core/migration-folder';
import { MigrationError } from '../domain/errors';
import {
  isLockConflict,
  type MigrationMode,
  migrationMode,
  migrationRetryDelayMs,
  outsideStatement,
} from '../domain/migration-steps';
import { checkOut, type ClusterLogger } from './pg-sql';
import { transactionOn } from './pg-statements';
import { RELAY_LOCK_KEY } from './pg-locks';
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
 * src/sqlite/sqlite-migrate.ts runs SQLite's and graphile-worker runs its own: numbered files, forward-only,
 * each in its own transaction that records it first. On top of that, because replicas share the
 * database and start together:
 * - one session advisory lock serialises the runners: the first migrates, the others wait for it,
 *   then find nothing to do;
 * - a database holding versions this code does not know (newer code wrote them) is run on when
 *   every one of them is recorded `previous`, and refused otherwise (issue 46,
 *   domain/migration-compat.ts): each file says its compat, recorded in `schema_migrations.compat`;
 * - a file whose content changed since it was applied is refused (a checksum is recorded), since
 *   replicas running different texts of "the same" migration would not share one schema;
 * - on a live database (issue 46, item 2, domain/migration-steps.ts): each transaction takes the
 *   relays' own lock first (so it never holds a table a relay's batch then waits for: the deadlock
 *   the issue saw), sets a short `lock_timeout` (behind a long read it gives up instead of queueing
 *   ingest behind its ACCESS EXCLUSIVE request) and is tried again after a pause when it met a lock
 *   conflict; a file marked `-- migrate: outside-transaction` (one statement, such as
 *   `CREATE INDEX CONCURRENTLY`) runs on its own and is recorded once it succeeded.
 */

export interface PgMigration extends MigrationFile {
  /** SHA-256 (hex) of the file with CRLF read as LF, so a Windows checkout is not "edited". */
  checksum: string;
  /** Whether the previous release runs on the schema this makes (domain/migration-compat.ts). */
  compat: Compat;
  /** In a transaction of its own, or alone outside one (its second line; domain/migration-steps.ts). */
  mode: MigrationMode;
}

/** What migratePostgres logs. */
type MigrationLogger = Pick<ClusterLogger, 'info' | 'warn'>;

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
  /**
   * The longest one migration waits for a lock (`lock_timeout`) before it rolls back and is tried
   * again: how long relays and turns can queue behind its request. Under PostgreSQL's
   * `deadlock_timeout` (1 s by default), so that in a cycle with a relay the migration gives up
   * first. @default 800
   */
  lockTimeoutMs?: number;
  /** How long a migration that keeps meeting lock conflicts is tried again before the runner gives up. @default 600000 */
  retryForMs?: number;
  /** The jitter of the pauses between tries. @default Math.random */
  random?: () => number;
  /** Told once PostgreSQL answered (a connection is checked out), before the lock is waited for. @default nothing */
  onConnected?: () => void;
}

/**
 * A newer schema this replica's code must not run on (a breaking migration it does not know):
 * thrown by the runner, read by the replica (runtime/cluster/node.ts) as "not ready, webhooks 503".
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
  return readMigrationFiles('migrations-pg', dir).map((m) => {
    const mode = migrationMode(m.sql);
    // Checked when read, as the compat line is: a file refused before anything of the run applies.
    if (mode === 'outside-transaction') outsideStatement(m);
    return { ...m, checksum: checksum(m.sql), compat: migrationCompat(m), mode };
  });
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
  options.onConnected?.();
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
    await applyWithRetries(client, m, options);
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

/**
 * One migration, tried again while it meets lock conflicts (a long read on a table it alters, a
 * deadlock with a turn), each pause logged, until `retryForMs` has passed: then the last conflict
 * is thrown, naming the file. Any other failure is thrown at once.
 */
async function applyWithRetries(
  client: Queryable,
  m: PgMigration,
  options: MigratePostgresOptions,
): Promise<void> {
  const started = Date.now();
  const retryForMs = options.retryForMs ?? 600_000;
  for (let attempt = 1; ; attempt++) {
    try {
      if (m.mode === 'outside-transaction') await applyOutside(client, m);
      else await applyInTransaction(client, m, options.lockTimeoutMs ?? 800);
      return;
    } catch (err) {
      const cause = (err as { cause?: { code?: unknown } }).cause;
      const delay = migrationRetryDelayMs(attempt, options.random ?? Math.random);
      if (!isLockConflict(cause?.code) || Date.now() - started + delay > retryForMs) throw err;
      options.logger?.warn(
        { migration: migrationFileName(m), attempt, retry_in_ms: delay, err: (cause as Error).message },
        'PostgreSQL migration met a lock it could not have in time (a long transaction on a table it changes, or a deadlock with a relay or turn): rolled back whole, tried again after a pause',
      );
      await sleep(delay);
    }
  }
}

/**
 * Records the version first, then runs the file, in one transaction: both happen or neither. The
 * relays' lock first: a relay's batch takes it before it writes `deliveries` and `events`, so this
 * transaction never holds a table lock such a batch is waiting for, nor waits for one it holds.
 */
async function applyInTransaction(client: Queryable, m: PgMigration, lockTimeoutMs: number): Promise<void> {
  try {
    await transactionOn(client, async () => {
      await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(lockTimeoutMs))}`);
      await client.query('SELECT pg_advisory_xact_lock($1)', [RELAY_LOCK_KEY.toString()]);
      const record = `INSERT INTO ${TABLE} (version, name, checksum, compat) VALUES ($1, $2, $3, $4)`;
      await client.query(record, [m.version, m.name, m.checksum, m.compat]);
      // No parameters: the simple query protocol, which runs a file of several statements.
      await client.query(m.sql);
    });
  } catch (err) {
    throw failed(m, err);
  }
}

/**
 * The one statement of an outside-transaction file, then its record. No `lock_timeout`: what runs
 * this way (CREATE INDEX CONCURRENTLY) waits without blocking writes. A stop between the two runs
 * the statement again next time, which the file's IF NOT EXISTS makes harmless; an index whose
 * build was cut short is INVALID and dropped (concurrently too) before it is built again.
 */
async function applyOutside(client: Queryable, m: PgMigration): Promise<void> {
  const { statement, index } = outsideStatement(m);
  try {
    if (index !== null) {
      const { rows } = await client.query<{ invalid: boolean }>(
        `SELECT NOT i.indisvalid AS invalid FROM pg_index i
         JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relname = $1 AND n.nspname = current_schema()`,
        [index],
      );
      if (rows[0]?.invalid) await client.query(`DROP INDEX CONCURRENTLY IF EXISTS "${index}"`);
    }
    await client.query(statement);
    await client.query(`INSERT INTO ${TABLE} (version, name, checksum, compat) VALUES ($1, $2, $3, $4)`, [
      m.version,
      m.name,
      m.checksum,
      m.compat,
    ]);
  } catch (err) {
    throw failed(m, err);
  }
}

function failed(m: PgMigration, err: unknown): MigrationError {
  const message = `PostgreSQL migration ${migrationFileName(m)} failed: ${(err as Error).message}`;
  return new MigrationError(message, { cause: err });
}
