import { trackEffect } from '../domain/event-effects';
import { track } from './pg-effects';
import { type PgAverbacaoRow, readAverbacao } from './pg-reads';
import { withEngineTransaction } from './pg-replay';
import { type Sql, sqlOf } from './sql';

/**
 * The `track` command in cluster mode: declares a registration in PostgreSQL, its first poll
 * queued as a pg-boss job in the same transaction (exactly one replica polls it, docs/cluster.md
 * §5.5), by the same decision SQLite mode's registry/tracking.ts applies.
 */
export async function trackOnPostgres(
  databaseUrl: string,
  t: { requestId: string; nuProposta: number | string | null },
  now: Date,
  graceMs: number,
): Promise<{ created: boolean; row: PgAverbacaoRow | undefined }> {
  return withEngineTransaction(databaseUrl, 'track', async (client, engine) => {
    const effect = trackEffect({ ...t, correlationId: null, via: 'declared' }, now.getTime(), { graceMs });
    const schedule = (tx: Sql, id: string, at: Date) => engine.schedulePoll(tx, id, at);
    const created = await track(sqlOf(client), effect, now.toISOString(), schedule);
    const row = await readAverbacao(client, t.requestId);
    return { result: { created, row }, commit: true };
  });
}
