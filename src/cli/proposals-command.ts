import type { Config } from '../config';
import { stuckCutoffs } from '../domain/stuck';
import { proposalLists, type ProposalListRow } from '../store/proposal-lists';
import {
  openReadOnly,
  type Output,
  parseProposalsOptions,
  type ProposalsOptions,
  showProposals,
} from './log-commands';

/** `proposals [--status S] [--stuck] [--limit N] [--json]`: where proposals stand and for how long. */

export type { ProposalsOptions };

export function proposalsCommand(config: Config, opts: ProposalsOptions, io: Output): void {
  const { statuses, limit } = parseProposalsOptions(config, opts);
  const now = new Date();
  const store = openReadOnly(config);
  let rows: ProposalListRow[];
  try {
    const lists = proposalLists(store.db);
    rows = opts.stuck
      ? lists.stuck(
          stuckCutoffs(config.stuckAfter, now).filter((c) => statuses.includes(c.status)),
          { limit },
        )
      : lists.latest(statuses, { limit });
  } finally {
    store.close();
  }
  showProposals(config, rows, now, opts, io);
}
