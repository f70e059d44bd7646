import { existsSync } from 'node:fs';
import type { Config } from './config';
import type { ScrubOutcome, SubjectStore } from './core/store-port';
import { adminStore } from './core/store-port';
import type { ErasureSummary } from './core/subject-erase';
import type { SubjectHoldings } from './core/subject-find';
import type { AuditAction } from './domain/console';
import { subjectHash } from './domain/subject';
import { withCommandStore } from './open-store';
import { countInFile } from './store/scrub';
import { openStore } from './store/store';
import { sqliteStorePort } from './store/sqlite-port';
import { appendJournal, journalPath, keyCheck, readJournal } from './store/subject-journal';

/**
 * One person, everywhere the receiver put their data (issue 45, docs/privacy.md): the log (the
 * SQLite file, or PostgreSQL with DATABASE_URL), the spool beside a replica (cluster mode: the file
 * at DATABASE_PATH), the backups `backup` made (SQLite mode), and the erasure journal. The rules
 * are core/subject-*.ts's, run on each place's port; each place hashes the CPF under its own key
 * (a backup older than the key has another), which the command can, holding the CPF.
 */

export interface SubjectRun {
  action: 'find' | 'export' | 'erase';
  /** 11 digits, check digits verified (domain/subject.ts parseSubjectCpf). */
  cpf: string;
  /** Erase: why (recorded with the erasure and in the audit). */
  reason?: string;
  /** Who asked: recorded in the audit and the erasure. */
  by: string;
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
  /** Which key the hash is under (store/subject-journal.ts keyCheck). */
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

/** The text forms the raw scans look for: 11 digits, and 000.000.000-00. */
export const cpfForms = (cpf: string): string[] => [
  cpf,
  `${cpf.slice(0, 3)}.${cpf.slice(3, 6)}.${cpf.slice(6, 9)}-${cpf.slice(9)}`,
];

const AUDIT: Record<SubjectRun['action'], AuditAction> = {
  find: 'subject_find',
  export: 'subject_export',
  erase: 'subject_erase',
};

export async function subjectEverywhere(config: Config, run: SubjectRun): Promise<SubjectReport> {
  const cluster = Boolean(config.cluster);
  const { log, backups } = await withCommandStore(
    config,
    { access: 'write', command: 'subject', spool: run.action === 'erase' },
    async (store) => ({
      log: await onPlace(store.subjects, store.name, run, {
        files: cluster ? [] : [config.databasePath],
        log: true,
      }),
      backups: cluster ? [] : await store.subjects.backups(),
    }),
  );
  // A replica's spool is live (it answers deliveries): rewritten only when asked, like the log.
  const spool =
    cluster && existsSync(config.databasePath) ? await onFile(config.databasePath, run, true) : null;
  const copies: SubjectReport['backups'] = [];
  for (const { path } of backups)
    copies.push(existsSync(path) ? await onFile(path, run, false) : { place: path, missing: true });
  let journal: string | null = null;
  if (!cluster && log.erasure !== undefined) {
    journal = journalPath(config.databasePath);
    appendJournal(config.databasePath, {
      erasure_id: log.erasure.erasure_id,
      subject_hash: log.hash,
      requested_at: run.now.toISOString(),
      key_check: log.keyCheck,
    });
  }
  return { log, spool, backups: copies, journal };
}

/** The person on one SQLite file other than the log: a spool (`live`), a backup. */
async function onFile(path: string, run: SubjectRun, live: boolean): Promise<PlaceReport> {
  const store = openStore(path, { migrate: true, busyTimeoutMs: 5000 });
  try {
    const subjects = adminStore(sqliteStorePort(store)).subjects;
    // A backup is read by no one: rewriting it costs no answer.
    return await onPlace(subjects, path, live ? run : { ...run, vacuum: true }, {
      files: [path],
      log: false,
    });
  } finally {
    store.close();
  }
}

async function onPlace(
  subjects: SubjectStore,
  place: string,
  run: SubjectRun,
  where: { files: readonly string[]; log: boolean },
): Promise<PlaceReport> {
  const key = await subjects.key(run.now);
  await subjects.index(key);
  const hash = subjectHash(key, run.cpf);
  const holdings = await subjects.find(hash);
  const forms = cpfForms(run.cpf);
  const raw = () =>
    where.files.length === 0
      ? null
      : where.files.reduce((n, f) => n + countInFile(f, forms) + countInFile(`${f}-wal`, forms), 0);
  // The log's audit says who asked; a spool's or a backup's would only copy it.
  if (where.log) await subjects.audit(auditEntry(run, hash, holdings));
  const found = { place, hash, keyCheck: keyCheck(key), holdings };
  if (run.action !== 'erase') return { ...found, rawCopies: raw() };
  const erasure = await subjects.erase({
    hash,
    key,
    cpf: run.cpf,
    erasureId: run.erasureId!,
    reason: run.reason ?? '',
    by: run.by,
    now: run.now,
  });
  const scrub = await subjects.scrub(forms, { vacuum: run.vacuum });
  return { ...found, rawCopies: raw(), erasure, scrub, after: await subjects.find(hash) };
}

function auditEntry(run: SubjectRun, hash: string, h: SubjectHoldings) {
  return {
    at: run.now.toISOString(),
    role: 'admin' as const,
    session: null,
    person: run.by,
    action: AUDIT[run.action],
    target: run.erasureId ?? `subject:${hash.slice(0, 12)}`,
    detail: {
      ...(run.reason === undefined ? {} : { reason: run.reason }),
      proposals: h.proposals.length,
      events: h.events.length,
    },
    ip: null,
  };
}

/**
 * A restored copy of a SQLite log holds the people erased after it was taken: each erasure of the
 * journal beside the file (store/subject-journal.ts) that the log does not record is made again,
 * by the subject hash it holds (no CPF: the audit's details are not searched). Run by `serve` when
 * it starts processing. An entry under another key (a copy older than the key) cannot be matched:
 * it is logged as an error naming the erasure, for the operator to erase the person again by CPF.
 */
export async function reapplyJournal(
  databasePath: string,
  subjects: SubjectStore,
  logger: { info(fields: object, message: string): void; error(fields: object, message: string): void },
  now: () => Date = () => new Date(),
): Promise<number> {
  const entries = readJournal(databasePath);
  if (entries.length === 0) return 0;
  const known = new Set((await subjects.erasures()).map((e) => e.erasure_id));
  const key = await subjects.key(now());
  let applied = 0;
  for (const entry of entries) {
    if (known.has(entry.erasure_id)) continue;
    if (entry.key_check !== keyCheck(key)) {
      logger.error(
        { erasure_id: entry.erasure_id },
        'privacy: an erasure of the journal cannot be re-applied (this log has another subject key): erase the person again with `subject erase`',
      );
      continue;
    }
    await subjects.index(key);
    const summary = await subjects.erase({
      hash: entry.subject_hash,
      key,
      cpf: null,
      erasureId: entry.erasure_id,
      reason: 're-applied from the erasure journal',
      by: 'journal',
      now: now(),
    });
    await subjects.scrub([], { vacuum: false });
    logger.info({ ...summary }, 'privacy: re-applied an erasure this log lacked (a restored copy)');
    applied += 1;
  }
  return applied;
}
