import type { ProposalKey } from '../domain/console';
import type { StuckCutoff } from '../domain/stuck';
import type { ProposalRow } from './proposals';
import type { Db } from './database';
import { clampLimit } from './sql';

/**
 * Proposals listed by status and age, for `/metrics`, `stats` and `proposals`: stuck counts and
 * pages of stuck or recently changed proposals. Every statement reads one status at a time
 * (`status = ?`) over the index on `(status, updated_at)` (migration 0009), so it costs the rows it
 * returns or counts, never the table; a listing over several statuses runs one per status and
 * merges them. Pages are keyset pages on `(updated_at, nu_proposta)`, a total order (nu_proposta is
 * the key), so they stay fast however deep.
 */

/** What a listing shows of a proposal (`nu_cpf` as stored: mask it before showing it). */
export type ProposalListRow = Pick<
  ProposalRow,
  'nu_proposta' | 'nu_cpf' | 'stage' | 'status' | 'last_evento' | 'updated_at'
>;

/** Where a page ends: the last row's `updated_at` and `nu_proposta` (shared with cluster mode). */
export type { ProposalKey } from '../domain/console';

const COLUMNS = 'nu_proposta, nu_cpf, stage, status, last_evento, updated_at';

// SQLite's order on (updated_at, nu_proposta): text by bytes (ISO times are ASCII), then an integer
// key before a text one, so that a merged page is the page one query over all statuses would give.
function compareKeys(a: ProposalKey, b: ProposalKey): number {
  if (a.updated_at !== b.updated_at) return a.updated_at < b.updated_at ? -1 : 1;
  const x = a.nu_proposta;
  const y = b.nu_proposta;
  if (typeof x !== typeof y) return typeof x === 'number' ? -1 : 1;
  return x === y ? 0 : x < y ? -1 : 1;
}

export function proposalLists(db: Db) {
  const stuckCount = db.prepare<[string, string], { n: number }>(
    'SELECT count(*) AS n FROM proposals WHERE status = ? AND updated_at < ?',
  );
  const stuckFirst = db.prepare<[string, string, number], ProposalListRow>(
    `SELECT ${COLUMNS} FROM proposals WHERE status = ? AND updated_at < ?
     ORDER BY updated_at, nu_proposta LIMIT ?`,
  );
  const stuckNext = db.prepare<[string, string, string, number | string, number], ProposalListRow>(
    `SELECT ${COLUMNS} FROM proposals WHERE status = ? AND updated_at < ? AND (updated_at, nu_proposta) > (?, ?)
     ORDER BY updated_at, nu_proposta LIMIT ?`,
  );
  const latestFirst = db.prepare<[string, number], ProposalListRow>(
    `SELECT ${COLUMNS} FROM proposals WHERE status = ?
     ORDER BY updated_at DESC, nu_proposta DESC LIMIT ?`,
  );
  const latestNext = db.prepare<[string, string, number | string, number], ProposalListRow>(
    `SELECT ${COLUMNS} FROM proposals WHERE status = ? AND (updated_at, nu_proposta) < (?, ?)
     ORDER BY updated_at DESC, nu_proposta DESC LIMIT ?`,
  );

  return {
    /** Stuck proposals per status of `cutoffs` (every one of them, 0 included). */
    stuckCounts(cutoffs: readonly StuckCutoff[]): Record<string, number> {
      return Object.fromEntries(cutoffs.map((c) => [c.status, stuckCount.get(c.status, c.before)?.n ?? 0]));
    },

    /** Stuck proposals, the longest unchanged first; `after` = the last row of the previous page. */
    stuck(
      cutoffs: readonly StuckCutoff[],
      page: { after?: ProposalKey | undefined; limit?: number | undefined } = {},
    ): ProposalListRow[] {
      const limit = clampLimit(page.limit);
      const { after } = page;
      const rows = cutoffs.flatMap((c) =>
        after === undefined
          ? stuckFirst.all(c.status, c.before, limit)
          : stuckNext.all(c.status, c.before, after.updated_at, after.nu_proposta, limit),
      );
      return rows.sort(compareKeys).slice(0, limit);
    },

    /** Proposals at `statuses`, the most recently changed first; `before` = the last row of the previous page. */
    latest(
      statuses: readonly string[],
      page: { before?: ProposalKey | undefined; limit?: number | undefined } = {},
    ): ProposalListRow[] {
      const limit = clampLimit(page.limit);
      const { before } = page;
      const rows = statuses.flatMap((status) =>
        before === undefined
          ? latestFirst.all(status, limit)
          : latestNext.all(status, before.updated_at, before.nu_proposta, limit),
      );
      return rows.sort((a, b) => compareKeys(b, a)).slice(0, limit);
    },
  };
}

export type ProposalLists = ReturnType<typeof proposalLists>;
