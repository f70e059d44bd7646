import type { RegistryStatus } from '../domain/catalogue';
import type { TrackedVia } from '../domain/event-effects';
import type { AverbacaoRow } from '../domain/log-rows';
import { AVERBACAO, averbacoesQuery } from '../domain/sql/log-reads';
import { MARK_STALE, RECORD_POLL } from '../domain/sql/registry-poll';
import type { Db } from './database';
import { prepareShared, sqliteRows } from './handler-sql';
import { clampLimit } from './sql';

/** The `averbacoes` table (contract §5): tracked registration requests and the poller's schedule. */

export type { TrackedVia } from '../domain/event-effects';
export type { AverbacaoRow } from '../domain/log-rows';

export interface TrackInput {
  requestId: string;
  correlationId: string | null;
  nuProposta: number | string | null;
  status: RegistryStatus;
  via: TrackedVia;
  now: string;
  /** null: do not poll (already final). */
  nextPollAt: string | null;
}

export function averbacoesRepo(db: Db) {
  const insert = db.prepare<
    [string, string | null, number | string | null, string, string, string | null, string, string],
    { request_id: string }
  >(
    `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, tracked_via, next_poll_at, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (request_id) DO NOTHING
     RETURNING request_id`,
  );
  // Known already: fill what was missing, never overwrite.
  const fill = db.prepare<[string | null, number | string | null, string, string]>(
    `UPDATE averbacoes SET correlation_id = coalesce(correlation_id, ?), nu_proposta = coalesce(nu_proposta, ?),
       updated_at = ? WHERE request_id = ?`,
  );
  // Written once for both stores (domain/sql/log-reads.ts), as the listing below; one `?`.
  const get = prepareShared<AverbacaoRow>(db, AVERBACAO);
  const due = db.prepare<[string, number], AverbacaoRow>(
    'SELECT * FROM averbacoes WHERE next_poll_at IS NOT NULL AND next_poll_at <= ? ORDER BY next_poll_at LIMIT ?',
  );
  const setStatus = db.prepare<[string, string, string]>(
    'UPDATE averbacoes SET status = ?, updated_at = ? WHERE request_id = ?',
  );
  const setFinal = db.prepare<[string, string, string | null, number, string, string, string]>(
    `UPDATE averbacoes SET status = ?, result_source = ?, result_body = ?, result_event_id = ?, completed_at = ?,
       next_poll_at = NULL, updated_at = ? WHERE request_id = ?`,
  );
  // Written once for both stores (domain/sql/registry-poll.ts).
  const recordPoll = prepareShared<{ polling: number }>(db, RECORD_POLL);
  const markStale = prepareShared(db, MARK_STALE);
  return {
    /** Starts tracking; returns false when the request was tracked already (then fills missing fields). */
    track(t: TrackInput): boolean {
      const created = insert.get(
        t.requestId,
        t.correlationId,
        t.nuProposta,
        t.status,
        t.via,
        t.nextPollAt,
        t.now,
        t.now,
      );
      if (!created) fill.run(t.correlationId, t.nuProposta, t.now, t.requestId);
      return created !== undefined;
    },
    /** Fills fields still unknown for a tracked registration; a known value is never overwritten. */
    fillMissing: (
      requestId: string,
      f: { correlationId: string | null; nuProposta: number | string | null },
      now: string,
    ) => fill.run(f.correlationId, f.nuProposta, now, requestId),
    get: (requestId: string) => get.get([requestId]),
    due: (now: string, limit: number) => due.all(now, limit),
    setStatus: (requestId: string, status: RegistryStatus, now: string) =>
      setStatus.run(status, now, requestId),
    setFinal(
      requestId: string,
      r: {
        status: RegistryStatus;
        source: 'webhook' | 'poll';
        body: string | null;
        eventId: number;
        now: string;
      },
    ) {
      setFinal.run(r.status, r.source, r.body, r.eventId, r.now, r.now, requestId);
    },
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

export type AverbacoesRepo = ReturnType<typeof averbacoesRepo>;
