import { appendFileSync, chmodSync, existsSync, readFileSync } from 'node:fs';
import { createHmac } from 'node:crypto';

/**
 * The erasure journal beside a SQLite log (issue 45, docs/privacy.md "Backups"): `<database>.erasures`,
 * one JSON line per erasure, holding no CPF (the subject hash, the erasure's id and time, and a
 * check of the key the hash is under). The log's own `erasures` table says the same, but a restored
 * copy of the log is older than the erasures made since; the file is not part of the copy, so a
 * receiver opening a restored log reads the file and erases again what the copy brought back
 * (src/subject-places.ts `reapplyJournal`).
 */

export interface JournalEntry {
  erasure_id: string;
  subject_hash: string;
  requested_at: string;
  /** The first 16 characters of HMAC(key, "key-check"): a log under another key cannot use the hash. */
  key_check: string;
}

export const journalPath = (databasePath: string): string => `${databasePath}.erasures`;

export function keyCheck(key: Buffer): string {
  return createHmac('sha256', key).update('key-check').digest('base64url').slice(0, 16);
}

/** Appends `entry`; the file is created owner-only. */
export function appendJournal(databasePath: string, entry: JournalEntry): void {
  const path = journalPath(databasePath);
  const created = !existsSync(path);
  appendFileSync(path, `${JSON.stringify(entry)}\n`, { mode: 0o600 });
  if (created) chmodSync(path, 0o600);
}

/** The entries of the journal beside `databasePath` (none when there is no file); bad lines skipped. */
export function readJournal(databasePath: string): JournalEntry[] {
  const path = journalPath(databasePath);
  if (!existsSync(path)) return [];
  const entries: JournalEntry[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    try {
      const e = JSON.parse(line) as Partial<JournalEntry>;
      if (
        typeof e.erasure_id === 'string' &&
        typeof e.subject_hash === 'string' &&
        typeof e.key_check === 'string'
      )
        entries.push(e as JournalEntry);
    } catch {
      // A torn last line (a crash while appending) is skipped; the erasure is in the log itself.
    }
  }
  return entries;
}
