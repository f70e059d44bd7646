import { accessSync, constants, statSync, type Stats } from 'node:fs';
import { basename, dirname } from 'node:path';
import { DatabaseFileError } from '../domain/errors';

/**
 * Why a database file cannot be used, in one line an operator can act on. SQLite's own messages
 * (`attempt to write a readonly database`, `unable to open database file`, `file is not a
 * database`) name neither the file nor, for a read-only directory, the real cause: SQLite must
 * create `<file>-wal` and `<file>-shm` (or `<file>-journal`) beside the file.
 */

export function statOrNull(path: string): Stats | null {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

function writable(path: string): boolean {
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function user(): string {
  const uid = process.getuid?.();
  return uid === undefined ? 'this user' : `this user (uid ${uid})`;
}

function owner(stat: Stats): string {
  return `owned by uid ${stat.uid}, mode ${(stat.mode & 0o777).toString(8).padStart(4, '0')}`;
}

/**
 * The file-system reason why `path` cannot be written, or null when the file, its directory and its
 * `-wal`/`-shm` companions all look writable to this process (then SQLite's code explains it).
 */
function unwritableCause(path: string): string | null {
  const file = statOrNull(path);
  if (file && !writable(path)) return `the file is not writable by ${user()}: it is ${owner(file)}`;
  const dir = dirname(path);
  const dirStat = statOrNull(dir);
  if (!dirStat) return `the directory ${dir} does not exist`;
  if (!writable(dir)) {
    const needs = file
      ? `SQLite needs to create ${basename(path)}-wal beside it`
      : `SQLite needs to create ${basename(path)} there`;
    return `the directory ${dir} is not writable by ${user()}: ${needs}`;
  }
  for (const suffix of ['-wal', '-shm', '-journal']) {
    const companion = statOrNull(path + suffix);
    if (companion && !writable(path + suffix))
      return `${basename(path)}${suffix} beside it is not writable by ${user()}: it is ${owner(companion)}`;
  }
  return null;
}

/**
 * Throws when `path` exists and this process may not write it. Checked before SQLite opens it: a
 * connection that SQLite silently opens read-only would still create `-wal` and `-shm` files
 * (read-only too) beside it, litter that outlives the fix of the file's permissions.
 */
export function refuseUnwritableFile(path: string): void {
  const file = statOrNull(path);
  if (!file?.isFile() || writable(path)) return;
  throw new DatabaseFileError(
    path,
    `cannot write the database ${path}: the file is not writable by ${user()}: it is ${owner(file)}`,
  );
}

/** What SQLite's result code means for the operator, when the file system does not explain it. */
function causeOfCode(code: string, message: string): { verb: string; cause: string } {
  if (code === 'SQLITE_NOTADB')
    return { verb: 'open', cause: 'the file is not an SQLite database (a wrong path, or a damaged file)' };
  if (code.startsWith('SQLITE_CORRUPT'))
    return {
      verb: 'open',
      cause: `the database file is damaged (${message}): restore the newest backup (docs/operating.md, "Backup and restore")`,
    };
  if (code === 'SQLITE_FULL') return { verb: 'write', cause: 'the disk is full (database or disk is full)' };
  if (code.startsWith('SQLITE_READONLY'))
    return { verb: 'write', cause: `SQLite refuses to write it (${code}; a read-only mount?)` };
  if (code === 'SQLITE_PERM' || code === 'EACCES' || code === 'EPERM')
    return { verb: 'write', cause: `permission denied (${code})` };
  if (code === 'EROFS') return { verb: 'write', cause: 'the file system is mounted read-only' };
  if (code.startsWith('SQLITE_IOERR'))
    return { verb: 'open', cause: `the disk or file system failed (${code}: ${message})` };
  if (code.startsWith('SQLITE_CANTOPEN')) return { verb: 'open', cause: `${message} (${code})` };
  return { verb: 'open', cause: code ? `${message} (${code})` : message };
}

/**
 * Turns an error met while opening or probing `path` into one line that names the file and the
 * cause. `readonly`: the file was opened for reading only, so its writability is no cause.
 */
export function databaseFileError(
  path: string,
  err: unknown,
  options: { readonly: boolean },
): DatabaseFileError {
  const code = String((err as { code?: unknown }).code ?? '');
  const message = err instanceof Error ? err.message : String(err);
  const { verb, cause } = fileSystemCause(path, code, options.readonly) ?? causeOfCode(code, message);
  return new DatabaseFileError(path, `cannot ${verb} the database ${path}: ${cause}`, { cause: err });
}

/**
 * Permission-like failures are explained by the file system first: SQLite reports a read-only
 * file, a read-only directory and a read-only `-shm` left by another user alike.
 */
function fileSystemCause(
  path: string,
  code: string,
  readonly: boolean,
): { verb: string; cause: string } | null {
  if (path === ':memory:') return null;
  if (!/^(SQLITE_READONLY|SQLITE_CANTOPEN|SQLITE_PERM|SQLITE_AUTH|EACCES|EPERM)/.test(code)) return null;
  const file = statOrNull(path);
  if (file?.isDirectory()) return { verb: 'open', cause: 'it is a directory' };
  // A missing file that SQLite was not asked to create (or could have created, had it been asked).
  const dir = statOrNull(dirname(path));
  if (!file && dir?.isDirectory() && (readonly || writable(dirname(path))))
    return { verb: 'open', cause: 'the file does not exist' };
  if (readonly) return null;
  const cause = unwritableCause(path);
  return cause === null ? null : { verb: 'write', cause };
}
