import { trackEffect } from '../domain/event-effects';
import { type AverbacaoRow, withLogNuProposta } from '../domain/log-rows';
import { postgresDialect } from '../domain/sql/dialect';
import { AVERBACAO } from '../domain/sql/read-statements';
import { trackEffects } from '../core/effects';
import { pgStoreQuery } from './pg-store-sql';
import type { PgReader } from './pg-reads';
import type { Sql } from './pg-sql';
import { drive } from '../core/event-step';
import type { TrackRequest, Tracked } from '../core/store-port';
import { pgStepOps } from './kick';

/** Schedules a registration's poll in `tx`'s transaction (engine.ts `schedulePoll`). */
export type SchedulePoll = (tx: Sql, requestId: string, at: Date) => Promise<void>;

/**
 * How a caller reaches PostgreSQL to track: the replica's pool and engine (pg-store-port.ts `pgPoolStorePort`), or a
 * command's own connection with a pg-boss started for the transaction (pg-store-port.ts `withPgCommandStore`).
 */
export interface TrackRunners {
  /** `fn` in one transaction, with the way to queue a poll in it. */
  transaction<T>(fn: (tx: Sql, schedulePoll: SchedulePoll) => Promise<T>): Promise<T>;
  /** `fn` once the transaction committed. */
  read<T>(fn: (db: PgReader) => Promise<T>): Promise<T>;
}

/**
 * Tracks a registration in PostgreSQL, for the admin routes and the `track` command alike: the
 * row, its first poll queued as a pg-boss job in the same transaction (exactly one replica polls
 * it, docs/cluster.md §5.5), by the same decision SQLite mode's store/averbacoes-repo.ts `track` applies; then
 * the averbação as it now stands.
 */
export async function trackOnPostgres(
  run: TrackRunners,
  t: TrackRequest,
  now: Date,
  graceMs: number,
): Promise<Tracked> {
  const created = await run.transaction((tx, schedulePoll) =>
    drive(
      trackEffects(trackEffect(t, now.getTime(), { graceMs }), postgresDialect, now.toISOString()),
      pgStepOps(tx, { schedulePoll }, {}),
    ),
  );
  // As core/store-reads.ts `averbacaoRow` reads it (cluster/ cannot import core/).
  const [row] = await run.read((db) =>
    pgStoreQuery(db).rows<AverbacaoRow & { nu_proposta: string | null }>(AVERBACAO, [t.requestId]),
  );
  return { created, averbacao: row && withLogNuProposta(row) };
}
