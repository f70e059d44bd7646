import { clampLimit } from '../domain/list-limit';
import type { AverbacaoRow } from '../domain/log-rows';
import { AVERBACAO, averbacoesQuery } from '../domain/sql/read-statements';
import { MARK_STALE, RECORD_POLL } from '../domain/sql/registry-poll-statements';
import type { Db } from './database';
import { prepareShared, sqliteRows } from './handler-sql';

/** The `averbacoes` table (contract §5): tracked registration requests and the poller's schedule. */

export type { AverbacaoRow } from '../domain/log-rows';

export function averbacoesRepo(db: Db) {
  // Written once for both stores (domain/sql/read-statements.ts), as the listing below; one `?`.
  const get = prepareShared<AverbacaoRow>(db, AVERBACAO);
  const due = db.prepare<[string, number], AverbacaoRow>(
    'SELECT * FROM averbacoes WHERE next_poll_at IS NOT NULL AND next_poll_at <= ? ORDER BY next_poll_at LIMIT ?',
  );
  // Written once for both stores (domain/sql/registry-poll-statements.ts).
  const recordPoll = prepareShared<{ polling: number }>(db, RECORD_POLL);
  const markStale = prepareShared(db, MARK_STALE);
  return {
    get: (requestId: string) => get.get([requestId]),
    due: (now: string, limit: number) => due.all(now, limit),
    /** Records a poll; returns whether the registration is still polled. */
    recordPoll(
      requestId: string,
      p: { attempts: number; nextPollAt: string | null; outcome: string; now: string },
    ): boolean {
      const [row] = recordPoll.all([requestId, p.attempts, p.nextPollAt, p.now, p.outcome]);
      return Boolean(row?.polling);
    },
    markStale: (requestId: string, now: string) => markStale.run([requestId, now]),
    list(
      filter: { status?: string; stale?: boolean; nuProposta?: number | string; limit?: number } = {},
    ): AverbacaoRow[] {
      return sqliteRows<AverbacaoRow>(db, averbacoesQuery({ ...filter, limit: clampLimit(filter.limit) }));
    },
  };
}
