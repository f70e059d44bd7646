import type { Clock } from '../../clock';
import type { Logger } from '../../logger';
import type { ProcessingLease } from '../../sqlite/processing-lease';

/**
 * Who processes a database file when several receivers share it (a rolling deploy overlapping on
 * one volume, or two started by mistake): every process ingests, exactly one at a time processes.
 * Each process tries to take or renew the lease every `ttlMs / 5`. The holder processes only while
 * its last renewal is fresh: it stops one renewal interval before the lease could expire, so the
 * old and the new holder never overlap. A holder that was SIGKILLed renews nothing; a standby takes
 * over once the lease expires, at most `ttlMs` plus one interval later. A clean stop releases the
 * lease, and a standby takes over at its next try.
 */

export interface LeadershipOptions {
  /** This process's name in the lease row (host, pid and a random part). */
  holder: string;
  /** PROCESSING_LEASE_MS: how long a lease lasts without renewal. @default 3000 */
  ttlMs: number;
  clock: Clock;
  logger: Logger;
  /** Starts processing (the pipeline recovers everything pending, the poller and retention start). */
  onGained: () => void;
  /** Stops processing and waits for the running turn; called once for each `onGained`. */
  onLost: () => Promise<void>;
  /** After stop() released the lease (closes the lease's connection). @default nothing */
  onStopped?: () => void;
}

export class ProcessingLeadership {
  private timer: NodeJS.Timeout | null = null;
  private holding = false;
  /** The holder processes until then (monotonic ms); past it, it stops even if it could not renew. */
  private freshUntil = 0;
  /** Gains and losses run one after the other, never interleaved. */
  private transitions: Promise<void> = Promise.resolve();

  constructor(
    private readonly lease: ProcessingLease,
    private readonly options: LeadershipOptions,
  ) {}

  private get intervalMs(): number {
    return Math.max(50, Math.floor(this.options.ttlMs / 5));
  }

  /** Whether this process processes now. */
  get isHolder(): boolean {
    return this.holding;
  }

  start(): void {
    this.tick();
    this.timer = setInterval(() => this.tick(), this.intervalMs).unref();
  }

  /** Stops trying; when holding, stops processing first, then releases the lease for a standby. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.holding) this.lose('this process is stopping');
    await this.transitions;
    try {
      this.lease.release(this.options.holder);
    } catch (err) {
      this.options.logger.warn(
        { err: (err as Error).message },
        'could not release the processing lease: a standby takes over when it expires',
      );
    }
    this.options.onStopped?.();
  }

  /** One try to take or renew. Never throws: a locked database is a failed try. */
  tick(): void {
    const { clock, ttlMs, holder } = this.options;
    const startedAt = clock.monotonic();
    let row;
    try {
      const now = clock.now();
      row = this.lease.acquire(holder, now.toISOString(), new Date(now.getTime() + ttlMs).toISOString());
    } catch (err) {
      // The lease could not be written (another connection holds the write lock): keep processing
      // while the last renewal is fresh, stop after.
      if (this.holding && clock.monotonic() >= this.freshUntil)
        this.lose(`the lease could not be renewed (${(err as Error).message})`);
      return;
    }
    if (row === undefined) {
      if (this.holding) this.lose('another process holds the lease');
      return;
    }
    this.freshUntil = startedAt + ttlMs - this.intervalMs;
    if (!this.holding) this.gain(row.acquired_at);
  }

  private gain(since: string): void {
    const { logger, holder } = this.options;
    this.holding = true;
    this.transitions = this.transitions.then(() => {
      logger.info(
        { holder, since },
        'processing lease taken: this process runs the pipeline, the poller and retention',
      );
      try {
        this.options.onGained();
      } catch (err) {
        logger.error({ err: (err as Error).message }, 'processing could not start; trying again');
        this.holding = false;
      }
    });
  }

  private lose(why: string): void {
    this.holding = false;
    this.transitions = this.transitions.then(async () => {
      this.options.logger.warn({ holder: this.options.holder, why }, 'processing stopped: standby');
      try {
        await this.options.onLost();
      } catch (err) {
        this.options.logger.error({ err: (err as Error).message }, 'error while stopping processing');
      }
    });
  }
}
