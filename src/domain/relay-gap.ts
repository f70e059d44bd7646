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

/** `ids` (ascending) as runs of consecutive ids: [3, 4, 5, 9] → 3–5, 9–9. */
export function idRuns(ids: readonly number[]): SpoolGap[] {
  const runs: SpoolGap[] = [];
  for (const id of ids) {
    const last = runs[runs.length - 1];
    if (last !== undefined && id === last.through + 1) last.through = id;
    else runs.push({ from: id, through: id });
  }
  return runs;
}

/** What a spool file says of itself (sqlite/spool.ts `facts`), for `relay verify`. */
export interface SpoolFacts {
  id: string;
  relayedThrough: number;
  /** The ids the spool still holds at or below its cursor, ascending. */
  relayedIds: readonly number[];
  backlog: number;
}

/** What `relay verify` found for one spool (src/cli/relay-command.ts prints it). */
export interface SpoolVerdict {
  spool: string;
  /** The spool's own cursor: the last id its relay counts as in PostgreSQL. */
  relayedThrough: number;
  /** PostgreSQL's record of the spool; null when it has none. */
  recorded: number | null;
  /** Relayed deliveries the spool still holds that PostgreSQL does not have, as runs of ids. */
  missing: SpoolGap[];
  /** Deliveries not relayed yet (after the cursor): on their way, not a gap. */
  backlog: number;
}

/** Whether a spool's verdict shows a loss: deliveries the spool counts as relayed that PostgreSQL lacks. */
export function hasGap(v: Pick<SpoolVerdict, 'relayedThrough' | 'recorded' | 'missing'>): boolean {
  return v.missing.length > 0 || spoolGap(v.relayedThrough, v.recorded) !== null;
}
