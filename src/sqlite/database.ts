import { dirname } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import Database from './sqlite-driver';
import { DatabaseFileError, isLockBusy } from '../domain/errors';
import { databaseFileError, refuseUnwritableFile } from './database-errors';
import {
  type ModeNotice,
  type ModeTightened,
  privateDatabaseFile,
  privateDirectory,
  stderrModeNotice,
} from './file-mode';

export type Db = BetterSqlite3.Database;

/** A function `db.transaction(fn)` made: `fn` in one transaction (the driver's, typed here). */
export type SqliteTransaction<F extends (...args: never[]) => unknown> = BetterSqlite3.Transaction<F>;

/** Which better-sqlite3 this Node loads (sqlite-driver.ts), for the startup line. */
export { SQLITE_DRIVER } from './sqlite-driver';

/**
 * The busy timeout of every connection `serve` uses after startup. better-sqlite3 is synchronous:
 * a statement that finds the file locked by another connection (a second receiver, a backup, a
 * shell) holds the event loop for its whole busy timeout, and webhook answers wait behind it. With
 * this slice a locked file costs the loop at most 10 ms per attempt; the callers wait for the lock
 * by trying again later (the ingest writer up to SQLITE_BUSY_TIMEOUT_MS per request, the pipeline,
 * the lease and the poller at their next turn), and a probe or an admin write answers 503.
 */
export const EVENT_LOOP_BUSY_TIMEOUT_MS = 10;

/** Sets a connection's busy timeout (startup waits longer, e.g. for a concurrent migration). */
export function setBusyTimeout(db: Db, ms: number): void {
  db.pragma(`busy_timeout = ${Math.max(0, Math.floor(ms))}`);
}

export interface OpenOptions {
  /**
   * `FULL`: an acknowledged delivery survives a power cut.
   * @default 'FULL'
   */
  synchronous?: 'FULL' | 'EXTRA' | 'NORMAL';
  /**
   * How long a statement waits for another connection's write lock. It blocks the event loop.
   * @default 1000
   */
  busyTimeoutMs?: number;
  /**
   * The connection's page cache, in KiB.
   * @default DEFAULT_CACHE_KIB
   */
  cacheKib?: number;
  /** @default false */
  readonly?: boolean;
  /**
   * Create the file (and its directory) when missing.
   * @default true unless readonly
   */
  create?: boolean;
  /**
   * Told, once the file is open, of the file or a companion that was readable by others and is now
   * 0600 (sqlite/file-mode.ts): the receiver's log line. A file that cannot be opened gets its one
   * error line alone (its mode is tightened all the same).
   * @default a line on stderr
   */
  modeNotice?: ModeNotice;
}

/**
 * 32 MB of page cache per connection (SQLite's default is 2 MB): with a million events the index
 * pages that inserts touch stay in memory; `npm run bench` measured ingest on a full database at
 * 0.80× an empty one with the default and 0.97× with this, the receiver's peak RSS staying < 150 MB.
 */
export const DEFAULT_CACHE_KIB = 32_768;

/**
 * Opens the SQLite file in WAL mode with the pragmas the receiver relies on. Unless `readonly`, it
 * proves the connection can write (see probeWrite); every failure is a DatabaseFileError whose one
 * line names the file and the cause, so `serve` stops at once instead of listening and answering
 * 503 to every delivery.
 */
export function openDatabase(path: string, options: OpenOptions = {}): Db {
  const readonly = options.readonly ?? false;
  const create = options.create ?? !readonly;
  if (!readonly && path !== ':memory:') refuseUnwritableFile(path);
  if (create && path !== ':memory:') makeDirectory(path);
  let db: Db | null = null;
  // Told once the file is open: a file that cannot be used gets its one error line, nothing more.
  const tightened: ModeTightened[] = [];
  try {
    // Owner only, whatever the umask (sqlite/file-mode.ts): created 0600, or tightened to it.
    if (!readonly && path !== ':memory:')
      privateDatabaseFile(path, { create, notice: (n) => tightened.push(n) });
    db = new Database(path, { readonly, fileMustExist: !create });
    setBusyTimeout(db, options.busyTimeoutMs ?? 1000);
    if (!readonly) {
      db.pragma('journal_mode = WAL');
      db.pragma(`synchronous = ${options.synchronous ?? 'FULL'}`);
      probeWrite(db);
    }
    db.pragma('foreign_keys = ON');
    // Freed space is overwritten with zeros (issue 45): an erased or pruned body leaves no copy in
    // the file's free pages. Per connection, so on every one; measured in docs/privacy.md.
    db.pragma('secure_delete = ON');
    db.pragma(`cache_size = -${Math.round(options.cacheKib ?? DEFAULT_CACHE_KIB)}`);
    for (const n of tightened) (options.modeNotice ?? stderrModeNotice)(n);
    return db;
  } catch (err) {
    db?.close();
    throw databaseFileError(path, err, { readonly });
  }
}

function makeDirectory(path: string): void {
  try {
    privateDirectory(dirname(path));
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new DatabaseFileError(
      path,
      `cannot create the directory ${dirname(path)} for the database ${path}: ${reason}`,
      { cause: err },
    );
  }
}

/**
 * A real write, rolled back: SQLite opens a file it may not write without complaint, and only a
 * page write shows a read-only file, a directory where `-wal` or `-journal` cannot be created, or
 * a damaged file. Rolled back before commit, it leaves no trace in the file or its WAL.
 */
function probeWrite(db: Db): void {
  try {
    db.exec('BEGIN IMMEDIATE');
    db.exec('CREATE TABLE consig_write_probe (x)');
  } catch (err) {
    // Another connection holds the write lock (a running receiver, a backup, a shell): the file
    // takes writes, and a longer lock is what /readyz and the 503s report, not a reason to stop.
    if (!isLockBusy(err)) throw err;
  } finally {
    if (db.inTransaction) db.exec('ROLLBACK');
  }
}
