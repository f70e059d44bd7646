import type { NamedStatement } from '../core/effects';
import type { PgSql } from './pg-sql';

/**
 * The turn lock of a work key (`p:<nu>`, `r:<requestId>`, `e:<id>`): a transaction-scoped advisory
 * lock, taken **exclusively** by a turn before it loads the key's due events (turn.ts), and
 * **shared** by every transaction that makes events due for the key and queues its turn: the
 * relay, a registry poll's answer, a replay.
 *
 * Why the producers take it: pg-boss absorbs a turn queued for a key that already has one waiting
 * (`stately`), and the waiting one may be claimed before the producer commits. Without the lock it
 * could load the key's events without the producer's new ones, find nothing else to do and
 * complete, and those events would stay pending with no turn at all: the crash test found 2 to 11
 * such events after PostgreSQL's restart, when the relay catches up in long transactions. With
 * it, that turn either waits for the producer to commit and then sees its events, or commits
 * before the producer's turn is queued, which then finds no turn waiting and absorbs nothing.
 *
 * Keys are locked in sorted order by everyone (two lockers of overlapping keys would otherwise be
 * able to deadlock), and a producer takes the locks before its first write, so that it never holds
 * a row a turn waits for while it waits for that turn.
 */

/**
 * The advisory-lock key of the relays' batches (ASCII "consigRL"): a relay takes it before it writes
 * `deliveries` and `events`, a migration takes it too (pg-migrate.ts).
 */
export const RELAY_LOCK_KEY = 0x636f6e736967524cn;

/**
 * The lock statement of a mode, over an array of keys. Its texts keep the word the turn had before
 * issue 47 (a kick): the lock's key is what replicas of every version must agree on, and a name is
 * the text's (one name, one text), so neither changes with the word.
 */
const lock = (mode: 'exclusive' | 'shared', fn: string): NamedStatement => ({
  name: `consig_kick_lock_${mode}`,
  text: `SELECT ${fn}(hashtextextended('consig-kick:' || k, 0)) FROM unnest($1::text[]) AS k`,
});
const EXCLUSIVE = lock('exclusive', 'pg_advisory_xact_lock');
const SHARED = lock('shared', 'pg_advisory_xact_lock_shared');

/** The distinct keys, in the one order every locker uses. */
export function lockOrder(keys: Iterable<string>): string[] {
  return [...new Set(keys)].sort();
}

async function take(sql: PgSql, statement: NamedStatement, keys: Iterable<string>): Promise<void> {
  const sorted = lockOrder(keys);
  if (sorted.length > 0) await sql.prepared(statement, [sorted]);
}

/** A turn's hold on its keys: waits for any producer of them to commit. */
export const lockKeys = (sql: PgSql, keys: readonly string[]): Promise<void> => take(sql, EXCLUSIVE, keys);

/** A producer's hold on the keys it will make events due for: see the module's note. */
export const holdKeys = (sql: PgSql, keys: Iterable<string>): Promise<void> => take(sql, SHARED, keys);
