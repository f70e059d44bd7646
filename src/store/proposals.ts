import type { ProposalRow, TimelineRow } from '../domain/log-rows';
import type { Db } from './database';

/** Reads of `proposals` and `proposal_transitions` for people (commands and admin routes). */

export type { ProposalRow, TimelineRow } from '../domain/log-rows';

export function proposalsRepo(db: Db) {
  const get = db.prepare<[number | string], ProposalRow>('SELECT * FROM proposals WHERE nu_proposta = ?');
  // Every event of the proposal, processed or not, with its transition when it has one.
  const timeline = db.prepare<[number | string], TimelineRow>(
    `SELECT e.id AS event_id, e.received_at, e.evento, e.status AS event_status, e.attempts, e.duplicates,
            t.from_status, t.to_status, t.applied, t.reason, e.last_error
     FROM events e LEFT JOIN proposal_transitions t ON t.event_id = e.id
     WHERE e.nu_proposta = ?
     ORDER BY e.id`,
  );
  const countByStatus = db.prepare<[], { status: string; n: number }>(
    'SELECT status, count(*) AS n FROM proposals GROUP BY status',
  );
  return {
    get: (nu: number | string) => get.get(nu),
    timeline: (nu: number | string) => timeline.all(nu),
    countByStatus: (): Record<string, number> =>
      Object.fromEntries(countByStatus.all().map((r) => [r.status, r.n])),
  };
}

export type ProposalsRepo = ReturnType<typeof proposalsRepo>;

/** `nu_proposta` as typed by a person: digits are the integer, anything else the text. */
export function parseNuProposta(value: string): number | string {
  const t = value.trim();
  return /^\d{1,15}$/.test(t) ? Number(t) : t;
}
