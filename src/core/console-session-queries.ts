import {
  type AuditRow,
  auditDetailText,
  type ConsoleSessionRow,
  type NewAuditEntry,
  type NewConsoleSession,
  type NewRefusal,
  overflowRefusal,
  type RefusalWindow,
  refusalWindowStart,
  refusalWrite,
  type TokenFingerprints,
} from '../domain/console';
import { END_OTHER_SESSIONS, endOtherSessionsParams } from '../domain/sql/console-session-statements';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';

/**
 * The console's own tables, written once for both stores (SQLite migrations 0008, 0011;
 * migrations-pg/0004, 0005): `console_sessions` (one row per signed-in browser, keyed by the SHA-256
 * of its session id, which itself is only in the cookie), `console_sign_in_failures` (the sign-in
 * throttle, http/console/throttle.ts, in the log so that a restart does not reset it) and
 * `console_audit` (what was done through the console, and what was refused, aggregated). In cluster
 * mode every replica shares them: a browser signed in at one is signed in at all, signing out
 * anywhere signs out everywhere, and the throttle counts an address's wrong tokens at any replica.
 * Instants are ISO-8601 UTC text, whose text order is their time order in SQLite.
 */

const SESSION_COLUMNS = 'id_hash, role, created_at, expires_at, last_seen, token_fp, subject, name, email';
const AUDIT_COLUMNS =
  'id, at, role, session, person, action, target, detail, ip, outcome, reason, times, last_at';

export function consoleSessions(sql: StoreSql) {
  return {
    /** A new session (its creation time is its first last_seen). */
    create: async (s: NewConsoleSession): Promise<void> => {
      await sql.write((q) =>
        q.run(
          `INSERT INTO console_sessions (${SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
          [
            s.idHash,
            s.role,
            s.now,
            s.expiresAt,
            s.now,
            s.tokenFp,
            s.person?.subject ?? null,
            s.person?.name ?? null,
            s.person?.email ?? null,
          ],
        ),
      );
    },
    /** The session unless it is unknown or expired at `now` (an expired row is as good as none). */
    live: (idHash: string, now: string): Promise<ConsoleSessionRow | undefined> =>
      sql.read(async (q) => {
        const [row] = await q.rows<ConsoleSessionRow>(
          `SELECT ${SESSION_COLUMNS} FROM console_sessions WHERE id_hash = $1 AND expires_at > $2`,
          [idHash, now],
        );
        return row;
      }),
    touch: async (idHash: string, now: string): Promise<void> => {
      await sql.write((q) =>
        q.run('UPDATE console_sessions SET last_seen = $1 WHERE id_hash = $2', [now, idHash]),
      );
    },
    remove: async (idHash: string): Promise<void> => {
      await sql.write((q) => q.run('DELETE FROM console_sessions WHERE id_hash = $1', [idHash]));
    },
    /** Removes every session expired at `now`; returns how many. */
    pruneExpired: (now: string): Promise<number> =>
      sql.write((q) => q.run('DELETE FROM console_sessions WHERE expires_at <= $1', [now])),
    /** Removes every session its role's configured token did not open (rotated or removed); how many. */
    endOthers: (fps: TokenFingerprints): Promise<number> =>
      sql.write((q) => q.run(END_OTHER_SESSIONS, endOtherSessionsParams(fps))),
    /**
     * The console's key `name` (base64url), shared by every process on the log: the one kept, or
     * `candidate` when none is yet (the first writer's wins; the others read it back).
     */
    key: (name: string, candidate: string, now: string): Promise<string> =>
      sql.write(async (q) => {
        await q.run(
          'INSERT INTO console_keys (name, secret, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING',
          [name, candidate, now],
        );
        const [row] = await q.rows<{ secret: string }>('SELECT secret FROM console_keys WHERE name = $1', [
          name,
        ]);
        return (row as { secret: string }).secret;
      }),
    /** Removes every session (everyone signed out, at every replica); returns how many. */
    endAll: (): Promise<number> => sql.write(endAllSessions),
  };
}

function endAllSessions(q: StoreQuery): Promise<number> {
  return q.run('DELETE FROM console_sessions');
}

/** Ends every console session and records `audit(ended)`, in one transaction; returns how many. */
export function endSessionsAudited(sql: StoreSql, audit: (ended: number) => NewAuditEntry): Promise<number> {
  return sql.write(async (q) => {
    const ended = await endAllSessions(q);
    await recordAudit(q, audit(ended));
    return ended;
  });
}

/** One more wrong token from an address: a window that began at or before `$3` begins again `$2`. */
const FAILED = `INSERT INTO console_sign_in_failures (address, since, failures) VALUES ($1, $2, 1)
  ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN console_sign_in_failures.since <= $3 THEN 1 ELSE console_sign_in_failures.failures + 1 END,
    since = CASE WHEN console_sign_in_failures.since <= $3 THEN excluded.since ELSE console_sign_in_failures.since END`;

/** The sign-in throttle's counts (http/console/throttle.ts), shared by every process on the log. */
export function signInFailures(sql: StoreSql) {
  return {
    /** The address's wrong tokens in the window that began after `windowStart`, if any. */
    current: (
      address: string,
      windowStart: string,
    ): Promise<{ since: string; failures: number } | undefined> =>
      sql.read(async (q) => {
        const [row] = await q.rows<{ since: string; failures: number }>(
          'SELECT since, failures FROM console_sign_in_failures WHERE address = $1 AND since > $2',
          [address, windowStart],
        );
        return row;
      }),
    /**
     * One more, at `now` (a window that began at or before `windowStart` begins again); the
     * addresses whose window is over are forgotten.
     */
    failed: (address: string, now: string, windowStart: string): Promise<void> =>
      sql.write(async (q) => {
        await q.run('DELETE FROM console_sign_in_failures WHERE since <= $1', [windowStart]);
        await q.run(FAILED, [address, now, windowStart]);
      }),
    succeeded: async (address: string): Promise<void> => {
      await sql.write((q) => q.run('DELETE FROM console_sign_in_failures WHERE address = $1', [address]));
    },
  };
}

/** Records an action (its detail as JSON with any CPF masked). */
function recordAudit(q: StoreQuery, e: NewAuditEntry): Promise<number> {
  return q.run(
    `INSERT INTO console_audit (at, role, session, person, action, target, detail, ip)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [e.at, e.role, e.session, e.person ?? null, e.action, e.target, auditDetailText(e.detail), e.ip],
  );
}

/** The newest refused row of the window ($1) with the reason ($2), route, address and session ($n…). */
const newestRefused = (n: number) =>
  `SELECT id FROM console_audit WHERE outcome = 'refused' AND at >= $1 AND reason = $2
     AND target = $${n} AND ip IS NOT DISTINCT FROM $${n + 1} AND session IS NOT DISTINCT FROM $${n + 2}
   ORDER BY id DESC LIMIT 1`;

/**
 * One read of a refusal's window (domain/console.ts refusalWrite): the newest row of the same
 * refusal, of its overflow, and how many rows the window has.
 */
const REFUSAL_WINDOW = `SELECT (${newestRefused(3)}) AS same, (${newestRefused(6)}) AS overflow,
  (SELECT count(*) FROM console_audit WHERE outcome = 'refused' AND at >= $1) AS rows`;

/** A refused request, aggregated (domain/console.ts refusalWrite), in one transaction. */
async function recordRefusal(q: StoreQuery, r: NewRefusal): Promise<void> {
  const o = overflowRefusal(r);
  const [w] = await q.rows<RefusalWindow>(REFUSAL_WINDOW, [
    refusalWindowStart(r.at),
    r.reason,
    r.route,
    r.ip,
    r.session,
    o.route,
    o.ip,
    o.session,
  ]);
  const write = refusalWrite(r, w ?? { same: null, overflow: null, rows: 0 });
  if ('add' in write) {
    await q.run('UPDATE console_audit SET times = times + 1, last_at = $1 WHERE id = $2', [r.at, write.add]);
    return;
  }
  const row = write.insert;
  await q.run(
    `INSERT INTO console_audit (at, role, session, person, action, target, ip, outcome, reason, times)
     VALUES ($1, $2, $3, $4, 'refused', $5, $6, 'refused', $7, 1)`,
    [row.at, row.role, row.session, row.person ?? null, row.route, row.ip, row.reason],
  );
}

export function consoleAudit(sql: StoreSql) {
  return {
    record: async (entry: NewAuditEntry): Promise<void> => {
      await sql.write((q) => recordAudit(q, entry));
    },
    /** A refused request, aggregated (domain/console.ts refusalWrite). */
    refuse: (refusal: NewRefusal): Promise<void> => sql.write((q) => recordRefusal(q, refusal)),
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page: (beforeId: number, limit: number): Promise<AuditRow[]> =>
      sql.read((q) =>
        q.rows<AuditRow>(
          `SELECT ${AUDIT_COLUMNS} FROM console_audit WHERE id < $1 ORDER BY id DESC LIMIT $2`,
          [beforeId, limit],
        ),
      ),
  };
}
