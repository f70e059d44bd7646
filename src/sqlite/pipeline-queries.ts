import type { Db } from './database';
import type { EventRow, EventStatus } from '../domain/event-status';

/** The statements the pipeline runs against `events` (on its own connection). */

type WorkItem = Pick<EventRow, 'id' | 'kind' | 'nu_proposta' | 'request_id'>;

/** What the pipeline reads of an event to process it. */
export type EventForWork = Omit<
  EventRow,
  'body_bytes' | 'next_attempt_at' | 'last_error' | 'processed_at' | 'duplicates' | 'last_duplicate_at'
> & {
  body: string | Buffer | null;
  /** The delivery's trace context (tracing, src/domain/tracing.ts). */
  trace_context: string | null;
};

export function pipelineQueries(db: Db) {
  const backlog = db.prepare<[], WorkItem & { next_attempt_at: string | null }>(
    `SELECT id, kind, nu_proposta, request_id, next_attempt_at FROM events WHERE status IN ('pending', 'failed') ORDER BY id`,
  );
  const due = db.prepare<[string, number], WorkItem>(
    `SELECT id, kind, nu_proposta, request_id FROM events
     WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= ? AND status IN ('pending', 'failed')
     ORDER BY next_attempt_at LIMIT ?`,
  );
  const load = db.prepare<[number], EventForWork>(
    `SELECT id, kind, evento, nu_proposta, request_id, registry_status, webhook_id, dedup_key, tentativa, received_at,
       status, attempts, body, trace_context
     FROM events WHERE id = ?`,
  );
  // Events stored after `id`, by this process or another one sharing the file (every status, so
  // that the watermark moves past ignored and invalid ones too). Walks the primary key.
  const after = db.prepare<[number, number], WorkItem & { status: EventStatus }>(
    'SELECT id, kind, nu_proposta, request_id, status FROM events WHERE id > ? ORDER BY id LIMIT ?',
  );
  const maxId = db.prepare<[], { id: number | null }>('SELECT max(id) AS id FROM events');
  const countStatus = db.prepare<[string], { n: number }>(
    'SELECT count(*) AS n FROM events WHERE status = ?',
  );
  return {
    backlog: () => backlog.all(),
    after: (id: number, limit: number) => after.all(id, limit),
    maxId: () => maxId.get()?.id ?? 0,
    due: (now: string, limit: number) => due.all(now, limit),
    load: (id: number) => load.get(id),
    count: (status: EventStatus) => countStatus.get(status)?.n ?? 0,
  };
}

export type PipelineQueries = ReturnType<typeof pipelineQueries>;
