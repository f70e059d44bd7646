import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { PROPOSAL_STATUSES, isFinal, type ProposalStatus } from '../domain/lifecycle';
import { formatAge } from '../domain/duration';
import { maskCpf } from '../domain/privacy';
import { formatLimit, limitOf, stuckCutoffs, stuckSince } from '../domain/stuck';
import { proposalLists, type ProposalListRow } from '../store/proposal-lists';
import { openReadOnly, type Output } from './log-commands';
import { renderTable } from './table';

/** `proposals [--status S] [--stuck] [--limit N] [--json]`: where proposals stand and for how long. */

export interface ProposalsOptions {
  status?: string;
  stuck?: boolean;
  limit?: string;
  json?: boolean;
}

function parseOptions(config: Config, opts: ProposalsOptions): { statuses: ProposalStatus[]; limit: number } {
  const limit = opts.limit === undefined ? 50 : Number(opts.limit);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10000)
    throw new UsageError(`--limit expects an integer from 1 to 10000, got "${opts.limit}"`);
  if (opts.status === undefined) return { statuses: [...PROPOSAL_STATUSES], limit };
  const status = PROPOSAL_STATUSES.find((s) => s === opts.status);
  if (status === undefined)
    throw new UsageError(`--status expects one of ${PROPOSAL_STATUSES.join(', ')}, got "${opts.status}"`);
  // Asking for what can never be listed is a mistake worth saying, not an empty list that reads "none stuck".
  if (opts.stuck && isFinal(status)) throw new UsageError(`--stuck: ${status} is final, never stuck`);
  if (opts.stuck && limitOf(status, config.stuckAfter) === null)
    throw new UsageError(`--stuck: ${status} has no age limit (STUCK_AFTER ${status}=off)`);
  return { statuses: [status], limit };
}

export function proposalsCommand(config: Config, opts: ProposalsOptions, io: Output): void {
  const { statuses, limit } = parseOptions(config, opts);
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
  const shown = rows.map((r) => {
    const base = {
      ...r,
      nu_cpf: maskCpf(r.nu_cpf),
      age_seconds: Math.floor((now.getTime() - Date.parse(r.updated_at)) / 1000),
    };
    if (!opts.stuck) return base;
    const stuckAfter = formatLimit(limitOf(r.status, config.stuckAfter));
    return { ...base, stuck_since: stuckSince(r, config.stuckAfter), stuck_after: stuckAfter };
  });
  if (opts.json) return io.out(JSON.stringify(shown, null, 2));
  const columns = ['nu_proposta', 'nu_cpf', 'stage', 'status', 'last_evento', 'updated_at', 'age'];
  io.out(
    renderTable(
      opts.stuck ? [...columns, 'stuck_since', 'stuck_after'] : columns,
      shown.map((r) => ({ ...r, age: formatAge(r.age_seconds * 1000) })),
    ),
  );
}
