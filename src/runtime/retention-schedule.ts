import type { Clock } from '../clock';
import type { Logger } from '../logger';
import { PassInterrupted, prunePass } from '../core/prune-pass';
import { retentionCutoff, retentionLog, type SpoolPruneSummary } from '../domain/retention';
import type { StoreSql } from '../domain/sql/store-sql';
import { isLockBusy } from '../domain/errors';
import { pruneSpoolPaced, type Spool } from '../sqlite/spool';

/** How often RETENTION_DAYS is applied after the first pass at start. */
const PRUNE_INTERVAL_MS = 3_600_000;
/** A pass that found the file locked by another connection is tried again this much later. */
const LOCKED_RETRY_MS = 60_000;

/** What a failed pass logs (a locked file aside), by what it prunes. */
export const RETENTION_FAILED = {
  log: { level: 'error', message: 'retention: prune failed; trying again in an hour' },
  spool: { level: 'warn', message: 'retention: could not prune the spool; trying again in an hour' },
} as const;

/**
 * One pass over a local SQLite file, in short batches: it adds what each committed batch removed to
 * `removed` (retentionLog's shape) and ends after a batch (PassInterrupted) once `shouldStop` says so.
 */
export type RetentionPass = (run: {
  cutoff: Date;
  now: Date;
  shouldStop(): boolean;
  removed: { pruned: number; forwarded: number; anonymised: number; spool: SpoolPruneSummary };
}) => Promise<unknown>;

export interface RetentionScheduleOptions {
  days: number;
  clock: Clock;
  logger: Logger;
  /** What the summary lines carry besides `retention_days` (a replica's spool: `replica`). */
  fields?: Readonly<Record<string, unknown>>;
  /** What a failed pass logs (a locked file aside): one of {@link RETENTION_FAILED}. */
  failure: { level: 'warn' | 'error'; message: string };
  /** @default 3600000 (hourly) */
  everyMs?: number;
  /** @default 60000 (a minute) */
  lockedRetryMs?: number;
}

/**
 * RETENTION_DAYS' timer, for every pass on a local SQLite file (SQLite mode's log, a replica's
 * spool): a first pass at start on the next turn of the event loop (startup is not held up), then
 * hourly; never two at once (a pass still walking when the next hour comes is left to finish).
 * What a pass removed is logged with retentionLog, also when it failed or was stopped half-way (its
 * batches committed). A failure is logged and tried again at the next hour, in a minute when
 * another connection held the file's write lock (a `prune` command beside it). `stop()` waits for
 * nothing: the pass walking then ends after its batch.
 */
export function scheduleRetention(pass: RetentionPass, options: RetentionScheduleOptions): { stop(): void } {
  const { logger, days, clock, failure } = options;
  const fields = { retention_days: days, ...options.fields };
  let retry: NodeJS.Timeout | null = null;
  let running = false;
  let stopped = false;
  const failed = (err: unknown) => {
    if (err instanceof PassInterrupted) return;
    if (isLockBusy(err) && retry === null) {
      logger.warn({ err: (err as Error).message }, 'retention: database locked; trying again in a minute');
      retry = setTimeout(() => {
        retry = null;
        void run();
      }, options.lockedRetryMs ?? LOCKED_RETRY_MS).unref();
      return;
    }
    logger[failure.level]({ err: (err as Error).message }, failure.message);
  };
  const run = async () => {
    if (running || stopped) return;
    running = true;
    const removed = { pruned: 0, forwarded: 0, anonymised: 0, spool: { deliveries: 0, events: 0 } };
    const now = clock.now();
    try {
      await pass({ cutoff: retentionCutoff(now, days), now, shouldStop: () => stopped, removed });
    } catch (err) {
      failed(err);
    } finally {
      running = false;
      for (const line of retentionLog(removed, fields)) logger.info(line.fields, line.message);
    }
  };
  const timer = setInterval(() => void run(), options.everyMs ?? PRUNE_INTERVAL_MS).unref();
  const first = setImmediate(() => void run());
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
      clearImmediate(first);
      if (retry) clearTimeout(retry);
    },
  };
}

/** Where each kind of batch of the log's pass is counted. */
const SUMMED = { bodies: 'pruned', messages: 'forwarded', proposals: 'anonymised' } as const;

/** SQLite mode's log: old bodies, old messages delivered everywhere, old proposals' personal data. */
export function storePass(log: StoreSql): RetentionPass {
  return ({ cutoff, now, shouldStop, removed }) =>
    prunePass(log, cutoff, now, {
      shouldStop,
      onBatch: (b) => void (removed[SUMMED[b.kind as keyof typeof SUMMED]] += b.rows),
    });
}

/**
 * Cluster mode: this replica's own spool, of relayed rows (sqlite/spool.ts `pruneSpoolPaced`). Local
 * only, so it runs whether PostgreSQL answers or not (it removes nothing not relayed yet).
 */
export function spoolPass(spool: Pick<Spool, 'pruneBatch'>, batch?: number): RetentionPass {
  return ({ cutoff, shouldStop, removed }) =>
    pruneSpoolPaced(spool, cutoff, removed.spool, { batch, shouldStop });
}
