import { randomBytes } from 'node:crypto';
import { nonBlankString, own } from '../domain/json';
import { erasureId, parseSubjectCpf } from '../domain/subject';
import type { SubjectAction, SubjectRun } from '../core/subject-report';

/**
 * What `/admin/subjects/*` and `/console/subjects` are asked (issue 45): a CPF in the body, never
 * in the URL (URLs reach access logs), and for an erasure the reason recorded with it. Read the
 * same way by both, refused the same way: the field named, its problem said.
 */

/** The longest reason kept (it is recorded with the erasure and in the audit). */
export const MAX_REASON_CHARS = 1000;

/** What a request asked: the CPF's 11 digits and (erase) the reason; or which field is wrong and why. */
export type SubjectAsk = { cpf: string; reason?: string } | { field: 'cpf' | 'reason'; message: string };

export function subjectAsk(body: unknown, action: SubjectAction): SubjectAsk {
  const given = own(body, 'cpf');
  if (typeof given !== 'string') return { field: 'cpf', message: 'cpf: expected a CPF (a string)' };
  const parsed = parseSubjectCpf(given.slice(0, 40));
  if ('error' in parsed) return { field: 'cpf', message: `cpf: ${parsed.error}` };
  if (action !== 'erase') return { cpf: parsed.cpf };
  const reason = nonBlankString(own(body, 'reason'))?.trim();
  if (reason === undefined)
    return {
      field: 'reason',
      message: 'reason: required to erase (recorded with the erasure: the request it answers)',
    };
  if (reason.length > MAX_REASON_CHARS)
    return { field: 'reason', message: `reason: at most ${MAX_REASON_CHARS} characters` };
  return { cpf: parsed.cpf, reason };
}

/** The run of an ask that was read: who asked, as the audit names them, and (erase) a fresh id. */
export function subjectRun(
  action: SubjectAction,
  ask: { cpf: string; reason?: string },
  who: { by: string; audit: NonNullable<SubjectRun['audit']> },
  now: Date,
): SubjectRun {
  return {
    action,
    cpf: ask.cpf,
    ...(ask.reason === undefined ? {} : { reason: ask.reason }),
    by: who.by,
    audit: who.audit,
    // A running server does not VACUUM its live log or spool (secure_delete zeroed the old rows'
    // space; a VACUUM would hold the file): the command's --vacuum is there for a copy the scan
    // still finds. Backups are rewritten whatever this says (src/subject-places.ts).
    vacuum: false,
    ...(action === 'erase' ? { erasureId: erasureId(randomBytes(16)) } : {}),
    now,
  };
}

/** What the routes say when the server was built without the subject calls (AppDeps.subjects). */
export const SUBJECTS_UNAVAILABLE = 'finding and erasing a person is not available in this server';
