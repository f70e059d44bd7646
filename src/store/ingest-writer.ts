import type { Transaction } from 'better-sqlite3';
import { StorageError } from '../domain/errors';
import type { Db } from './database';
import type { DeliveriesRepo, NewDelivery } from './deliveries';
import type { EventStatus, EventsRepo, NewEvent } from './events';

/**
 * Group commit. Every webhook request must be on disk before its 200 leaves, and with
 * `synchronous=FULL` each commit costs an fsync. Requests that arrive together are written in one
 * transaction: the first one schedules a flush with `setImmediate`, so a lone request is written
 * at once (no timer, no added delay), while the requests whose bytes arrived in the same turn of
 * the event loop join its batch. Each request's promise settles only after its batch committed.
 */

/** Audit rows kept for a later batch while the disk refuses writes. */
const MAX_DEFERRED_AUDIT = 10_000;

export type IngestOutcome = 'accepted' | 'duplicate' | 'quarantined';

export interface IngestResult {
  outcome: IngestOutcome;
  eventId: number;
  /** Status of the stored event (for a duplicate: the status it was first stored with). */
  status: EventStatus;
}

/** The delivery row of a stored event: its outcome is decided inside the transaction. */
export type PendingDelivery = Omit<
  NewDelivery,
  'outcome' | 'httpStatus' | 'eventId' | 'durationMs' | 'dedupKey'
> & {
  /** Monotonic start of the request, for `duration_ms` measured at write time. */
  startedAt: number;
};

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

export interface IngestWriterOptions {
  maxBatch?: number;
  /** Monotonic milliseconds (performance.now). */
  monotonic?: () => number;
  onBatch?: (info: BatchInfo) => void;
  /**
   * Called when the audit rows of a failed batch could not be written either; they are retried
   * with the next batch, `dropped` of them only beyond MAX_DEFERRED_AUDIT.
   */
  onAuditError?: (err: Error, dropped: number) => void;
  /** Called once per inserted event, after its commit (the pipeline's hook). */
  onStored?: (eventId: number, event: NewEvent) => void;
}

export class IngestWriter {
  private queue: Item[] = [];
  private scheduled: NodeJS.Immediate | null = null;
  private closed = false;
  private readonly maxBatch: number;
  private readonly monotonic: () => number;
  private readonly commit: Transaction<(items: Item[]) => (IngestResult | null)[]>;

  constructor(
    private readonly db: Db,
    private readonly events: EventsRepo,
    private readonly deliveries: DeliveriesRepo,
    private readonly options: IngestWriterOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 512;
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
    // Only what is queued now: rows put back by a failed batch wait for the next flush.
    const pending = this.queue;
    this.queue = [];
    for (let i = 0; i < pending.length; i += this.maxBatch)
      this.writeBatch(pending.slice(i, i + this.maxBatch));
  }

  /** Flushes what is queued and refuses further work (shutdown). */
  close(): void {
    this.flush();
    this.closed = true;
  }

  get queued(): number {
    return this.queue.length;
  }

  private enqueue(item: Item): void {
    this.queue.push(item);
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
    const storageError = new StorageError(`storage write failed: ${error.message}`, { cause: error });
    // Nothing of this batch is stored: every request in it gets 503 and the service retries.
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
    // The same failure may stop this write too: then the audit rows wait for the next batch
    // (never scheduled on their own, so a broken disk does not spin), bounded in number.
    try {
      this.db.transaction(() => {
        for (const d of audit) this.deliveries.insert(d);
      })();
    } catch (err) {
      const room = Math.max(0, MAX_DEFERRED_AUDIT - this.queue.length);
      this.queue.unshift(...audit.slice(0, room).map((delivery): AuditItem => ({ type: 'audit', delivery })));
      this.options.onAuditError?.(err as Error, audit.length - Math.min(room, audit.length));
    }
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
