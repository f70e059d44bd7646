import type { DestinationGauges } from '../domain/forwarding/sender-store';
import type { StuckCutoff } from '../domain/stuck';
import type { Sql } from './sql';

/**
 * The figures of `/metrics` that describe the shared log rather than this replica (contract §4's
 * events by status, averbações, pipeline lag, stuck proposals), read from PostgreSQL in cluster
 * mode: every replica reports the same cluster-wide values, so alert rules aggregate them with
 * max(), never sum(). The replica's own figures (its spool, its relay, its answers) stay local.
 */
export interface SharedGauges {
  eventsByStatus: Record<string, number>;
  averbacoesByStatus: Record<string, number>;
  averbacoesStale: number;
  averbacoesWaiting: number;
  /** received_at of the oldest event still to process (pending or failed), or null. */
  oldestUnprocessedAt: Date | null;
  stuckByStatus: Record<string, number>;
  /** Each configured destination's backlog, dead letters, oldest waiting and pause flag (cluster-wide). */
  forwarding?: DestinationGauges[];
}

/** received_at of the oldest event still to process (pending or failed), or null. */
export async function readOldestUnprocessed(sql: Sql): Promise<Date | null> {
  const [row] = await sql.query<{ at: Date | null }>(
    // The first of each by id, as SQLite mode reads it: two index probes, not a scan of the backlog.
    `SELECT least((SELECT received_at FROM events WHERE status = 'pending' ORDER BY id LIMIT 1),
                  (SELECT received_at FROM events WHERE status = 'failed' ORDER BY id LIMIT 1)) AS at`,
  );
  return row?.at ?? null;
}

export async function readSharedGauges(sql: Sql, cutoffs: readonly StuckCutoff[]): Promise<SharedGauges> {
  const events = await sql.query<{ status: string; n: string }>(
    'SELECT status, count(*) AS n FROM events GROUP BY status',
  );
  const averbacoes = await sql.query<{ status: string; stale: boolean; waiting: string; n: string }>(
    `SELECT status, stale, count(*) FILTER (WHERE next_poll_at IS NOT NULL) AS waiting, count(*) AS n
     FROM averbacoes GROUP BY status, stale`,
  );
  const stuck = await sql.query<{ status: string; n: string }>(
    `SELECT c.status, (SELECT count(*) FROM proposals p WHERE p.status = c.status AND p.updated_at < c.before) AS n
     FROM unnest($1::text[], $2::timestamptz[]) AS c(status, before)`,
    [cutoffs.map((c) => c.status), cutoffs.map((c) => c.before)],
  );
  const averbacoesByStatus: Record<string, number> = {};
  let stale = 0;
  let waiting = 0;
  for (const r of averbacoes) {
    averbacoesByStatus[r.status] = (averbacoesByStatus[r.status] ?? 0) + Number(r.n);
    if (r.stale) stale += Number(r.n);
    waiting += Number(r.waiting);
  }
  return {
    eventsByStatus: Object.fromEntries(events.map((r) => [r.status, Number(r.n)])),
    averbacoesByStatus,
    averbacoesStale: stale,
    averbacoesWaiting: waiting,
    oldestUnprocessedAt: await readOldestUnprocessed(sql),
    stuckByStatus: Object.fromEntries(stuck.map((r) => [r.status, Number(r.n)])),
  };
}
