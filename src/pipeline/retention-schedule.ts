import type { Clock } from '../clock';
import type { Logger } from '../logger';
import type { Db } from '../store/database';
import { PassInterrupted, prunePass } from '../core/retention';
import { retentionCutoff, retentionLog } from '../domain/retention';
import { isLockBusy } from '../store/database-errors';
import { sqliteLogSql } from '../store/log-sql';

/** How often RETENTION_DAYS is applied after the first pass at start. */
const PRUNE_INTERVAL_MS = 3_600_000;
/** A pass that found the file locked by another connection is tried again this much later. */
const LOCKED_RETRY_MS = 60_000;

/**
 * RETENTION_DAYS: removes the bodies of old finished events, and old forwarded messages delivered to
 * every destination, at start (on the next turn of the
 * event loop, so startup is not held up) and then hourly, in the short transactions of
 * core/retention.ts, a turn of the event loop between two. A failed pass is logged and tried again
 * at the next hour (in a minute when another connection held the write lock).
 */
export function scheduleRetention(db: Db, days: number, clock: Clock, logger: Logger): { stop(): void } {
  const log = sqliteLogSql(db);
  let retry: NodeJS.Timeout | null = null;
  let running = false;
  let stopped = false;
  const prune = async () => {
    // A pass still walking when the next hour comes (or the locked retry) is left to finish.
    if (running || stopped) return;
    running = true;
    try {
      const now = clock.now();
      // Stopped (shutdown, before the file closes): the pass ends after its batch.
      const summary = await prunePass(log, retentionCutoff(now, days), now, { shouldStop: () => stopped });
      for (const line of retentionLog(summary, { retention_days: days }))
        logger.info(line.fields, line.message);
    } catch (err) {
      if (err instanceof PassInterrupted) return;
      if (isLockBusy(err) && retry === null) {
        logger.warn({ err: (err as Error).message }, 'retention: database locked; trying again in a minute');
        retry = setTimeout(() => {
          retry = null;
          void prune();
        }, LOCKED_RETRY_MS);
        retry.unref();
        return;
      }
      logger.error({ err: (err as Error).message }, 'retention: prune failed; trying again in an hour');
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => void prune(), PRUNE_INTERVAL_MS);
  timer.unref();
  const first = setImmediate(() => void prune());
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
      clearImmediate(first);
      if (retry) clearTimeout(retry);
    },
  };
}
