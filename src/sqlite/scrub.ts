import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Db } from './database';

/**
 * An erasure's last step on a SQLite file (issue 45, docs/privacy.md "Physically"): the rows are
 * rewritten already, and every connection runs with `secure_delete` (sqlite/database.ts), so the old
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

/**
 * Counts `forms` in a file read chunk by chunk: the tail of each chunk is carried into the next, so
 * a copy across two chunks is counted once.
 */
class ChunkCounter {
  private readonly needles: Buffer[];
  private readonly overlap: number;
  readonly chunk = Buffer.alloc(8 << 20);
  carry = 0;
  count = 0;

  constructor(forms: readonly string[]) {
    this.needles = forms.map((f) => Buffer.from(f, 'latin1'));
    this.overlap = Math.max(...this.needles.map((n) => n.length)) - 1;
  }

  /** `read` bytes were read into the chunk after the carried tail. */
  add(read: number): void {
    const view = this.chunk.subarray(0, this.carry + read);
    // The first `carry` bytes are the previous chunk's tail: a match ending inside them was counted
    // with that chunk, one ending after them is new.
    for (const needle of this.needles) {
      for (let at = view.indexOf(needle); at !== -1; at = view.indexOf(needle, at + 1)) {
        if (at + needle.length > this.carry) this.count += 1;
      }
    }
    const carry = Math.min(this.overlap, view.length);
    view.copy(this.chunk, 0, view.length - carry);
    this.carry = carry;
  }
}

/** How many times any of `forms` occurs in the file at `path` (0 for no file). For commands. */
export function countInFile(path: string, forms: readonly string[]): number {
  if (!existsSync(path) || forms.length === 0) return 0;
  const counter = new ChunkCounter(forms);
  const fd = openSync(path, 'r');
  try {
    for (let position = 0; ;) {
      const read = readSync(fd, counter.chunk, counter.carry, counter.chunk.length - counter.carry, position);
      if (read === 0) break;
      position += read;
      counter.add(read);
    }
  } finally {
    closeSync(fd);
  }
  return counter.count;
}

/**
 * {@link countInFile} for a server: the event loop turns between chunks (8 MiB each), so answers
 * are not held up while a large log is searched.
 */
export async function countInFileYielding(path: string, forms: readonly string[]): Promise<number> {
  if (!existsSync(path) || forms.length === 0) return 0;
  const counter = new ChunkCounter(forms);
  const file = await open(path, 'r');
  try {
    for (let position = 0; ;) {
      const { bytesRead } = await file.read(
        counter.chunk,
        counter.carry,
        counter.chunk.length - counter.carry,
        position,
      );
      if (bytesRead === 0) break;
      position += bytesRead;
      counter.add(bytesRead);
      await nextTurn();
    }
  } finally {
    await file.close();
  }
  return counter.count;
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
  const scan = async () =>
    Promise.all(
      [path, `${path}-wal`].map(async (p) => ({ path: p, copies: await countInFileYielding(p, forms) })),
    );
  let files = await scan();
  let vacuumed = false;
  if (options.vacuum && files.some((f) => f.copies > 0)) {
    db.exec('VACUUM');
    vacuumed = true;
    walTruncated = await truncateWal(db);
    files = await scan();
  }
  return { files, walTruncated, vacuumed };
}
