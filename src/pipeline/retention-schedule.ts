import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Db } from '../store/database';
import { RETENTION_LOG, retentionCutoff } from '../domain/retention';
import { isLockBusy } from '../store/database-errors';
import { pruneBodies, pruneForwarded } from '../store/retention';

/** How often RETENTION_DAYS is applied after the first pass at start. */
const PRUNE_INTERVAL_MS = 3_600_000;
/** A pass that found the file locked by another connection is tried again this much later. */
const LOCKED_RETRY_MS = 60_000;

/**
 * RETENTION_DAYS: removes the bodies of old finished events, and old forwarded messages delivered to
 * every destination, at start (on the next turn of the
 * event loop, so startup is not held up) and then hourly, in the short transactions of
 * {@link pruneBodies}. A failed pass is logged and tried again at the next hour (in a minute when
 * another connection held the write lock).
 */
export function scheduleRetention(db: Db, days: number, clock: Clock, logger: Logger): { stop(): void } {
  let retry: NodeJS.Timeout | null = null;
  const prune = () => {
    try {
      const now = clock.now();
      const cutoff = retentionCutoff(now, days);
      const { pruned } = pruneBodies(db, cutoff, now);
      if (pruned > 0) logger.info({ pruned, retention_days: days }, RETENTION_LOG.bodies);
      const forwarded = pruneForwarded(db, cutoff).pruned;
      if (forwarded > 0) logger.info({ forwarded, retention_days: days }, RETENTION_LOG.forwarded);
    } catch (err) {
      if (isLockBusy(err) && retry === null) {
        logger.warn({ err: (err as Error).message }, 'retention: database locked; trying again in a minute');
        retry = setTimeout(() => {
          retry = null;
          prune();
        }, LOCKED_RETRY_MS);
        retry.unref();
        return;
      }
      logger.error({ err: (err as Error).message }, 'retention: prune failed; trying again in an hour');
    }
  };
  const timer = setInterval(prune, PRUNE_INTERVAL_MS);
  timer.unref();
  const first = setImmediate(prune);
  return {
    stop() {
      clearInterval(timer);
      clearImmediate(first);
      if (retry) clearTimeout(retry);
    },
  };
}
