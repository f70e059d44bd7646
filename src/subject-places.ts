import { existsSync } from 'node:fs';
import type { Config } from './config';
import type { StorePort, SubjectStore } from './core/store-port';
import { adminStore } from './core/store-port';
import type { SubjectHoldings } from './core/subject-find';
import type { PlaceReport, SubjectReport, SubjectRun, SubjectService } from './core/subject-report';
import type { StoreQuery } from './domain/sql/store-sql';
import type { AuditAction } from './domain/console';
import { cpfForms, subjectHash } from './domain/subject';
import { withCommandStore } from './open-store';
import { countInFileYielding } from './sqlite/scrub';
import { openStore } from './sqlite/store';
import { sqliteStorePort } from './sqlite/sqlite-port';
import { appendJournal, journalPath, keyCheck, readJournal } from './sqlite/subject-journal';

/**
 * One person, everywhere the receiver put their data (issue 45, docs/privacy.md): the log (the
 * SQLite file, or PostgreSQL with DATABASE_URL), the spool beside a replica (cluster mode: the file
 * at DATABASE_PATH), the backups `backup` made (SQLite mode), and the erasure journal. The rules
 * are core/subject-*.ts's, run on each place's port; each place hashes the CPF under its own key
 * (a backup older than the key has another), which the command can, holding the CPF. The command
 * ({@link subjectEverywhere}) opens its own store; a running server ({@link subjectsOnServer}) uses
 * the ports it has; both go through {@link subjectOnPort} and the same backup and journal steps.
 */

export type { PlaceReport, SubjectReport, SubjectRun } from './core/subject-report';

const AUDIT: Record<SubjectRun['action'], AuditAction> = {
  find: 'subject_find',
  export: 'subject_export',
  erase: 'subject_erase',
};

/** `subject find|export|erase` (the command): the log it opens, the spool beside it, the backups. */
export async function subjectEverywhere(config: Config, run: SubjectRun): Promise<SubjectReport> {
  const { log, file, backups, key } = await withCommandStore(
    config,
    { access: 'write', command: 'subject', spool: run.action === 'erase' },
    async (store) => ({
      log: await subjectOnPort(store.subjects, store.name, run, logWhere(store.file)),
      file: store.file,
      backups: store.file === null ? [] : await store.subjects.backups(),
      key: await store.subjects.key(run.now),
    }),
  );
  // A log a server holds (PostgreSQL) leaves DATABASE_PATH to a replica's spool, which is live (it
  // answers deliveries): rewritten only when asked, like the log. It hashes under PostgreSQL's key,
  // so that one person has one hash in both.
  const spool =
    file === null && existsSync(config.databasePath)
      ? await onFile(config.databasePath, run, true, key)
      : null;
  return { log, spool, backups: await backupPlaces(backups, run), journal: journalled(file, run, log) };
}

/**
 * The same on a running server (`/admin/subjects/*`, `/console/subjects`), on the ports it already
 * has: the log (the SQLite file, or PostgreSQL in cluster mode), this replica's spool (cluster mode,
 * the file it holds open), the backups `backup` recorded in a SQLite log, and the journal beside it.
 */
export function subjectsOnServer(
  log: StorePort<StoreQuery>,
  spool: StorePort<StoreQuery> | null,
): SubjectService {
  const subjects = adminStore(log).subjects;
  const spoolSubjects = spool === null ? null : adminStore(spool).subjects;
  return async (run) => {
    const logPlace = await subjectOnPort(subjects, log.name, run, logWhere(log.file));
    if (spoolSubjects !== null) await spoolSubjects.adoptKey(await subjects.key(run.now), run.now);
    const spoolPlace =
      spool === null || spoolSubjects === null
        ? null
        : await subjectOnPort(spoolSubjects, spool.name, run, { files: [spool.name], log: false });
    const backups = log.file === null ? [] : await subjects.backups();
    return {
      log: logPlace,
      spool: spoolPlace,
      backups: await backupPlaces(backups, run),
      journal: journalled(log.file, run, logPlace),
    };
  };
}

/** Where the log's bytes are searched: its file (SQLite, the port's `file`); nowhere on PostgreSQL. */
function logWhere(file: string | null): { files: readonly string[]; log: boolean } {
  return { files: file === null ? [] : [file], log: true };
}

/** Each backup `backup` recorded: the person on it, or that it is gone. */
async function backupPlaces(backups: readonly { path: string }[], run: SubjectRun) {
  const copies: SubjectReport['backups'] = [];
  for (const { path } of backups)
    copies.push(existsSync(path) ? await onFile(path, run, false) : { place: path, missing: true });
  return copies;
}

/**
 * An erasure of a SQLite log, appended to the journal beside it (a restored copy of the log erases
 * it again, {@link reapplyJournal}); the journal's path, or null when nothing was appended.
 */
function journalled(file: string | null, run: SubjectRun, log: PlaceReport): string | null {
  if (file === null || log.erasure === undefined) return null;
  appendJournal(file, {
    erasure_id: log.erasure.erasure_id,
    subject_hash: log.hash,
    requested_at: run.now.toISOString(),
    key_check: log.keyCheck,
  });
  return journalPath(file);
}

/**
 * The person on one SQLite file other than the log: a spool (`live`, hashing under the log's `key`),
 * a backup (its own key).
 */
async function onFile(path: string, run: SubjectRun, live: boolean, key?: Buffer): Promise<PlaceReport> {
  const store = openStore(path, { migrate: true, busyTimeoutMs: 5000 });
  try {
    const subjects = adminStore(sqliteStorePort(store)).subjects;
    if (key !== undefined) await subjects.adoptKey(key, run.now);
    // A backup is read by no one: rewriting it costs no answer.
    return await subjectOnPort(subjects, path, live ? run : { ...run, vacuum: true }, {
      files: [path],
      log: false,
    });
  } finally {
    store.close();
  }
}

/**
 * The person on one place, through its port's subject calls: the index brought up to date, what it
 * holds, the audit row (the log only), and for an erasure the erasure, the scrub and what is left.
 * `where.files`: the SQLite files whose raw bytes are searched for the CPF (none for PostgreSQL).
 */
export async function subjectOnPort(
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
  const raw = async () => {
    if (where.files.length === 0) return null;
    let copies = 0;
    for (const f of where.files)
      copies += (await countInFileYielding(f, forms)) + (await countInFileYielding(`${f}-wal`, forms));
    return copies;
  };
  // The log's audit says who asked; a spool's or a backup's would only copy it.
  if (where.log) await subjects.audit(auditEntry(run, hash, holdings));
  const found = { place, hash, keyCheck: keyCheck(key), holdings };
  if (run.action !== 'erase') return { ...found, rawCopies: await raw() };
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
  return { ...found, rawCopies: await raw(), erasure, scrub, after: await subjects.find(hash) };
}

function auditEntry(run: SubjectRun, hash: string, h: SubjectHoldings) {
  return {
    at: run.now.toISOString(),
    role: 'admin' as const,
    session: run.audit?.session ?? null,
    person: run.audit === undefined ? run.by : run.audit.person,
    action: AUDIT[run.action],
    target: run.erasureId ?? `subject:${hash.slice(0, 12)}`,
    detail: {
      ...(run.reason === undefined ? {} : { reason: run.reason }),
      proposals: h.proposals.length,
      events: h.events.length,
    },
    ip: run.audit?.ip ?? null,
  };
}

/**
 * A restored copy of a SQLite log holds the people erased after it was taken: each erasure of the
 * journal beside the file (sqlite/subject-journal.ts) that the log does not record is made again,
 * by the subject hash it holds (no CPF: the audit's details are not searched). Run by `serve` when
 * it starts processing, which first makes sure the log has its subject key: every backup taken from
 * then on carries it, so the journal's hashes match a restored copy. An entry under another key (a
 * copy older than the key) cannot be matched: it is logged as an error naming the erasure, for the
 * operator to erase the person again by CPF.
 */
export async function reapplyJournal(
  databasePath: string,
  subjects: SubjectStore,
  logger: { info(fields: object, message: string): void; error(fields: object, message: string): void },
  now: () => Date = () => new Date(),
): Promise<number> {
  const key = await subjects.key(now());
  const entries = readJournal(databasePath);
  if (entries.length === 0) return 0;
  const known = new Set((await subjects.erasures()).map((e) => e.erasure_id));
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

/** How often a replica looks for erasures its spool has not applied yet. */
export const SPOOL_ERASURES_EVERY_MS = 10_000;

/**
 * Every erasure recorded in PostgreSQL, applied to this replica's spool (issue 45): the spool keeps
 * relayed deliveries until retention (a failover to a standby that lagged is repaired from them), so
 * an erasure run elsewhere must reach it. The spool hashes under PostgreSQL's key; each erasure it
 * lacks is made again there by its subject hash (the same erasure id, so it is done once), then the
 * spool's WAL is truncated. Run by a replica once connected, then every
 * {@link SPOOL_ERASURES_EVERY_MS}: a replica that was down when the erasure ran applies it on its
 * return. Returns how many it applied.
 */
export async function applyErasuresToSpool(
  log: SubjectStore,
  spool: SubjectStore,
  logger: { info(fields: object, message: string): void },
  now: () => Date = () => new Date(),
): Promise<number> {
  const wanted = await log.erasures();
  if (wanted.length === 0) return 0;
  const done = new Set((await spool.erasures()).map((e) => e.erasure_id));
  const key = await log.key(now());
  const rekeyed = await spool.adoptKey(key, now());
  const indexed = await spool.index(key);
  // New rows since the last look may be a late delivery of someone erased: every erasure again
  // (idempotent, and cheap: a few index lookups each, no write where nothing is left).
  const due = rekeyed || indexed.events > 0 ? wanted : wanted.filter((e) => !done.has(e.erasure_id));
  let changed = 0;
  for (const e of due) {
    const summary = await spool.erase({
      hash: e.subject_hash,
      key,
      cpf: null,
      erasureId: e.erasure_id,
      reason: e.reason,
      by: 'replica',
      now: now(),
    });
    if (summary.events > 0 || !done.has(e.erasure_id)) {
      changed += 1;
      logger.info(
        { erasure_id: e.erasure_id, events: summary.events },
        "privacy: applied an erasure to this replica's spool",
      );
    }
  }
  if (changed > 0) await spool.scrub([], { vacuum: false });
  return changed;
}

/** How often `serve` brings the subject index up to date where it processes. */
export const SUBJECT_INDEX_EVERY_MS = 60_000;

/**
 * The subject index kept up to date by `serve` (SQLite mode's processing holder; in cluster mode each
 * replica, PostgreSQL's SKIP LOCKED keeping them apart), so that a `subject` command or route hashes
 * only the last minute's rows before it reads: its cost is spread over the day instead of landing on
 * the erasure (bench/erasure.ts). Never two passes at once; `stop()` ends a pass after its batch.
 */
export function scheduleSubjectIndex(
  subjects: SubjectStore,
  logger: { warn(fields: object, message: string): void },
  ready: () => boolean = () => true,
  everyMs = SUBJECT_INDEX_EVERY_MS,
): { stop(): void } {
  let running = false;
  let stopped = false;
  const run = async () => {
    if (running || stopped || !ready()) return;
    running = true;
    try {
      await subjects.index(await subjects.key(new Date()), { shouldStop: () => stopped });
    } catch (err) {
      if (!stopped)
        logger.warn({ err: (err as Error).message }, 'privacy: the subject index pass stopped; trying again');
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void run(), everyMs).unref();
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}
