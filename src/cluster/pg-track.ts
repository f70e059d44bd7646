import type { Client } from 'pg';
import { trackEffect } from '../domain/event-effects';
import type { TrackRequest } from './pg-admin-log';
import { track } from './pg-effects';
import { type PgAverbacaoRow, readAverbacao } from './pg-reads';
import { inEngineTransaction } from './pg-replay';
import { type Sql, sqlOf } from './sql';

/**
 * The `track` command in cluster mode: declares a registration in PostgreSQL, its first poll
 * queued as a pg-boss job in the same transaction (exactly one replica polls it, docs/cluster.md
 * §5.5), by the same decision SQLite mode's registry/tracking.ts applies.
 */
export async function trackOnPostgres(
  client: Client,
  databaseUrl: string,
  t: TrackRequest,
  now: Date,
  graceMs: number,
): Promise<{ created: boolean; averbacao: PgAverbacaoRow | undefined }> {
  return inEngineTransaction(client, databaseUrl, async (engine) => {
    const effect = trackEffect(t, now.getTime(), { graceMs });
    const schedule = (tx: Sql, id: string, at: Date) => engine.schedulePoll(tx, id, at);
    const created = await track(sqlOf(client), effect, now.toISOString(), schedule);
    const averbacao = await readAverbacao(client, t.requestId);
    return { result: { created, averbacao }, commit: true };
  });
}
