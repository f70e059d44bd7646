import type { ConsoleSessionRow, NewConsoleSession } from '../domain/console';
import type { Db } from './database';

/**
 * The `console_sessions` table (migration 0008): one row per signed-in console browser, keyed by
 * the SHA-256 of its session id (the id itself is only in the cookie). Times are ISO 8601 UTC
 * strings, whose text order is their time order.
 */

// The shapes shared with cluster mode (cluster/pg-console-sessions.ts): domain/console.ts.
export type { ConsoleRole, ConsoleSessionRow, NewConsoleSession } from '../domain/console';

export function consoleSessionsRepo(db: Db) {
  const insert = db.prepare<[string, string, string, string, string]>(
    `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen) VALUES (?, ?, ?, ?, ?)`,
  );
  // An expired row is as good as none: it is never read back as a session.
  const live = db.prepare<[string, string], ConsoleSessionRow>(
    'SELECT id_hash, role, created_at, expires_at, last_seen FROM console_sessions WHERE id_hash = ? AND expires_at > ?',
  );
  const touch = db.prepare<[string, string]>('UPDATE console_sessions SET last_seen = ? WHERE id_hash = ?');
  const remove = db.prepare<[string]>('DELETE FROM console_sessions WHERE id_hash = ?');
  const pruneExpired = db.prepare<[string]>('DELETE FROM console_sessions WHERE expires_at <= ?');
  return {
    create(s: NewConsoleSession): void {
      insert.run(s.idHash, s.role, s.now, s.expiresAt, s.now);
    },
    /** The session unless it is unknown or expired at `now`. */
    live: (idHash: string, now: string): ConsoleSessionRow | undefined => live.get(idHash, now),
    touch: (idHash: string, now: string): void => {
      touch.run(now, idHash);
    },
    remove: (idHash: string): void => {
      remove.run(idHash);
    },
    /** Removes every session expired at `now`; returns how many. */
    pruneExpired: (now: string): number => pruneExpired.run(now).changes,
  };
}

export type ConsoleSessionsRepo = ReturnType<typeof consoleSessionsRepo>;
