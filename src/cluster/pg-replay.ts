import type { Client } from 'pg';
import type { ReplayHooks } from '../domain/event-status';
import { type Engine, startEngine } from './engine';
import { holdKeys } from './kick-lock';
import { workKeyOf } from '../domain/work-key';
import type { Sql } from './pg-sql';
import { transactionOn } from './pg-store-sql';

/**
 * What a replay (core/replay.ts, the one rule) needs in cluster mode, in the replay's transaction
 * (`tx`): the events' work keys held before their rows are locked (kick-lock.ts), and a kick of
 * each key queued with the replay (docs/cluster.md §5.2): committed together, so a replayed event
 * is never left without a kick, nor a kick sent for a replay that rolled back. A kick of a key that
 * already has one queued is absorbed by it (pg-boss `stately`).
 */
export function pgReplayHooks(
  tx: Sql,
  kick: (sql: Sql, keys: readonly string[]) => Promise<void>,
): ReplayHooks {
  return {
    hold: (events) => holdKeys(tx, events.map(workKeyOf)),
    queued: (events) => kick(tx, [...new Set(events.map(workKeyOf))]),
  };
}

/**
 * `use` in one transaction on `client` (a command's own connection, pg-reads.ts
 * `withPgConnection`: errors name host, port and database, never the password), with a pg-boss
 * started for the purpose (no workers: it only queues jobs in that transaction) and stopped at the
 * end; committed when `use` says so, else rolled back. For the operators' commands in cluster mode
 * (`replay`, `track`).
 */
export async function inEngineTransaction<T>(
  client: Client,
  databaseUrl: string,
  use: (engine: Engine) => Promise<{ result: T; commit: boolean }>,
): Promise<T> {
  const engine = await startEngine(databaseUrl, { max: 2, logger: { error() {}, warn() {} } });
  try {
    const done = await transactionOn(
      client,
      () => use(engine),
      'BEGIN',
      (r) => r.commit,
    );
    return done.result;
  } finally {
    await engine.stop(2000).catch(() => undefined);
  }
}
