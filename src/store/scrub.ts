import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from './database';

/**
 * An erasure's last step on a SQLite file (issue 45, docs/privacy.md "Physically"): the rows are
 * rewritten already, and every connection runs with `secure_delete` (store/database.ts), so the old
 * versions' space was zeroed as it was freed. Left are the WAL, which still holds the pages as they
 * were before the erasure until a checkpoint copies them back and truncates it, and, in a file
 * created before secure_delete was on, stale copies in free space that only a VACUUM rewrites. So:
 * checkpoint with truncation, then count the person's CPF in the file's raw bytes (the check that
 * cannot be fooled: no SQL, the bytes on disk), and VACUUM only when asked and copies are left.
 */

export interface FileScan {
  path: string;
  /** Copies of any of the forms in the file's bytes. */
  copies: number;
}

export interface ScrubReport {
  files: FileScan[];
  /** Whether the WAL was checkpointed and truncated (false: a reader held it past the wait). */
  walTruncated: boolean;
  vacuumed: boolean;
}

/** How many times any of `forms` occurs in the file at `path` (0 for no file), read in chunks. */
export function countInFile(path: string, forms: readonly string[]): number {
  if (!existsSync(path) || forms.length === 0) return 0;
  const needles = forms.map((f) => Buffer.from(f, 'latin1'));
  const overlap = Math.max(...needles.map((n) => n.length)) - 1;
  const chunk = Buffer.alloc(8 << 20);
  const fd = openSync(path, 'r');
  let count = 0;
  try {
    let carry = 0;
    for (let position = 0; ; ) {
      const read = readSync(fd, chunk, carry, chunk.length - carry, position);
      if (read === 0) break;
      position += read;
      const view = chunk.subarray(0, carry + read);
      // The first `carry` bytes are the previous chunk's tail: a match ending inside them was
      // counted with that chunk, one ending after them is new.
      for (const needle of needles) {
        for (let at = view.indexOf(needle); at !== -1; at = view.indexOf(needle, at + 1)) {
          if (at + needle.length > carry) count += 1;
        }
      }
      carry = Math.min(overlap, view.length);
      view.copy(chunk, 0, view.length - carry);
    }
  } finally {
    closeSync(fd);
  }
  return count;
}

/** `PRAGMA wal_checkpoint(TRUNCATE)`, tried until it completes or `waitMs` passes. */
export async function truncateWal(db: Db, waitMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const [result] = db.pragma('wal_checkpoint(TRUNCATE)') as { busy: number }[];
    if (result?.busy === 0) return true;
    if (Date.now() >= deadline) return false;
    await sleep(50);
  }
}

/** The scrub of the file at `path` open as `db`, for the text `forms` of one person's CPF. */
export async function scrubSqlite(
  db: Db,
  path: string,
  forms: readonly string[],
  options: { vacuum: boolean },
): Promise<ScrubReport> {
  let walTruncated = await truncateWal(db);
  const scan = () => [path, `${path}-wal`].map((p) => ({ path: p, copies: countInFile(p, forms) }));
  let files = scan();
  let vacuumed = false;
  if (options.vacuum && files.some((f) => f.copies > 0)) {
    db.exec('VACUUM');
    vacuumed = true;
    walTruncated = await truncateWal(db);
    files = scan();
  }
  return { files, walTruncated, vacuumed };
}
