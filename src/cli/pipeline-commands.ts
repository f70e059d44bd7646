import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import { openStore } from '../store/store';
import { eventIdsWithStatus, replayEvents } from '../store/pipeline-queries';
import type { EventStatus, ReplayResult } from '../domain/event-status';
import { replayOnPostgres } from '../cluster/pg-replay';
import { parseNuProposta } from '../store/proposals';
import { openReadOnly, type Output, showProposal } from './log-commands';

/** `proposal <nu>`: where a proposal stands and every event it received, applied or not. */
export function proposalCommand(config: Config, nu: string, opts: { json?: boolean }, io: Output): void {
  const store = openReadOnly(config);
  try {
    const key = parseNuProposta(nu);
    showProposal(config, nu, store.proposals.get(key), store.proposals.timeline(key), opts, io);
  } finally {
    store.close();
  }
}

/** `replay <event-id>…` or `replay --status dead`: put events back in the queue. */
export function replayCommand(
  config: Config,
  ids: string[],
  opts: { status?: string; json?: boolean },
  io: Output,
): void | Promise<void> {
  const wanted = replayArguments(ids, opts);
  if (config.cluster) {
    // Cluster mode: PostgreSQL's events, each work key kicked through pg-boss in the same transaction.
    return replayOnPostgres(config.cluster.databaseUrl, wanted, new Date().toISOString()).then((result) =>
      showReplay(result, opts, io),
    );
  }
  openReadOnly(config).close(); // says clearly when the database is missing or not migrated
  const store = openStore(config.databasePath, {
    busyTimeoutMs: Math.max(config.sqlite.busyTimeoutMs, 5000),
  });
  try {
    const list = 'status' in wanted ? eventIdsWithStatus(store.db, wanted.status) : wanted.ids;
    showReplay(replayEvents(store.db, list, new Date().toISOString()), opts, io);
  } finally {
    store.close();
  }
}

/** The ids asked for, or the status whose events are; usage errors for anything else. */
function replayArguments(
  ids: string[],
  opts: { status?: string },
): { ids: number[] } | { status: EventStatus } {
  if (ids.length === 0 && !opts.status)
    throw new UsageError('replay needs event ids or --status (e.g. --status dead)');
  if (ids.length > 0 && opts.status) throw new UsageError('replay takes event ids or --status, not both');
  if (opts.status && !['dead', 'failed', 'done'].includes(opts.status)) {
    throw new UsageError(`--status expects dead, failed or done, got "${opts.status}"`);
  }
  if (opts.status) return { status: opts.status as EventStatus };
  return {
    ids: ids.map((id) => {
      const n = Number(id);
      if (!Number.isSafeInteger(n) || n < 1)
        throw new UsageError(`event ids are positive integers, got "${id}"`);
      return n;
    }),
  };
}

/** What `replay` prints, whichever store it replayed in. */
function showReplay(result: ReplayResult, opts: { json?: boolean }, io: Output): void {
  if (result.unknown.length > 0) throw new UsageError(`no event ${result.unknown.join(', ')}`);
  if (result.notReplayable.length > 0)
    throw new UsageError(
      `${result.notReplayable.map((r) => `event ${r.id} is ${r.status}`).join(', ')}: nothing to replay (no handler runs for it)`,
    );
  const queued = result.queued;
  if (opts.json) return io.out(JSON.stringify({ queued }));
  io.out(
    queued.length === 0
      ? 'nothing to replay'
      : `queued ${queued.length} event(s): ${queued.slice(0, 20).join(', ')}${queued.length > 20 ? ', …' : ''} (a running receiver picks them up within a second)`,
  );
}
