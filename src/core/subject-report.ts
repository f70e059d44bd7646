import type { ScrubOutcome } from './store-port';
import type { ErasureSummary } from './subject-erase';
import { type ExportPlace, subjectExport } from './subject-export';
import type { SubjectHoldings } from './subject-find';

/**
 * One person, everywhere the receiver put their data (issue 45, docs/privacy.md), as `subject
 * find|export|erase` and `/admin/subjects/*` and `/console/subjects` answer it: what each place
 * holds and (erase) lost, counted and shown the same way by the command, the admin API and the
 * console. Pure: src/subject-places.ts runs the rules on each place and builds the report.
 */

export type SubjectAction = 'find' | 'export' | 'erase';

export interface SubjectRun {
  action: SubjectAction;
  /** 11 digits, check digits verified (domain/subject.ts parseSubjectCpf). */
  cpf: string;
  /** Erase: why (recorded with the erasure and in the audit). */
  reason?: string;
  /** Who asked: recorded in the audit and the erasure. */
  by: string;
  /**
   * Who asked, as the audit row names them when it is not `by` alone (the admin API, the console):
   * the console session's tag, the client's address, the person (null: a token's console session).
   * @default person `by`, no session, no address (a command)
   */
  audit?: { person: string | null; session: string | null; ip: string | null };
  /** Erase: rewrite the files (VACUUM) when the raw scan still finds copies. */
  vacuum: boolean;
  erasureId?: string;
  now: Date;
}

/** What one place holds, and (erase) what it lost. */
export interface PlaceReport {
  /** The log's name, or a file's path. */
  place: string;
  hash: string;
  /** Which key the hash is under (sqlite/subject-journal.ts keyCheck). */
  keyCheck: string;
  holdings: SubjectHoldings;
  /** Copies of the CPF in the file's raw bytes (SQLite files); null for PostgreSQL. */
  rawCopies: number | null;
  erasure?: ErasureSummary;
  scrub?: ScrubOutcome;
  /** After the erasure: what is left (the legal-hold set). */
  after?: SubjectHoldings;
}

export interface SubjectReport {
  log: PlaceReport;
  spool: PlaceReport | null;
  backups: (PlaceReport | { place: string; missing: true })[];
  /** The journal appended to (SQLite mode, erase). */
  journal: string | null;
}

/** One person's run on every place a process reaches (src/subject-places.ts builds it). */
export type SubjectService = (run: SubjectRun) => Promise<SubjectReport>;

/** Counts per place of one {@link PlaceReport}, as `find` shows them. */
export function countsOf(p: PlaceReport) {
  const h = p.after ?? p.holdings;
  return {
    proposals: h.proposals.length,
    proposals_with_personal_data: h.proposals.filter((r) => r.nu_cpf !== null).length,
    events: h.events.length,
    events_with_body: h.events.filter((e) => e.body !== null).length,
    averbacoes: h.averbacoes.length,
    messages: h.messages.length,
    deliveries: h.deliveries.length,
    recipients: [...new Set(h.sharing.map((s) => `${s.channel}:${s.recipient}`))].sort(),
    erasures: h.erasures.map((e) => e.erasure_id),
    notices: h.notices.map((n) => ({
      erasure_id: n.erasure_id,
      destination: n.destination,
      status: n.status,
    })),
    raw_copies: p.rawCopies,
  };
}

/** A place's counts, with what an erasure changed there. */
function placeJson(p: PlaceReport) {
  return {
    place: p.place,
    ...countsOf(p),
    ...(p.erasure === undefined ? {} : { erasure: p.erasure, scrub: p.scrub }),
  };
}

/** The report as `subject find|erase --json` prints it and `/admin/subjects/find|erase` answer it. */
export function subjectJson(report: SubjectReport, action: SubjectAction) {
  return {
    action,
    log: placeJson(report.log),
    spool: report.spool && placeJson(report.spool),
    backups: report.backups.map((b) => ('missing' in b ? b : placeJson(b))),
    journal: report.journal,
  };
}

/** The places an export shows: the log, the spool, the backups found (a missing one holds nothing). */
export function exportPlaces(report: SubjectReport): ExportPlace[] {
  const places: ExportPlace[] = [report.log, ...(report.spool === null ? [] : [report.spool])];
  for (const b of report.backups) if (!('missing' in b)) places.push(b);
  return places;
}

/** The export document (core/subject-export.ts) of a report. */
export function subjectExportOf(report: SubjectReport, cpf: string, generatedAt: string) {
  return subjectExport(cpf, exportPlaces(report), generatedAt);
}
