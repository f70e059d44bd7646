import { backoffDelayMs } from './backoff';
import { MigrationError } from './errors';
import { migrationFileName } from './migration-files';

/**
 * How the PostgreSQL runner (postgres/pg-migrate.ts) applies one migration on a live database
 * (issue 46, item 2), as rules it can ask: which files run outside a transaction, what a
 * lock conflict is, and how long to wait before trying again. Pure.
 *
 * A migration runs in a transaction of its own, with a short `lock_timeout` and under the relays'
 * own lock: waiting behind a long read (a report, a `pg_dump`) it gives up after the timeout
 * instead of queueing every relay and turn behind its ACCESS EXCLUSIVE request, and it is tried
 * again later. Some statements cannot run in a transaction at all (`CREATE INDEX CONCURRENTLY`,
 * the way to index a live table without blocking its writes): a file says so on its second line,
 * `-- migrate: outside-transaction`, and then holds exactly one statement.
 */
export type MigrationMode = 'transaction' | 'outside-transaction';

// The second line of the text, whole (the first is the compat line, domain/migration-compat.ts).
const OUTSIDE = /^-- migrate: outside-transaction[ \t]*\r?$/;

/** The mode a file's second line declares; `transaction` when it declares none. */
export function migrationMode(sql: string): MigrationMode {
  const second = sql.split('\n')[1];
  return second !== undefined && OUTSIDE.test(second) ? 'outside-transaction' : 'transaction';
}

/** One statement to run outside a transaction, and the index it builds when it builds one. */
export interface OutsideStatement {
  statement: string;
  /**
   * `CREATE INDEX CONCURRENTLY IF NOT EXISTS <index>`: a build that fails (a lock timeout, a
   * deadlock, a stop) leaves an INVALID index of that name, which IF NOT EXISTS would then keep;
   * the runner drops it, if it is invalid, before building again.
   */
  index: string | null;
}

const INDEX =
  /^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+("?)([A-Za-z_][A-Za-z0-9_$]*)\1\s/i;
const CREATE_INDEX = /^CREATE\s+(?:UNIQUE\s+)?INDEX\b/i;

/**
 * The statement of an outside-transaction file: its text without comment lines and without the
 * one `;` that may end it. Refused (MigrationError naming the file) when it holds more than one
 * statement — PostgreSQL runs a multi-statement query as one implicit transaction, where
 * CONCURRENTLY is refused — or an index built otherwise than `CONCURRENTLY IF NOT EXISTS`, which
 * could not be run again after a stop between the build and its record.
 */
export function outsideStatement(m: { version: number; name: string; sql: string }): OutsideStatement {
  const statement = m.sql
    .split('\n')
    .filter((line) => !line.trim().startsWith('--'))
    .join('\n')
    .replace(/;\s*$/, '')
    .trim();
  const file = `migrations-pg/${migrationFileName(m)}`;
  if (statement === '' || statement.includes(';'))
    throw new MigrationError(
      `${file} runs outside a transaction (its second line) and must hold exactly one statement; split it into files of one statement each`,
    );
  const index = INDEX.exec(statement);
  if (index === null && CREATE_INDEX.test(statement))
    throw new MigrationError(
      `${file} builds an index outside a transaction: write CREATE INDEX CONCURRENTLY IF NOT EXISTS <name> …, so that a build cut short is built again`,
    );
  if (index === null) return { statement, index: null };
  // An unquoted name is folded to lower case by PostgreSQL, as it is found in pg_class.
  return { statement, index: index[1] === '"' ? index[2]! : index[2]!.toLowerCase() };
}

/**
 * PostgreSQL's codes for a lock a migration could not have in time: `lock_not_available` (its
 * `lock_timeout` ran out) and `deadlock_detected` (it was chosen to break a cycle with a relay or a
 * turn). Either rolls the migration back whole; trying again later is safe.
 */
export function isLockConflict(code: unknown): boolean {
  return code === '55P03' || code === '40P01';
}

/** The pause before attempt `attempt + 1` of a migration that met a lock conflict: 0.5 s doubling to 15 s, jittered. */
export function migrationRetryDelayMs(attempt: number, random: () => number): number {
  return backoffDelayMs(attempt, { baseMs: 500, maxMs: 15_000, jitter: 0.5 }, random);
}
