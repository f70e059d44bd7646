/**
 * Base class of the errors this project raises on purpose. Each carries a stable `code` that
 * the HTTP layer maps to a status and the commands map to one line on stderr.
 */
export class ConsigError extends Error {
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    // Keep the subclass's name (and `instanceof`) after compilation to ES5-style classes.
    this.name = new.target.name;
    Object.setPrototypeOf(this, new.target.prototype);
  }
}

/** A configuration value is missing or invalid; `variable` names it. */
export class ConfigError extends ConsigError {
  readonly variable: string;

  constructor(variable: string, message: string) {
    super('CONFIG_INVALID', `${variable}: ${message}`);
    this.variable = variable;
  }
}

/** The SQLite write (or read) failed: disk full, database locked, closed. */
export class StorageError extends ConsigError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('STORAGE_UNAVAILABLE', message, options);
  }
}

/**
 * The database file cannot be used at all (not writable, not a database, damaged, disk full):
 * raised at open, so a command or `serve` stops with one line naming `path` and the cause.
 */
export class DatabaseFileError extends StorageError {
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.path = path;
  }
}

/** The database and the code disagree about migrations. */
export class MigrationError extends ConsigError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('MIGRATION_FAILED', message, options);
  }
}

/** A command was called with something it cannot use (unknown id, bad flag value). */
export class UsageError extends ConsigError {
  constructor(message: string) {
    super('USAGE', message);
  }
}

/**
 * Another connection holds the lock and the wait for it ran out; nothing was written, try later:
 * SQLite's SQLITE_BUSY (or _LOCKED), PostgreSQL's lock_not_available (55P03, lock_timeout).
 */
export function isLockBusy(err: unknown): boolean {
  return /^(SQLITE_(BUSY|LOCKED)|55P03$)/.test(String((err as { code?: unknown } | null)?.code));
}
