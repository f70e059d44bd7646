import type { StoreQuery } from '../domain/sql/store-sql';
import { idRuns, type SpoolFacts, type SpoolVerdict } from '../domain/relay-gap';

/**
 * `relay verify` (issue 32, docs/cluster-mode.md "PostgreSQL failover"): each spool beside this
 * command compared with what PostgreSQL holds of it. A spool's relayed deliveries are looked up by
 * (spool, spool_id), the key the relay inserts them under, in chunks.
 */

const CHUNK = 10_000;

export async function verifySpool(q: StoreQuery, spool: SpoolFacts): Promise<SpoolVerdict> {
  const [record] = await q.rows<{ relayed_through: string }>(
    'SELECT relayed_through FROM relay_spools WHERE spool = $1',
    [spool.id],
  );
  const missing: number[] = [];
  for (let i = 0; i < spool.relayedIds.length; i += CHUNK) {
    const chunk = spool.relayedIds.slice(i, i + CHUNK);
    const rows = await q.rows<{ id: string }>(
      `SELECT s.id FROM unnest($2::bigint[]) AS s(id)
       WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.spool = $1 AND d.spool_id = s.id) ORDER BY s.id`,
      [spool.id, chunk],
    );
    missing.push(...rows.map((r) => Number(r.id)));
  }
  return {
    spool: spool.id,
    relayedThrough: spool.relayedThrough,
    recorded: record === undefined ? null : Number(record.relayed_through),
    missing: idRuns(missing),
    backlog: spool.backlog,
  };
}

/** Every spool PostgreSQL knows, with its replica: the others are checked beside their replicas. */
export async function knownSpools(
  q: StoreQuery,
): Promise<{ spool: string; replica: string; relayed_through: number }[]> {
  const rows = await q.rows<{ spool: string; replica: string; relayed_through: string }>(
    'SELECT spool, replica, relayed_through FROM relay_spools ORDER BY replica, spool',
  );
  return rows.map((r) => ({ ...r, relayed_through: Number(r.relayed_through) }));
}
