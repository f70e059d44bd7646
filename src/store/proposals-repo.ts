import type { ProposalRow, TimelineRow } from '../domain/log-rows';
import { PROPOSAL, TIMELINE } from '../domain/sql/read-statements';
import type { Db } from './database';
import { prepareShared } from './handler-sql';

/** Reads of `proposals` and `proposal_transitions` for people (commands and admin routes). */

export function proposalsRepo(db: Db) {
  // Both written once for both stores (domain/sql/read-statements.ts); one `?` each.
  const get = prepareShared<ProposalRow>(db, PROPOSAL);
  const timeline = prepareShared<TimelineRow>(db, TIMELINE);
  return {
    get: (nu: number | string) => get.get([nu]),
    timeline: (nu: number | string) => timeline.all([nu]),
  };
}
