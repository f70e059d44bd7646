import { averbacaoPage, type ConsoleAverbacaoFilter, COUNT_CAP } from '../domain/console';
import type { AverbacaoRow } from './averbacoes';
import type { Db } from './database';
import { whereClause } from './sql';

/**
 * The console's reads of `averbacoes` and its overview counts of `events`. Averbações are listed
 * newest tracked first, keyset on the rowid (insertion order, so tracking order); the status and
 * stale filters use `averbacoes_status`, "waiting" the partial index `averbacoes_due`.
 */

// Shared with cluster mode (cluster/pg-console-reads.ts): domain/console.ts.
export { type ConsoleAverbacaoFilter as AverbacaoFilter, COUNT_CAP } from '../domain/console';

export type AverbacaoListRow = AverbacaoRow & { rid: number };

export function consoleAverbacoes(db: Db) {
  const countStatus = db.prepare<[string], { n: number }>(
    `SELECT count(*) AS n FROM (SELECT 1 FROM events WHERE status = ? LIMIT ${COUNT_CAP})`,
  );
  // Registrations given up on (stale) and still without a final answer.
  const staleWaiting = db.prepare<[], { n: number }>(
    `SELECT count(*) AS n FROM averbacoes WHERE status IN ('queued', 'processing') AND stale = 1`,
  );
  return {
    /** Events at `status`, counted up to COUNT_CAP (over the (status, id) index). */
    countEvents: (status: string): number => countStatus.get(status)?.n ?? 0,
    staleWaiting: (): number => staleWaiting.get()?.n ?? 0,
    /** A page of averbações, newest tracked first; `next` is the `before` of the next page. */
    list(f: ConsoleAverbacaoFilter): { rows: AverbacaoListRow[]; next: number | null } {
      const limit = f.limit ?? 50;
      const where = whereClause([
        ['status = ?', f.status],
        ['stale = ?', f.stale === undefined ? undefined : f.stale ? 1 : 0],
        // Always bounded: the newest first is a range of the rowid, never a scan.
        ['rowid < ?', f.before ?? Number.MAX_SAFE_INTEGER],
      ]);
      const waiting = f.waiting
        ? `${where.sql === '' ? 'WHERE' : `${where.sql} AND`} next_poll_at IS NOT NULL`
        : where.sql;
      const sql = `SELECT rowid AS rid, * FROM averbacoes ${waiting} ORDER BY rowid DESC LIMIT ?`;
      return averbacaoPage(
        db.prepare<(string | number)[], AverbacaoListRow>(sql).all(...where.params, limit + 1),
        limit,
      );
    },
  };
}

export type ConsoleAverbacoes = ReturnType<typeof consoleAverbacoes>;
