import { DatabaseFileError } from '../domain/errors';
import Database from './sqlite-driver';
import type { Db } from './database';
import { privateFile } from './file-mode';

/**
 * One spool, one replica (cluster mode, issue 22 item 4). Two replicas given the same spool file
 * would both answer and relay from it: each relays the other's deliveries under its own REPLICA_ID
 * and their writers fight for SQLite's lock. So a replica holds an OS lock on a file beside its
 * spool (`<spool>.replica-lock`) for as long as it runs, and a second one refuses to start.
 *
 * The lock is SQLite's own, on that sibling file: a connection in `locking_mode = EXCLUSIVE` keeps
 * the exclusive lock of its first write transaction until it closes. Underneath it is a POSIX
 * advisory lock (fcntl), which the kernel drops when the process ends, however it ends: a replica
 * SIGKILLed (or its machine lost) leaves nothing that keeps the next one out. The spool itself is
 * not locked this way: its own connections (the writer, the relay, the console's reads) share it.
 *
 * SQLite mode does not take it: there several receivers share one file on purpose during a rolling
 * deploy, and the processing lease decides who processes (sqlite/processing-lease.ts).
 */

export interface SpoolLock {
  /** The lock file. */
  readonly path: string;
  /** Gives the lock back (at a clean stop; a process that dies gives it back anyway). */
  release(): void;
}

/** Takes the lock of the spool at `spoolPath`, or throws a DatabaseFileError naming the spool. */
export function lockSpool(spoolPath: string): SpoolLock {
  const path = `${spoolPath}.replica-lock`;
  let db: Db | null = null;
  try {
    // Owner only, as the spool (sqlite/file-mode.ts); it holds a pid, no personal data.
    privateFile(path);
    db = new Database(path);
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    // The first write transaction takes the exclusive lock; EXCLUSIVE mode keeps it after the commit.
    db.exec(
      'BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS holder (id INTEGER PRIMARY KEY, pid INTEGER, since TEXT); ' +
        'DELETE FROM holder; COMMIT;',
    );
    db.prepare('INSERT INTO holder (id, pid, since) VALUES (1, ?, ?)').run(
      process.pid,
      new Date().toISOString(),
    );
  } catch (err) {
    db?.close();
    const busy = (err as { code?: string }).code?.startsWith('SQLITE_BUSY') ?? false;
    throw new DatabaseFileError(
      spoolPath,
      busy
        ? `the spool ${spoolPath} is in use by another replica (its lock ${path} is held): in cluster mode each replica needs a DATABASE_PATH of its own`
        : `cannot lock the spool ${spoolPath} (${path}): ${(err as Error).message}`,
      { cause: err },
    );
  }
  const held = db;
  return {
    path,
    release: () => {
      if (held.open) held.close();
    },
  };
}
