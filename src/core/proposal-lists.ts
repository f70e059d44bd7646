import type { ProposalKey, ProposalListing } from '../domain/console';
import { clampLimit } from '../domain/list-limit';
import type { ProposalRow } from '../domain/log-rows';
import type { Dialect } from '../domain/sql/dialect';
import type { StoreQuery } from '../domain/sql/store-sql';
import type { StuckCutoff } from '../domain/stuck';
import { logNu } from './console-reads';

/**
 * Proposals listed by status and age, for `/metrics`, `stats`, `proposals` and the console, written
 * once for both stores: stuck counts and pages of stuck or recently changed proposals. Every
 * statement reads one status at a time (`status = $1`) over the index on `(status, updated_at)`,
 * so it costs the rows it returns or counts, never the table; a listing over several statuses runs
 * one per status and merges them. Pages are keyset pages on `(updated_at, nu_proposta)`, a total
 * order (nu_proposta is the key), so they stay fast however deep.
 */

/** What a listing shows of a proposal (`nu_cpf` as stored: mask it before showing it). */
export type ProposalListRow = Pick<
  ProposalRow,
  'nu_proposta' | 'nu_cpf' | 'stage' | 'status' | 'last_evento' | 'updated_at'
>;

export type { ProposalKey } from '../domain/console';

const COLUMNS = 'nu_proposta, nu_cpf, stage, status, last_evento, updated_at';

/**
 * The dialect's one difference here ({@link Dialect.proposalOrder}): SQLite's order of `nu_proposta`
 * (integers by value before text by bytes) is the column's own; PostgreSQL keeps text, so it sorts
 * on keys that give the same order, and a keyset page goes on where SQLite's would.
 */

/** `updated_at` then the `nu_proposta` keys, each in `direction`. */
function order(dialect: Dialect, direction: 'ASC' | 'DESC'): string {
  return ['updated_at', ...dialect.proposalOrder.keys].map((k) => `${k} ${direction}`).join(', ');
}

/** `(updated_at, nu keys) op key`, its values numbered from `$first`. */
function pastKey(dialect: Dialect, key: ProposalKey, op: '<' | '>', first: number) {
  const keys = `(updated_at, ${dialect.proposalOrder.keys.join(', ')})`;
  const bound = dialect.proposalOrder.bound(key, first);
  return { sql: `${keys} ${op} ${bound.sql}`, params: bound.params };
}

// SQLite's order on (updated_at, nu_proposta), on rows in the SQLite log's shape: text by bytes
// (ISO times are ASCII), then an integer key before a text one, so that a merged page is the page
// one query over all statuses would give.
function compareKeys(a: ProposalKey, b: ProposalKey): number {
  if (a.updated_at !== b.updated_at) return a.updated_at < b.updated_at ? -1 : 1;
  const x = a.nu_proposta;
  const y = b.nu_proposta;
  if (typeof x !== typeof y) return typeof x === 'number' ? -1 : 1;
  return x === y ? 0 : x < y ? -1 : 1;
}

/**
 * Stuck proposals per status of `cutoffs` (every one of them, 0 included), in their order: one
 * statement, a count over `(status, updated_at)` per cutoff, so that a `/metrics` scrape costs one
 * round trip to PostgreSQL however many statuses are watched.
 */
export async function stuckCounts(
  q: StoreQuery,
  cutoffs: readonly StuckCutoff[],
): Promise<Record<string, number>> {
  if (cutoffs.length === 0) return {};
  const columns = cutoffs.map(
    (_c, i) =>
      `(SELECT count(*) FROM proposals WHERE status = $${2 * i + 1} AND updated_at < $${2 * i + 2}) AS n${i}`,
  );
  const [row] = await q.rows<Record<string, number>>(
    `SELECT ${columns.join(', ')}`,
    cutoffs.flatMap((c) => [c.status, c.before]),
  );
  return Object.fromEntries(cutoffs.map((c, i) => [c.status, row?.[`n${i}`] ?? 0]));
}

/** Stuck proposals, the longest unchanged first; `after` = the last row of the previous page. */
export async function stuckProposals(
  q: StoreQuery,
  cutoffs: readonly StuckCutoff[],
  page: { after?: ProposalKey | undefined; limit?: number | undefined } = {},
): Promise<ProposalListRow[]> {
  const limit = clampLimit(page.limit);
  const key = page.after && pastKey(q.dialect, page.after, '>', 3);
  const rows: ProposalListRow[] = [];
  for (const c of cutoffs) {
    const found = await q.rows<ProposalListRow>(
      `SELECT ${COLUMNS} FROM proposals WHERE status = $1 AND updated_at < $2 ${key ? `AND ${key.sql}` : ''}
       ORDER BY ${order(q.dialect, 'ASC')} LIMIT $${3 + (key?.params.length ?? 0)}`,
      [c.status, c.before, ...(key?.params ?? []), limit],
    );
    rows.push(...found.map((r) => logNu(q.dialect, r)));
  }
  return rows.sort(compareKeys).slice(0, limit);
}

/** Proposals at `statuses`, the most recently changed first; `before` = the last row of the previous page. */
export async function latestProposals(
  q: StoreQuery,
  statuses: readonly string[],
  page: { before?: ProposalKey | undefined; limit?: number | undefined } = {},
): Promise<ProposalListRow[]> {
  const limit = clampLimit(page.limit);
  const key = page.before && pastKey(q.dialect, page.before, '<', 2);
  const rows: ProposalListRow[] = [];
  for (const status of statuses) {
    const found = await q.rows<ProposalListRow>(
      `SELECT ${COLUMNS} FROM proposals WHERE status = $1 ${key ? `AND ${key.sql}` : ''}
       ORDER BY ${order(q.dialect, 'DESC')} LIMIT $${2 + (key?.params.length ?? 0)}`,
      [status, ...(key?.params ?? []), limit],
    );
    rows.push(...found.map((r) => logNu(q.dialect, r)));
  }
  return rows.sort((a, b) => compareKeys(b, a)).slice(0, limit);
}

/** One page of the console's proposals list (domain/console.ts {@link ProposalListing}). */
export function proposalPage(q: StoreQuery, listing: ProposalListing): Promise<ProposalListRow[]> {
  return listing.kind === 'stuck'
    ? stuckProposals(q, listing.cutoffs, { after: listing.after, limit: listing.limit })
    : latestProposals(q, listing.statuses, { before: listing.before, limit: listing.limit });
}
