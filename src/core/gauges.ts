import type { StoreQuery } from '../domain/sql/store-sql';
import type { StuckCutoff } from '../domain/stuck';
import { oldestUnprocessedAt } from './store-reads';
import { stuckCounts } from './proposal-lists';

/**
 * The figures of `/metrics` that describe the log (contract §4's events by status, averbações,
 * pipeline lag, stuck proposals), written once for both stores. Each is an index-only count or a
 * few seeks (test/integration/query-plans checks SQLite's plans): a scrape stays cheap. In cluster
 * mode every replica reports the same cluster-wide values, so alert rules aggregate them with
 * max(), never sum().
 */
export interface StoreGauges {
  eventsByStatus: Record<string, number>;
  averbacoesByStatus: Record<string, number>;
  averbacoesStale: number;
  averbacoesWaiting: number;
  /** received_at of the oldest event still to process (pending or failed), or null. */
  oldestUnprocessedAt: string | null;
  stuckByStatus: Record<string, number>;
}

export async function storeGauges(q: StoreQuery, cutoffs: readonly StuckCutoff[]): Promise<StoreGauges> {
  const events = await q.rows<{ status: string; n: number }>(
    'SELECT status, count(*) AS n FROM events GROUP BY status',
  );
  const averbacoes = await q.rows<{ status: string; stale: number; n: number }>(
    'SELECT status, stale, count(*) AS n FROM averbacoes GROUP BY status, stale',
  );
  // Over the partial index of the registrations still polled.
  const [waiting] = await q.rows<{ n: number }>(
    'SELECT count(*) AS n FROM averbacoes WHERE next_poll_at IS NOT NULL',
  );
  const averbacoesByStatus: Record<string, number> = {};
  let stale = 0;
  for (const r of averbacoes) {
    averbacoesByStatus[r.status] = (averbacoesByStatus[r.status] ?? 0) + r.n;
    if (r.stale) stale += r.n;
  }
  return {
    eventsByStatus: Object.fromEntries(events.map((r) => [r.status, r.n])),
    averbacoesByStatus,
    averbacoesStale: stale,
    averbacoesWaiting: waiting?.n ?? 0,
    oldestUnprocessedAt: await oldestUnprocessedAt(q),
    stuckByStatus: await stuckCounts(q, cutoffs),
  };
}
