import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Db } from '../store/database';
import { retentionCutoff, retentionLog } from '../domain/retention';
import { isLockBusy } from '../store/database-errors';
import { pruneSqlite } from '../store/retention';

/** How often RETENTION_DAYS is applied after the first pass at start. */
const PRUNE_INTERVAL_MS = 3_600_000;
/** A pass that found the file locked by another connection is tried again this much later. */
const LOCKED_RETRY_MS = 60_000;

/**
 * RETENTION_DAYS: removes the bodies of old finished events, and old forwarded messages delivered to
 * every destination, at start (on the next turn of the
 * event loop, so startup is not held up) and then hourly, in the short transactions of
 * store/retention.ts. A failed pass is logged and tried again at the next hour (in a minute when
 * another connection held the write lock).
 */
export function scheduleRetention(db: Db, days: number, clock: Clock, logger: Logger): { stop(): void } {
  let retry: NodeJS.Timeout | null = null;
  const prune = () => {
    try {
      const now = clock.now();
      const summary = pruneSqlite(db, retentionCutoff(now, days), now);
      for (const line of retentionLog(summary, { retention_days: days }))
        logger.info(line.fields, line.message);
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
