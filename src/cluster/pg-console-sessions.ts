import {
  type AuditRow,
  auditDetailText,
  type ConsoleSessionRow,
  type NewAuditEntry,
  type NewConsoleSession,
  type NewRefusal,
  overflowRefusal,
  refusalWindowStart,
  refusalWrite,
  type TokenFingerprints,
} from '../domain/console';
import { type PgReader, rows } from './pg-reads';
import type { Sql } from './sql';

/**
 * The console's own tables in cluster mode (migrations-pg/0004, 0005): `console_sessions`,
 * `console_audit` and `console_sign_in_failures`, SQLite's store/console-sessions.ts, store/audit.ts
 * and store/console-throttle.ts on PostgreSQL. Shared by every replica: a browser signed in through
 * one is signed in at all of them, signing out at one signs out everywhere, a replica started with a
 * rotated token ends the old token's sessions for all, and the sign-in throttle counts an address's
 * wrong tokens at any replica. The session id itself is never stored, only its SHA-256.
 */

/** A new session (its creation time is its first last_seen). */
export async function createSession(sql: Sql, s: NewConsoleSession): Promise<void> {
  await sql.query(
    `INSERT INTO console_sessions (id_hash, role, created_at, expires_at, last_seen, token_fp)
     VALUES ($1, $2, $3::timestamptz, $4::timestamptz, $3::timestamptz, $5)`,
    [s.idHash, s.role, s.now, s.expiresAt, s.tokenFp],
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
    `SELECT id_hash, role, created_at, expires_at, last_seen, token_fp FROM console_sessions
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

async function deleted(sql: Sql, where: string, params: unknown[]): Promise<number> {
  const [row] = await sql.query<{ n: string }>(
    `WITH gone AS (DELETE FROM console_sessions WHERE ${where} RETURNING 1) SELECT count(*) AS n FROM gone`,
    params,
  );
  return Number(row?.n ?? 0);
}

/** Removes every session expired at `now`; returns how many. */
export function pruneSessions(sql: Sql, now: string): Promise<number> {
  return deleted(sql, 'expires_at <= $1::timestamptz', [now]);
}

/** Removes every session its role's configured token did not open (rotated or removed); how many. */
export function endOtherTokensSessions(sql: Sql, fps: TokenFingerprints): Promise<number> {
  // '' for a role without a token, which no fingerprint equals.
  return deleted(
    sql,
    `token_fp IS NULL OR NOT ((role = 'admin' AND token_fp = $1) OR (role = 'viewer' AND token_fp = $2))`,
    [fps.admin ?? '', fps.viewer ?? ''],
  );
}

/** Removes every session (everyone signed out, at every replica); returns how many. */
export function endAllSessions(sql: Sql): Promise<number> {
  return deleted(sql, 'true', []);
}

/** The address's wrong tokens in the window that began after `windowStart`, if any. */
export async function readSignInFailures(
  db: PgReader,
  address: string,
  windowStart: string,
): Promise<{ since: string; failures: number } | undefined> {
  const [row] = await rows<{ since: string; failures: number }>(
    db,
    `SELECT since, failures FROM console_sign_in_failures WHERE address = $1 AND since > $2::timestamptz`,
    [address, windowStart],
  );
  return row;
}

/** One more wrong token from an address (store/console-throttle.ts), past windows forgotten. */
export async function recordSignInFailure(
  sql: Sql,
  address: string,
  now: string,
  windowStart: string,
): Promise<void> {
  await sql.query('DELETE FROM console_sign_in_failures WHERE since <= $1::timestamptz', [windowStart]);
  await sql.query(
    `INSERT INTO console_sign_in_failures (address, since, failures) VALUES ($1, $2::timestamptz, 1)
     ON CONFLICT (address) DO UPDATE SET
       failures = CASE WHEN console_sign_in_failures.since <= $3::timestamptz THEN 1
                       ELSE console_sign_in_failures.failures + 1 END,
       since = CASE WHEN console_sign_in_failures.since <= $3::timestamptz THEN $2::timestamptz
                    ELSE console_sign_in_failures.since END`,
    [address, now, windowStart],
  );
}

export async function clearSignInFailures(sql: Sql, address: string): Promise<void> {
  await sql.query('DELETE FROM console_sign_in_failures WHERE address = $1', [address]);
}

/** The newest refused row of the window matching a refusal's reason, route, address and session. */
const NEWEST_REFUSED = (n: number) =>
  `SELECT id FROM console_audit WHERE outcome = 'refused' AND at >= $1::timestamptz AND reason = $2
     AND target = $${n} AND ip IS NOT DISTINCT FROM $${n + 1} AND session IS NOT DISTINCT FROM $${n + 2}
   ORDER BY id DESC LIMIT 1`;

/** A refused request, aggregated as in SQLite (domain/console.ts refusalWrite). */
export async function recordRefusal(sql: Sql, r: NewRefusal): Promise<void> {
  const o = overflowRefusal(r);
  const [w] = await sql.query<{ same: string | null; overflow: string | null; rows: string }>(
    `SELECT (${NEWEST_REFUSED(3)}) AS same, (${NEWEST_REFUSED(6)}) AS overflow,
       (SELECT count(*) FROM console_audit WHERE outcome = 'refused' AND at >= $1::timestamptz) AS rows`,
    [refusalWindowStart(r.at), r.reason, r.route, r.ip, r.session, o.route, o.ip, o.session],
  );
  const id = (v: string | null | undefined) => (v == null ? null : Number(v));
  const write = refusalWrite(r, { same: id(w?.same), overflow: id(w?.overflow), rows: Number(w?.rows ?? 0) });
  if ('add' in write) {
    await sql.query('UPDATE console_audit SET times = times + 1, last_at = $1::timestamptz WHERE id = $2', [
      r.at,
      write.add,
    ]);
    return;
  }
  const row = write.insert;
  await sql.query(
    `INSERT INTO console_audit (at, role, session, action, target, ip, outcome, reason, times)
     VALUES ($1::timestamptz, $2, $3, 'refused', $4, $5, 'refused', $6, 1)`,
    [row.at, row.role, row.session, row.route, row.ip, row.reason],
  );
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
    `SELECT id, at, role, session, action, target, detail, ip, outcome, reason, times, last_at
     FROM console_audit WHERE id < $1 ORDER BY id DESC LIMIT $2`,
    [beforeId, limit],
  );
}
