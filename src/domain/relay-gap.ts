/**
 * What a relay trusts after PostgreSQL failed over (issue 32, docs/cluster.md §6): PostgreSQL's
 * record of a spool (`relay_spools.relayed_through`, written in the same transaction as the rows it
 * counts) over the spool's own cursor. A standby promoted while it lagged (asynchronous replication)
 * holds a prefix of what the old primary committed; a relay whose cursor is past PostgreSQL's record
 * must send the difference again, or those acknowledged deliveries are never in the cluster's log.
 */

/** Spool ids PostgreSQL lacks: `from` through `through`, both included. */
export interface SpoolGap {
  from: number;
  through: number;
}

/**
 * The gap between what a relay has relayed (`cursor`, the spool's last relayed id) and what
 * PostgreSQL records of that spool (`recorded`; null when it has no row for it: a spool that first
 * relayed after the point the standby reached, or a database that never saw it). Null when
 * PostgreSQL holds everything the relay sent (or more: the rows are keyed by spool id, and sending
 * what PostgreSQL has is harmless, never the other way round).
 */
export function spoolGap(cursor: number, recorded: number | null): SpoolGap | null {
  const held = recorded ?? 0;
  return cursor > held ? { from: held + 1, through: cursor } : null;
}
