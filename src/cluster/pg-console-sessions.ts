import {
  type AuditRow,
  auditDetailText,
  type ConsoleSessionRow,
  type NewAuditEntry,
  type NewConsoleSession,
} from '../domain/console';
import { type PgReader, rows } from './pg-reads';
import type { Sql } from './sql';

/**
 * The console's own tables in cluster mode (migrations-pg/0004): `console_sessions` and
 * `console_audit`, SQLite's store/console-sessions.ts and store/audit.ts on PostgreSQL. Shared by
 * every replica: a browser signed in through one is signed in at all of them, and signing out at
 * one signs out everywhere. The session id itself is never stored, only its SHA-256.
 */

/** A new session (its creation time is its first last_seen). */
export async function createSession(sql: Sql, s: NewConsoleSession): Promise<void> {
  await sql.query(
    `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen)
     VALUES ($1, $2, $3::timestamptz, $4::timestamptz, $3::timestamptz)`,
    [s.idHash, s.role, s.now, s.expiresAt],
  );
}

/** The session unless it is unknown or expired at `now` (an expired row is as good as none). */
export async function liveSession(
  db: PgReader,
  idHash: string,
  now: string,
): Promise<ConsoleSessionRow | undefined> {
  const [row] = await rows<ConsoleSessionRow>(
    db,
    `SELECT id_hash, role, created_at, expires_at, last_seen FROM console_sessions
     WHERE id_hash = $1 AND expires_at > $2::timestamptz`,
    [idHash, now],
  );
  return row;
}

export async function touchSession(sql: Sql, idHash: string, now: string): Promise<void> {
  await sql.query('UPDATE console_sessions SET last_seen = $2::timestamptz WHERE id_hash = $1', [
    idHash,
    now,
  ]);
}

export async function removeSession(sql: Sql, idHash: string): Promise<void> {
  await sql.query('DELETE FROM console_sessions WHERE id_hash = $1', [idHash]);
}

/** Removes every session expired at `now`; returns how many. */
export async function pruneSessions(sql: Sql, now: string): Promise<number> {
  const [row] = await sql.query<{ n: string }>(
    `WITH gone AS (DELETE FROM console_sessions WHERE expires_at <= $1::timestamptz RETURNING 1)
     SELECT count(*) AS n FROM gone`,
    [now],
  );
  return Number(row?.n ?? 0);
}

/** Records an action (its detail as JSON with any CPF masked, as in SQLite). */
export async function recordAudit(sql: Sql, e: NewAuditEntry): Promise<void> {
  await sql.query(
    `INSERT INTO console_audit (at, role, session, action, target, detail, ip)
     VALUES ($1::timestamptz, $2, $3, $4, $5, $6, $7)`,
    [e.at, e.role, e.session, e.action, e.target, auditDetailText(e.detail), e.ip],
  );
}

/** Newest first, entries with an id below `beforeId` (keyset). */
export function readAuditPage(db: PgReader, beforeId: number, limit: number): Promise<AuditRow[]> {
  return rows<AuditRow>(
    db,
    `SELECT id, at, role, session, action, target, detail, ip FROM console_audit
     WHERE id < $1 ORDER BY id DESC LIMIT $2`,
    [beforeId, limit],
  );
}
