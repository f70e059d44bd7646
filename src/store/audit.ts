import {
  type AuditRow,
  auditDetailText,
  type NewAuditEntry,
  type NewRefusal,
  overflowRefusal,
  REFUSAL_ROWS_PER_WINDOW,
  refusalWindowStart,
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
  type Key = { start: string; reason: string; route: string; ip: string | null; session: string | null };
  // The window's row for the same refusal (the newest, should two replicas have raced).
  const repeat = db.prepare<[Key & { at: string }]>(
    `UPDATE console_audit SET times = times + 1, last_at = @at WHERE id = (
       SELECT id FROM console_audit WHERE outcome = 'refused' AND at >= @start AND reason = @reason
         AND target = @route AND ip IS @ip AND session IS @session ORDER BY id DESC LIMIT 1)`,
  );
  const rowsInWindow = db.prepare<[string], { n: number }>(
    `SELECT count(*) AS n FROM console_audit WHERE outcome = 'refused' AND at >= ?`,
  );
  const insertRefusal = db.prepare<[NewRefusal]>(
    `INSERT INTO console_audit (at, role, session, action, target, ip, outcome, reason, times)
     VALUES (@at, @role, @session, 'refused', @route, @ip, 'refused', @reason, 1)`,
  );
  const add = (r: NewRefusal, start: string): boolean =>
    repeat.run({ at: r.at, start, reason: r.reason, route: r.route, ip: r.ip, session: r.session }).changes >
    0;
  return {
    record(e: NewAuditEntry): void {
      insert.run(e.at, e.role, e.session, e.action, e.target, auditDetailText(e.detail), e.ip);
    },
    /**
     * A refused request: added to the window's row for the same refusal, else a new row while the
     * window has fewer than REFUSAL_ROWS_PER_WINDOW, else added to the window's overflow row of its
     * reason (domain/console.ts).
     */
    refuse: db.transaction((r: NewRefusal): void => {
      const start = refusalWindowStart(r.at);
      if (add(r, start)) return;
      const full = (rowsInWindow.get(start)?.n ?? 0) >= REFUSAL_ROWS_PER_WINDOW;
      const row = full ? overflowRefusal(r) : r;
      if (full && add(row, start)) return;
      insertRefusal.run(row);
    }),
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page: (beforeId: number, limit: number): AuditRow[] => page.all(beforeId, limit),
  };
}

export type AuditRepo = ReturnType<typeof auditRepo>;
