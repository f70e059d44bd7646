import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';

/**
 * The files that hold the log are the owner's only (issue 45, LGPD): the SQLite log and each
 * replica's spool hold CPFs, salaries and employers in the bodies they keep, and so does a backup.
 * Whatever the umask, such a file is created 0600 and its directory, when the receiver creates it,
 * 0700. SQLite creates `-wal`, `-shm` and `-journal` with the database file's permissions, so a
 * private database file has private companions; one left by an older version, or a database
 * created by hand, is tightened to 0600 when it is opened for writing, with one notice naming the
 * path (never what it holds).
 */

/** Owner read and write, nothing for group or others. */
export const PRIVATE_FILE_MODE = 0o600;
/** Owner only. */
export const PRIVATE_DIRECTORY_MODE = 0o700;

/** A file found readable or writable by group or others, and what became of it. */
export interface ModeTightened {
  path: string;
  /** The mode it had, in octal (`0644`). */
  was: string;
  /** Whether it is now 0600; false when this process may not change it (not its owner). */
  tightened: boolean;
}

/** Where a tightened mode is told: a log line naming the path (runtime/receiver-mode.ts `openMigrated`), else stderr. */
export type ModeNotice = (notice: ModeTightened) => void;

/** The notice's words (the path and mode are beside them: a log line's fields, or stderr's line). */
export function modeNoticeMessage(n: ModeTightened): string {
  return n.tightened
    ? 'database file was readable by others: now 0600, owner only'
    : 'database file is readable by others and this user may not change it: make it 0600, owner only';
}

/** One line on stderr, as the commands print their warnings. */
export const stderrModeNotice: ModeNotice = (n) => {
  process.stderr.write(`consig-receiver: ${n.path} (mode ${n.was}): ${modeNoticeMessage(n)}\n`);
};

/** The companions SQLite creates beside a database file with the file's permissions. */
const COMPANIONS = ['-wal', '-shm', '-journal'];

/**
 * Before SQLite opens `path` for writing: the file created 0600 when `create` and missing, then it
 * and its existing companions tightened to 0600 where group or others have any access.
 */
export function privateDatabaseFile(path: string, options: { create: boolean; notice: ModeNotice }): void {
  if (options.create) privateFile(path);
  for (const file of [path, ...COMPANIONS.map((suffix) => path + suffix)]) tighten(file, options.notice);
}

/** Creates `path` empty with mode 0600 when missing (an existing file keeps its contents and mode). */
export function privateFile(path: string): void {
  if (existsSync(path)) return;
  // The mode applies at creation only, masked by the umask (0600 survives any umask that lets the
  // owner read and write); 'a' neither truncates nor fails on an existing file.
  closeSync(openSync(path, 'a', PRIVATE_FILE_MODE));
}

/** `dir` and its missing parents created 0700 (an existing directory is left as it is). */
export function privateDirectory(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
}

/** `path` made 0600 when group or others have any access to it; a missing file is left missing. */
export function tighten(path: string, notice: ModeNotice): void {
  let mode: number;
  try {
    const stat = statSync(path);
    // A directory or a device where the file should be is SQLite's to report (database-errors.ts).
    if (!stat.isFile()) return;
    mode = stat.mode;
  } catch {
    return;
  }
  if ((mode & 0o077) === 0) return;
  const was = (mode & 0o777).toString(8).padStart(4, '0');
  try {
    chmodSync(path, PRIVATE_FILE_MODE);
  } catch {
    // Not this user's file (a shared group-writable one): told, and left to its owner.
    return notice({ path, was, tightened: false });
  }
  notice({ path, was, tightened: true });
}
