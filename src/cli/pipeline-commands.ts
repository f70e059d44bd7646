import type { Config } from '../config';
import { UsageError } from '../domain/errors';
import type { EventStatus, ReplayResult } from '../domain/event-status';
import { withCommandStore } from '../open-store';
import type { Output } from './log-commands';

/**
 * `replay <event-id>…` or `replay --status dead`: put events back in the queue (in cluster mode,
 * each work key's turn queued through pg-boss in the same transaction).
 */
export async function replayCommand(
  config: Config,
  ids: string[],
  opts: { status?: string; json?: boolean },
  io: Output,
): Promise<void> {
  const wanted = replayArguments(ids, opts);
  const result = await withCommandStore(config, { access: 'write', command: 'replay' }, (log) =>
    log.replay(wanted, new Date().toISOString()),
  );
  showReplay(result, opts, io);
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
