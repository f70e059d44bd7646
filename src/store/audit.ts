import { type AuditRow, auditDetailText, type NewAuditEntry } from '../domain/console';
import type { Db } from './database';

/** The `console_audit` table (migration 0008): what was done through the console, by whom, from where. */

// The shapes and the masking rule shared with cluster mode (cluster/pg-console-sessions.ts):
// domain/console.ts.
export { AUDIT_ACTIONS, type AuditAction, type AuditRow, type NewAuditEntry } from '../domain/console';

export function auditRepo(db: Db) {
  const insert = db.prepare<
    [string, string | null, string | null, string, string | null, string | null, string | null]
  >('INSERT INTO console_audit (at, role, session, action, target, detail, ip) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const page = db.prepare<[number, number], AuditRow>(
    `SELECT id, at, role, session, action, target, detail, ip FROM console_audit WHERE id < ? ORDER BY id DESC LIMIT ?`,
  );
  return {
    record(e: NewAuditEntry): void {
      insert.run(e.at, e.role, e.session, e.action, e.target, auditDetailText(e.detail), e.ip);
    },
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page: (beforeId: number, limit: number): AuditRow[] => page.all(beforeId, limit),
  };
}

export type AuditRepo = ReturnType<typeof auditRepo>;
