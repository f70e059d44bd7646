import type { Transaction } from 'better-sqlite3';
import { isLockBusy, StorageError } from '../domain/errors';
import type { Db } from './database';
import type { IngestOutcome, IngestResult, NewDelivery, PendingDelivery } from '../domain/delivery';
import type { NewEvent } from '../domain/event-status';
import type { DeliveriesRepo, EventsRepo } from './store';

/**
 * Group commit. Every webhook request must be on disk before its 200 leaves, and with
 * `synchronous=FULL` each commit costs an fsync. Requests that arrive together are written in one
 * transaction: the first one schedules a flush with `setImmediate`, so a lone request is written
 * at once (no timer, no added delay), while the requests whose bytes arrived in the same turn of
 * the event loop join its batch. Each request's promise settles only after its batch committed.
 *
 * Another connection's write lock (a second receiver on the file, a backup, a shell) is waited for
 * without holding the event loop: the connection's busy timeout is a short slice, and a batch that
 * finds the file locked stays queued and is tried again after a pause, while other requests are
 * read and join it. A request whose own wait reaches `lockWaitMs` gets its 503 at that moment.
 */

export type { PendingDelivery } from '../domain/delivery';

interface IngestItem {
  type: 'ingest';
  event: NewEvent;
  delivery: PendingDelivery;
  resolve: (r: IngestResult) => void;
  reject: (e: Error) => void;
}

interface AuditItem {
  type: 'audit';
  delivery: NewDelivery;
}

type Item = IngestItem | AuditItem;

export interface BatchInfo {
  size: number;
  durationMs: number;
  ok: boolean;
}

/** The `deliveries` audit rows at the moment their write failed. */
export interface AuditLoss {
  /** Rows kept in memory, written with the next batch. */
  deferred: number;
  /** Rows lost since this writer started, `dropped` included. */
  droppedTotal: number;
}

export interface IngestWriterOptions {
  /** @default 512 */
  maxBatch?: number;
  /**
   * Monotonic milliseconds.
   * @default performance.now
   */
  monotonic?: () => number;
  onBatch?: (info: BatchInfo) => void;
  /**
   * Audit rows kept in memory for a later batch while the disk refuses writes; beyond it, and at
   * close, they are dropped (and counted).
   * @default 10000
   */
  maxDeferredAudit?: number;
  /**
   * Called when the audit rows of a failed batch could not be written either; they are retried
   * with the next batch, except `dropped` of them: those beyond `maxDeferredAudit`, or all of them
   * when the writer is closing.
   */
  onAuditError?: (err: Error, dropped: number, loss: AuditLoss) => void;
  /** Called with the number of `deliveries` rows given up, each time some are (the metric's hook). */
  onAuditDropped?: (dropped: number) => void;
  /** Called once per inserted event, after its commit (the pipeline's hook). */
  onStored?: (eventId: number, event: NewEvent) => void;
  /**
   * How long a request waits, in all, for another connection's write lock before it is refused
   * (SQLITE_BUSY_TIMEOUT_MS). Each attempt blocks for the connection's busy timeout only.
   * @default 1000
   */
  lockWaitMs?: number;
  /**
   * The pause between two attempts while the file is locked; the event loop is free meanwhile.
   * @default 10
   */
  lockRetryPauseMs?: number;
}

export class IngestWriter {
  private queue: Item[] = [];
  private scheduled: NodeJS.Immediate | null = null;
  /** Set while the file is locked by another connection: the next attempt. */
  private lockRetry: NodeJS.Timeout | null = null;
  private closed = false;
  private droppedTotal = 0;
  private readonly maxBatch: number;
  private readonly maxDeferredAudit: number;
  private readonly monotonic: () => number;
  private readonly commit: Transaction<(items: Item[]) => (IngestResult | null)[]>;

  constructor(
    private readonly db: Db,
    private readonly events: EventsRepo,
    private readonly deliveries: DeliveriesRepo,
    private readonly options: IngestWriterOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 512;
    this.maxDeferredAudit = options.maxDeferredAudit ?? 10_000;
    this.monotonic = options.monotonic ?? (() => performance.now());
    this.commit = this.db.transaction((items: Item[]) =>
      items.map((item) => {
        if (item.type === 'ingest') return this.writeIngest(item);
        this.deliveries.insert(item.delivery);
        return null;
      }),
    );
  }

  /** Stores one verified delivery; resolves once it is committed, rejects with StorageError. */
  ingest(event: NewEvent, delivery: PendingDelivery): Promise<IngestResult> {
    if (this.closed) return Promise.reject(new StorageError('the store is closed (shutting down)'));
    return new Promise<IngestResult>((resolve, reject) => {
      this.enqueue({ type: 'ingest', event, delivery, resolve, reject });
    });
  }

  /** Records a request that stores nothing (401, 413, aborted): written with the next batch. */
  audit(delivery: NewDelivery): void {
    if (this.closed) return;
    this.enqueue({ type: 'audit', delivery });
  }

  /** Writes everything queued now, synchronously. */
  flush(): void {
    if (this.scheduled) {
      clearImmediate(this.scheduled);
      this.scheduled = null;
    }
    if (this.lockRetry) {
      clearTimeout(this.lockRetry);
      this.lockRetry = null;
    }
    // Only what is queued now: rows put back by a failed batch wait for the next flush.
    const pending = this.queue;
    this.queue = [];
    for (let i = 0; i < pending.length; i += this.maxBatch) {
      this.writeBatch(pending.slice(i, i + this.maxBatch));
      if (this.lockRetry !== null) {
        // The file is locked: the rest waits for the same next attempt.
        this.queue.push(...pending.slice(i + this.maxBatch));
        break;
      }
    }
  }

  /**
   * Flushes what is queued and refuses further work (shutdown). Audit rows whose write fails now
   * have no later batch: they are dropped and counted.
   */
  close(): void {
    this.closed = true;
    this.flush();
  }

  /** `deliveries` rows lost since this writer started (the disk refused them too long). */
  get auditRowsDropped(): number {
    return this.droppedTotal;
  }

  get queued(): number {
    return this.queue.length;
  }

  private enqueue(item: Item): void {
    this.queue.push(item);
    // While the file is locked, new requests join the batch that waits for the next attempt.
    if (this.lockRetry !== null) return;
    if (this.queue.length >= this.maxBatch) {
      this.flush();
    } else if (this.scheduled === null) {
      this.scheduled = setImmediate(() => {
        this.scheduled = null;
        this.flush();
      });
    }
  }

  private writeIngest(item: IngestItem): IngestResult {
    const { id, duplicate, status } = this.events.insertOrCountDuplicate(item.event);
    const outcome: IngestOutcome = duplicate
      ? 'duplicate'
      : item.event.status === 'invalid'
        ? 'quarantined'
        : 'accepted';
    const { startedAt, ...rest } = item.delivery;
    this.deliveries.insert({
      ...rest,
      outcome,
      httpStatus: 200,
      dedupKey: item.event.dedupKey,
      eventId: id,
      durationMs: round(this.monotonic() - startedAt),
    });
    return { outcome, eventId: id, status };
  }

  private writeBatch(batch: Item[]): void {
    const started = this.monotonic();
    let error: Error | null = null;
    let results: (IngestResult | null)[] = [];
    try {
      results = this.commit.immediate(batch);
    } catch (err) {
      error = err as Error;
    }
    if (error !== null && !this.closed && isLockBusy(error)) {
      this.waitForLock(batch, error);
      return;
    }
    this.options.onBatch?.({
      size: batch.length,
      durationMs: this.monotonic() - started,
      ok: error === null,
    });
    if (error === null) {
      batch.forEach((item, i) => {
        if (item.type !== 'ingest') return;
        const result = results[i];
        if (!result) {
          item.reject(new StorageError('internal: no result for a committed item'));
          return;
        }
        if (result.outcome !== 'duplicate') this.options.onStored?.(result.eventId, item.event);
        item.resolve(result);
      });
      return;
    }
    // Nothing of this batch is stored: every request in it gets 503 and the service retries.
    this.writeAudit(this.refuse(batch, error));
  }

  /**
   * Another connection holds the write lock and nothing was written: requests still inside their
   * `lockWaitMs` go back to the head of the queue for the next attempt, the others are refused now.
   */
  private waitForLock(batch: Item[], error: Error): void {
    const lockWaitMs = this.options.lockWaitMs ?? 1000;
    const now = this.monotonic();
    const keep: Item[] = [];
    const refuse: Item[] = [];
    for (const item of batch) {
      if (item.type === 'ingest' && now - item.delivery.startedAt >= lockWaitMs) refuse.push(item);
      else keep.push(item);
    }
    this.queue.unshift(...keep);
    // Their audit rows wait for the batch that gets the lock (writing them now would wait too).
    if (refuse.length > 0) this.deferAudit(this.refuse(refuse, error), error, false);
    // Only a waiting request is worth another attempt: audit rows alone wait for the next batch, so
    // a file locked for hours does not keep the event loop busy.
    if (this.lockRetry === null && this.queue.some((item) => item.type === 'ingest')) {
      this.lockRetry = setTimeout(() => {
        this.lockRetry = null;
        this.flush();
      }, this.options.lockRetryPauseMs ?? 10);
    }
  }

  /** Every request of `batch` gets its 503; returns their audit rows and the batch's own. */
  private refuse(batch: Item[], error: Error): NewDelivery[] {
    const storageError = new StorageError(`storage write failed: ${error.message}`, { cause: error });
    const audit: NewDelivery[] = [];
    for (const item of batch) {
      if (item.type === 'ingest') {
        item.reject(storageError);
        const { startedAt, ...rest } = item.delivery;
        audit.push({
          ...rest,
          outcome: 'storage_unavailable',
          httpStatus: 503,
          dedupKey: item.event.dedupKey,
          eventId: null,
          durationMs: round(this.monotonic() - startedAt),
          detail: error.message.slice(0, 200),
        });
      } else {
        audit.push(item.delivery);
      }
    }
    return audit;
  }

  /**
   * The same failure may stop this write too: then the audit rows wait for the next batch (never
   * scheduled on their own, so a broken disk does not spin), at most `maxDeferredAudit` of them.
   */
  private writeAudit(audit: NewDelivery[]): void {
    try {
      this.db.transaction(() => {
        for (const d of audit) this.deliveries.insert(d);
      })();
    } catch (err) {
      this.deferAudit(audit, err as Error, true);
    }
  }

  /**
   * Keeps audit rows for the next batch, at most `maxDeferredAudit` queued items (none once
   * closing); the rest are dropped and counted. A lock wait is reported only when rows are dropped.
   */
  private deferAudit(audit: NewDelivery[], err: Error, report: boolean): void {
    const room = this.closed ? 0 : Math.max(0, this.maxDeferredAudit - this.queue.length);
    const kept = audit.slice(0, room);
    this.queue.unshift(...kept.map((delivery): AuditItem => ({ type: 'audit', delivery })));
    const dropped = audit.length - kept.length;
    this.droppedTotal += dropped;
    if (dropped > 0) this.options.onAuditDropped?.(dropped);
    if (report || dropped > 0)
      this.options.onAuditError?.(err, dropped, {
        deferred: this.queue.length,
        droppedTotal: this.droppedTotal,
      });
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
