import type { Db } from './database';

/**
 * The `processing_lease` row (migration 0005): who processes this database file, and until when.
 * Times are ISO strings from the callers' clock: every process on one host reads the same clock.
 */

export interface LeaseRow {
  name: string;
  holder: string;
  acquired_at: string;
  renewed_at: string;
  expires_at: string;
}

const NAME = 'processing';

export function processingLease(db: Db) {
  const get = db.prepare<[string], LeaseRow>('SELECT * FROM processing_lease WHERE name = ?');
  // Taken when free, expired, or already ours (then renewed); `acquired_at` kept while it stays ours.
  const take = db.prepare<[string, string, string, string, string, string], LeaseRow>(
    `INSERT INTO processing_lease (name, holder, acquired_at, renewed_at, expires_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (name) DO UPDATE SET
       acquired_at = CASE WHEN holder = excluded.holder THEN acquired_at ELSE excluded.acquired_at END,
       holder = excluded.holder, renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
     WHERE holder = excluded.holder OR expires_at <= ?
     RETURNING *`,
  );
  const release = db.prepare<[string, string]>('DELETE FROM processing_lease WHERE name = ? AND holder = ?');
  const held = db.prepare<[string, string, string], { ok: number }>(
    'SELECT 1 AS ok FROM processing_lease WHERE name = ? AND holder = ? AND expires_at > ?',
  );
  return {
    /**
     * Takes or renews the lease for `holder` until `expiresAt`; returns the row when `holder` has it
     * now, undefined when another process holds an unexpired one. One statement: atomic.
     */
    acquire: (holder: string, now: string, expiresAt: string): LeaseRow | undefined =>
      take.get(NAME, holder, now, now, expiresAt, now),
    /** Gives the lease up (a clean stop), so that a standby need not wait for it to expire. */
    release: (holder: string) => release.run(NAME, holder).changes > 0,
    /** Whether `holder` holds an unexpired lease at `now` (the pipeline's fence, inside its turn). */
    isHeldBy: (holder: string, now: string) => held.get(NAME, holder, now) !== undefined,
    current: () => get.get(NAME),
  };
}

export type ProcessingLease = ReturnType<typeof processingLease>;
