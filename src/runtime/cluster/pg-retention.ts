import type { PgBoss } from 'pg-boss';
import { prunePass } from '../../core/prune-pass';
import { type PruneSummary, retentionCutoff, retentionLog } from '../../domain/retention';
import type { StoreSql } from '../../domain/sql/store-sql';
import type { ClusterLogger } from '../../postgres/pg-sql';

/**
 * RETENTION_DAYS in cluster mode (contract §10): when PostgreSQL's pass runs. The pass itself is
 * core/prune-pass.ts's, the same statements as SQLite mode's, in batches of one short transaction
 * each (row locks that skip what another transaction holds), so that the relay and the turns never
 * wait on it for long. A pass that stops half-way (a replica dies, shuts down, loses PostgreSQL)
 * leaves only whole batches behind; the next pass walks the table again and finds what is left.
 *
 * Once per hour cluster-wide, not once per replica: every replica with RETENTION_DAYS offers a pass
 * to pg-boss as a *throttled* job (`sendThrottled`, one job per clock hour: pg-boss's unique index
 * on the queue, the slot and the key refuses the others), and whichever replica's worker fetches
 * it runs it. A replica that dies mid-pass stops its job's heartbeat; pg-boss then retries the job
 * on another replica, which walks the table again.
 */

/** The pg-boss queue of retention passes. */
export const RETENTION_QUEUE = 'consig_retention';

export interface ClusterRetentionOptions {
  /** RETENTION_DAYS of this replica (carried by the jobs it offers). */
  days: number;
  replicaId: string;
  /** The replica's pool, each write one transaction on a connection of it. */
  log: StoreSql;
  logger: Pick<ClusterLogger, 'info' | 'warn'>;
  now(): Date;
  /** True once the replica is shutting down: a running pass ends after its batch. */
  stopping(): boolean;
  /** How often this replica offers a pass (a refused offer costs one insert). @default 300000 */
  offerEveryMs?: number;
  /** At most one pass per this many seconds, cluster-wide (slots aligned on the epoch). @default 3600 */
  slotSeconds?: number;
  /** After each finished pass on this replica. */
  onPass?(summary: PruneSummary & { ms: number }): void;
}

/**
 * Creates the queue, registers this replica's worker and offers a pass now and every
 * `offerEveryMs`. The queue's settings:
 * - completed jobs are kept two days (`deleteAfterSeconds`): the slot's job must outlive the slot,
 *   or a later offer in the same hour would find the slot free again;
 * - a 30 s heartbeat, which pg-boss's worker beats by itself: a replica that dies mid-pass is
 *   noticed within it, and the job is retried (30 s later) on another replica;
 * - a pass stopped by a shutdown throws, so that it is retried elsewhere too.
 */
export async function startClusterRetention(
  boss: PgBoss,
  options: ClusterRetentionOptions,
): Promise<{ stop(): void }> {
  const slotSeconds = options.slotSeconds ?? 3600;
  await boss.createQueue(RETENTION_QUEUE, {
    retryLimit: 5,
    retryDelay: 30,
    heartbeatSeconds: 30,
    expireInSeconds: Math.max(3600, slotSeconds),
    deleteAfterSeconds: Math.max(2 * 86_400, 2 * slotSeconds),
    notify: true,
  });
  // A pass job carries the offering replica's RETENTION_DAYS.
  await boss.work<{ days: number }>(
    RETENTION_QUEUE,
    { localConcurrency: 1, batchSize: 1, pollingIntervalSeconds: 5, notifyPollingIntervalSeconds: 30 },
    async (jobs) => {
      for (const job of jobs)
        await runPass(job.data.days, job.signal, options).catch((err: unknown) => {
          // Failed: pg-boss runs the job again (30 s later, on whichever replica fetches it first).
          options.logger.warn(
            { err: (err as Error).message, replica: options.replicaId },
            'retention: pass on PostgreSQL stopped before its end; what it committed stays, and it runs again',
          );
          throw err;
        });
    },
  );
  const offer = () =>
    boss
      .sendThrottled(RETENTION_QUEUE, { days: options.days }, null, slotSeconds, 'retention')
      .catch((err) =>
        options.logger.warn(
          { err: (err as Error).message },
          'retention: could not offer the hourly pass to pg-boss; offering it again later',
        ),
      );
  await offer();
  const timer = setInterval(() => void offer(), options.offerEveryMs ?? 300_000);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

async function runPass(days: number, signal: AbortSignal, options: ClusterRetentionOptions): Promise<void> {
  const started = performance.now();
  const now = options.now();
  const cutoff = retentionCutoff(now, days);
  let longest = 0;
  const summary = await prunePass(options.log, cutoff, now, {
    // pg-boss aborts the signal when the job's claim is gone (another replica took it over).
    shouldStop: () => options.stopping() || signal.aborted,
    onBatch: (b) => void (longest = Math.max(longest, b.ms)),
  });
  const ms = Math.round(performance.now() - started);
  const fields = { retention_days: days, replica: options.replicaId };
  for (const line of retentionLog(summary, fields)) options.logger.info(line.fields, line.message);
  options.logger.info(
    { ...summary, ...fields, duration_ms: ms, longest_batch_ms: Math.round(longest) },
    'retention: pass on PostgreSQL finished',
  );
  options.onPass?.({ ...summary, ms });
}
