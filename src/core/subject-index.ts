import { randomBytes } from 'node:crypto';
import { bodySubject, SUBJECT_KEY_NAME, subjectHash } from '../domain/subject';
import type { StoreQuery, StoreSql } from '../domain/sql/store-sql';
import { consoleSessions } from './console-session-queries';
import { type PruneOptions, walk } from './prune-pass';

/**
 * The index of people (issue 45, docs/privacy.md), written once for both stores: every proposal and
 * event gets the subject hash of the CPF it holds (domain/subject.ts), or '' when it names nobody,
 * so that `subject find` reaches a person through two indexes instead of reading every body. The
 * pass walks the rows that have no hash yet (the partial indexes `*_unindexed`, migrations 0016 and
 * pg 0012) in short batches, like a retention pass (core/prune-pass.ts): run by every `subject`
 * command and route before it reads (what arrived since the last one; bench: the erasure rows), and
 * on a replica's spool while erasures exist. A proposal whose CPF changes loses its hash
 * (core/effects.ts) and is hashed again.
 */

/** The subject-hash key of the log, written by the first process that needs one. */
export async function subjectKey(sql: StoreSql, now: Date): Promise<Buffer> {
  const candidate = randomBytes(32).toString('base64url');
  const kept = await consoleSessions(sql).key(SUBJECT_KEY_NAME, candidate, now.toISOString());
  return Buffer.from(kept, 'base64url');
}

/**
 * Makes `key` this store's subject-hash key (a replica's spool takes PostgreSQL's, so that one
 * person has one hash in both); when the store had another, its hashes are dropped, for the index
 * pass to write them again under this one. Returns whether the key changed.
 */
export async function adoptSubjectKey(sql: StoreSql, key: Buffer, now: Date): Promise<boolean> {
  const secret = key.toString('base64url');
  return sql.write(async (q) => {
    const [row] = await q.rows<{ secret: string }>('SELECT secret FROM console_keys WHERE name = $1', [
      SUBJECT_KEY_NAME,
    ]);
    if (row?.secret === secret) return false;
    await q.run(
      `INSERT INTO console_keys (name, secret, created_at) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at`,
      [SUBJECT_KEY_NAME, secret, now.toISOString()],
    );
    await q.run('UPDATE events SET subject_hash = NULL WHERE subject_hash IS NOT NULL');
    await q.run('UPDATE proposals SET subject_hash = NULL WHERE subject_hash IS NOT NULL');
    return true;
  });
}

/** Rows hashed by a pass, per table. */
export interface IndexSummary {
  proposals: number;
  events: number;
}

/** Rows a batch of the pass looks at. */
export const INDEX_BATCH = 200;

/** The pause between an index or erasure pass's batches (PruneOptions.pauseMs). */
export const SUBJECT_PAUSE_MS = 5;

/** Hashes every proposal, then every event, that has no hash yet. */
export async function indexSubjects(
  sql: StoreSql,
  key: Buffer,
  options: Pick<PruneOptions, 'shouldStop' | 'pauseMs'> & { batch?: number } = {},
): Promise<IndexSummary> {
  const size = options.batch ?? INDEX_BATCH;
  options = { pauseMs: SUBJECT_PAUSE_MS, ...options };
  const proposals = await walk(options, 'subjects', () => sql.write((q) => indexProposals(q, key, size)));
  const events = await walk(options, 'subjects', () => sql.write((q) => indexEvents(q, key, size)));
  return { proposals, events };
}

async function indexProposals(q: StoreQuery, key: Buffer, size: number) {
  const rows = await q.rows<{ nu_proposta: number | string; nu_cpf: string | null }>(
    `SELECT nu_proposta, nu_cpf FROM proposals WHERE subject_hash IS NULL
     LIMIT $1${q.dialect.rowLock('NO KEY UPDATE SKIP LOCKED')}`,
    [size],
  );
  for (const row of rows) {
    const hash = row.nu_cpf === null ? '' : subjectHash(key, row.nu_cpf);
    await q.run('UPDATE proposals SET subject_hash = $1 WHERE nu_proposta = $2 AND subject_hash IS NULL', [
      hash,
      row.nu_proposta,
    ]);
  }
  return { rows: rows.length, done: rows.length < size };
}

async function indexEvents(q: StoreQuery, key: Buffer, size: number) {
  const rows = await q.rows<{ id: number; body: string | Buffer | null }>(
    `SELECT id, body FROM events WHERE subject_hash IS NULL ORDER BY id
     LIMIT $1${q.dialect.rowLock('NO KEY UPDATE SKIP LOCKED')}`,
    [size],
  );
  for (const row of rows) {
    const cpf = row.body === null ? null : bodySubject(readBody(row.body).text);
    const hash = cpf === null ? '' : subjectHash(key, cpf);
    await q.run('UPDATE events SET subject_hash = $1 WHERE id = $2', [hash, row.id]);
  }
  return { rows: rows.length, done: rows.length < size };
}

/**
 * A stored body as text, and how to store a text in its place in the same form: SQLite's TEXT as it
 * is; bytes (PostgreSQL's bytea, SQLite's BLOB of a quarantined body) as UTF-8 when they are, else
 * one byte per character, so that a CPF in a body that is not UTF-8 is still seen, and erased.
 */
export function readBody(body: string | Buffer): { text: string; write(text: string): string | Buffer } {
  if (typeof body === 'string') return { text: body, write: (text) => text };
  const encoding = Buffer.from(body.toString('utf8'), 'utf8').equals(body) ? 'utf8' : 'latin1';
  return { text: body.toString(encoding), write: (text) => Buffer.from(text, encoding) };
}
