import { maskCpfsInText } from '../domain/privacy';
import type { ConsoleRole } from './console-sessions';
import type { Db } from './database';

/** The `console_audit` table (migration 0008): what was done through the console, by whom, from where. */

export const AUDIT_ACTIONS = [
  'replay_event',
  'replay_bulk',
  'forward_replay',
  'forward_replay_bulk',
  'forward_pause',
  'forward_resume',
  'sign_in',
  'sign_out',
  'sign_in_failed',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export interface NewAuditEntry {
  at: string;
  /** null for a failed sign-in (no one is known). */
  role: ConsoleRole | null;
  /** The session's short tag (never its id); null when there is no session. */
  session: string | null;
  action: AuditAction;
  target: string | null;
  /** Stored as JSON with any CPF in it masked (a filter may name one): the filter used, how many rows. */
  detail: Record<string, unknown> | null;
  ip: string | null;
}

export interface AuditRow {
  id: number;
  at: string;
  role: ConsoleRole | null;
  session: string | null;
  action: string;
  target: string | null;
  detail: string | null;
  ip: string | null;
}

export function auditRepo(db: Db) {
  const insert = db.prepare<
    [string, string | null, string | null, string, string | null, string | null, string | null]
  >('INSERT INTO console_audit (at, role, session, action, target, detail, ip) VALUES (?, ?, ?, ?, ?, ?, ?)');
  const page = db.prepare<[number, number], AuditRow>(
    `SELECT id, at, role, session, action, target, detail, ip FROM console_audit WHERE id < ? ORDER BY id DESC LIMIT ?`,
  );
  return {
    record(e: NewAuditEntry): void {
      insert.run(
        e.at,
        e.role,
        e.session,
        e.action,
        e.target,
        e.detail === null ? null : maskCpfsInText(JSON.stringify(e.detail)),
        e.ip,
      );
    },
    /** Newest first, entries with an id below `beforeId` (keyset). */
    page: (beforeId: number, limit: number): AuditRow[] => page.all(beforeId, limit),
  };
}

export type AuditRepo = ReturnType<typeof auditRepo>;
