import type { ConsoleSessionRow, NewConsoleSession, TokenFingerprints } from '../domain/console';
import type { Db } from './database';

/**
 * The `console_sessions` table (migrations 0008, 0011): one row per signed-in console browser, keyed
 * by the SHA-256 of its session id (the id itself is only in the cookie), with the fingerprint of
 * the token that opened it. Times are ISO 8601 UTC strings, whose text order is their time order.
 */

// The shapes shared with cluster mode (cluster/pg-console-sessions.ts): domain/console.ts.
export type { ConsoleRole, ConsoleSessionRow, NewConsoleSession } from '../domain/console';

export function consoleSessionsRepo(db: Db) {
  const insert = db.prepare<[string, string, string, string, string, string]>(
    `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen, token_fp) VALUES (?, ?, ?, ?, ?, ?)`,
  );
  // An expired row is as good as none: it is never read back as a session.
  const live = db.prepare<[string, string], ConsoleSessionRow>(
    'SELECT id_hash, role, created_at, expires_at, last_seen, token_fp FROM console_sessions WHERE id_hash = ? AND expires_at > ?',
  );
  const touch = db.prepare<[string, string]>('UPDATE console_sessions SET last_seen = ? WHERE id_hash = ?');
  const remove = db.prepare<[string]>('DELETE FROM console_sessions WHERE id_hash = ?');
  const pruneExpired = db.prepare<[string]>('DELETE FROM console_sessions WHERE expires_at <= ?');
  // Not opened by their role's configured token: '' for a role without one, which no fingerprint equals.
  const endOthers = db.prepare<[{ admin: string; viewer: string }]>(
    `DELETE FROM console_sessions WHERE token_fp IS NULL
       OR NOT ((role = 'admin' AND token_fp = @admin) OR (role = 'viewer' AND token_fp = @viewer))`,
  );
  const endAll = db.prepare('DELETE FROM console_sessions');
  return {
    create(s: NewConsoleSession): void {
      insert.run(s.idHash, s.role, s.now, s.expiresAt, s.now, s.tokenFp);
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
    /** Removes every session its role's configured token did not open (rotated or removed); how many. */
    endOthers: (fps: TokenFingerprints): number =>
      endOthers.run({ admin: fps.admin ?? '', viewer: fps.viewer ?? '' }).changes,
    /** Removes every session (everyone signed out); returns how many. */
    endAll: (): number => endAll.run().changes,
  };
}

export type ConsoleSessionsRepo = ReturnType<typeof consoleSessionsRepo>;
