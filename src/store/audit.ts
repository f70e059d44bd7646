import {
  type AuditRow,
  auditDetailText,
  type NewAuditEntry,
  type NewRefusal,
  overflowRefusal,
  type RefusalWindow,
  refusalWindowStart,
  refusalWrite,
} from '../domain/console';
import type { Db } from './database';

/**
 * The `console_audit` table (migrations 0008, 0011): what was done through the console, by whom,
 * from where, and what was refused (aggregated: see {@link auditRepo} `refuse`).
 */

// The shapes and the masking rule shared with cluster mode (cluster/pg-console-sessions.ts):
// domain/console.ts.
export { AUDIT_ACTIONS, type AuditAction, type AuditRow, type NewAuditEntry } from '../domain/console';

const AUDIT_COLUMNS = 'id, at, role, session, action, target, detail, ip, outcome, reason, times, last_at';

export function auditRepo(db: Db) {
  const insert = db.prepare<
    [string, string | null, string | null, string, string | null, string | null, string | null]
  >('INSERT INTO console_audit (at, role, session, action, target, detail, ip) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const page = db.prepare<[number, number], AuditRow>(
    `SELECT ${AUDIT_COLUMNS} FROM console_audit WHERE id < ? ORDER BY id DESC LIMIT ?`,
  );
  // One read of the refusal's window (domain/console.ts refusalWrite): the newest row of the same
  // refusal, of its overflow, and how many rows the window has. `ip IS ?`: null equals null.
  const newest = `SELECT id FROM console_audit WHERE outcome = 'refused' AND at >= @start AND reason = @reason
    AND target = ? AND ip IS ? AND session IS ? ORDER BY id DESC LIMIT 1`;
  const window = db.prepare<unknown[], RefusalWindow>(
    `SELECT (${newest}) AS same, (${newest}) AS overflow,
       (SELECT count(*) FROM console_audit WHERE outcome = 'refused' AND at >= @start) AS rows`,
  );
  const repeat = db.prepare<[string, number]>(
    'UPDATE console_audit SET times = times + 1, last_at = ? WHERE id = ?',
  );
  const insertRefusal = db.prepare<[NewRefusal]>(
    `INSERT INTO console_audit (at, role, session, action, target, ip, outcome, reason, times)
     VALUES (@at, @role, @session, 'refused', @route, @ip, 'refused', @reason, 1)`,
  );
  return {
    record(e: NewAuditEntry): void {
      insert.run(e.at, e.role, e.session, e.action, e.target, auditDetailText(e.detail), e.ip);
    },
    /** A refused request, aggregated (domain/console.ts refusalWrite). */
    refuse: db.transaction((r: NewRefusal): void => {
      const o = overflowRefusal(r);
      const w = window.get(
        { start: refusalWindowStart(r.at), reason: r.reason },
        r.route,
        r.ip,
        r.session,
        o.route,
        o.ip,
        o.session,
      )!;
      const write = refusalWrite(r, w);
      if ('add' in write) repeat.run(r.at, write.add);
      else insertRefusal.run(write.insert);
    }),
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page: (beforeId: number, limit: number): AuditRow[] => page.all(beforeId, limit),
  };
}

export type AuditRepo = ReturnType<typeof auditRepo>;
