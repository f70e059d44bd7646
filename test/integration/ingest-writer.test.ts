import { join } from 'node:path';
import { StorageError } from '../../src/domain/errors';
import {
  type AuditLoss,
  type BatchInfo,
  IngestWriter,
  type PendingDelivery,
} from '../../src/sqlite/ingest-writer';
import { openStore, type Store } from '../../src/sqlite/store';
import { deliveriesByOutcome, eventByDedupKey, pendingEvent } from '../helpers/events';
import { tempDir } from '../helpers/tmp';

let tmp: ReturnType<typeof tempDir>;
let store: Store;
let batches: BatchInfo[];
let writer: IngestWriter;

beforeEach(() => {
  tmp = tempDir();
  store = openStore(join(tmp.dir, 'w.db'), { migrate: true });
  batches = [];
  writer = new IngestWriter(store.db, store.events, store.deliveries, {
    maxBatch: 16,
    onBatch: (b) => batches.push(b),
  });
});
afterEach(() => {
  writer.close();
  store.close();
  tmp.cleanup();
});

const event = (key: string) => pendingEvent(key);

const delivery: PendingDelivery = {
  receivedAt: '2026-11-21T00:00:00.000Z',
  path: '/webhooks',
  bodyBytes: 10,
  secretIndex: 0,
  remoteAddr: null,
  detail: null,
  startedAt: performance.now(),
};

describe('IngestWriter (group commit)', () => {
  it('writes requests submitted in the same turn in one transaction', async () => {
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => writer.ingest(event(`k${i}`), delivery)),
    );
    expect(results.map((r) => r.outcome)).toEqual(Array(10).fill('accepted'));
    expect(batches.map((b) => b.size)).toEqual([10]);
  });

  it('a lone request is written on the next turn, without waiting for company', async () => {
    let written = false;
    const ingested = writer.ingest(event('alone'), delivery).then(() => (written = true));
    // One turn: an immediate queued after the writer's own has run. A writer that waited for
    // company on a timer (even setTimeout 0, which runs in the turn after) would not have written.
    await new Promise((resolve) => setImmediate(resolve));
    expect(written).toBe(true);
    await ingested;
    expect(batches.map((b) => b.size)).toEqual([1]);
  });

  it('splits at maxBatch', async () => {
    await Promise.all(Array.from({ length: 40 }, (_, i) => writer.ingest(event(`m${i}`), delivery)));
    expect(batches.map((b) => b.size)).toEqual([16, 16, 8]);
  });

  it('duplicates inside one batch: the first is accepted, the rest counted', async () => {
    const results = await Promise.all(
      Array.from({ length: 5 }, () => writer.ingest(event('same'), delivery)),
    );
    expect(results.map((r) => r.outcome)).toEqual([
      'accepted',
      'duplicate',
      'duplicate',
      'duplicate',
      'duplicate',
    ]);
    expect(eventByDedupKey(store.db, 'same')?.duplicates).toBe(4);
  });

  it('a failed batch rejects every request in it and stores none of them', async () => {
    store.db.exec(
      "CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.dedup_key = 'bad' BEGIN SELECT RAISE(ABORT, 'boom'); END",
    );
    const settled = await Promise.allSettled([
      writer.ingest(event('good'), delivery),
      writer.ingest(event('bad'), delivery),
    ]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected']);
    expect((settled[0] as PromiseRejectedResult).reason).toBeInstanceOf(StorageError);
    expect(eventByDedupKey(store.db, 'good')).toBeUndefined();
    expect(deliveriesByOutcome(store.db)).toEqual({ storage_unavailable: 2 });
  });

  it('refuses work after close', async () => {
    writer.close();
    await expect(writer.ingest(event('late'), delivery)).rejects.toBeInstanceOf(StorageError);
  });
});

/** A writer on the test's store that records what it reports about lost audit rows. */
function lossyWriter(maxDeferredAudit?: number) {
  const errors: { message: string; dropped: number; loss: AuditLoss }[] = [];
  const droppedCalls: number[] = [];
  const w = new IngestWriter(store.db, store.events, store.deliveries, {
    maxDeferredAudit,
    onAuditError: (err, dropped, loss) => errors.push({ message: err.message, dropped, loss }),
    onAuditDropped: (n) => droppedCalls.push(n),
  });
  return { w, errors, droppedCalls };
}

function ingestAll(w: IngestWriter, keys: string[]) {
  return Promise.allSettled(keys.map((k) => w.ingest(event(k), delivery)));
}

describe('IngestWriter: deliveries rows lost while the disk refuses writes (issue 10, item 6)', () => {
  it('counts the rows dropped beyond maxDeferredAudit, per drop and in total, and writes the rest later', async () => {
    // Every write to `deliveries` fails, as on a full disk, while events could still be written:
    // the batch's transaction fails on its delivery row and the audit write fails the same way.
    store.db.exec(
      "CREATE TRIGGER refuse BEFORE INSERT ON deliveries BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
    );
    const { w, errors, droppedCalls } = lossyWriter(3);

    const first = await ingestAll(w, ['a1', 'a2', 'a3', 'a4', 'a5']);
    expect(first.map((r) => r.status)).toEqual(Array(5).fill('rejected'));
    expect(errors).toEqual([
      { message: 'database or disk is full', dropped: 2, loss: { deferred: 3, droppedTotal: 2 } },
    ]);

    // The 3 kept rows go with the next batch, fail again with its 2 rows: 5 rows, 3 kept.
    await ingestAll(w, ['b1', 'b2']);
    expect(errors[1]).toEqual({
      message: 'database or disk is full',
      dropped: 2,
      loss: { deferred: 3, droppedTotal: 4 },
    });
    expect(droppedCalls).toEqual([2, 2]);
    expect(w.auditRowsDropped).toBe(4);

    store.db.exec('DROP TRIGGER refuse');
    await expect(w.ingest(event('c1'), delivery)).resolves.toMatchObject({ outcome: 'accepted' });
    w.close();
    // Every request is either a row or counted as lost: 5 + 2 + 1 = 4 rows + 4 dropped.
    expect(deliveriesByOutcome(store.db)).toEqual({ storage_unavailable: 3, accepted: 1 });
    expect(errors).toHaveLength(2);
  });

  it('on a full disk, counts the rows still waiting when the writer closes', async () => {
    // A real SQLITE_FULL: the file may not grow beyond its pages, and `deliveries` has filled them.
    const pages = store.db.pragma('page_count', { simple: true }) as number;
    store.db.pragma(`max_page_count = ${pages}`);
    let stored = 0;
    expect(() => {
      for (; stored < 100_000; stored++)
        store.deliveries.insert({
          ...delivery,
          outcome: 'aborted',
          httpStatus: 400,
          dedupKey: null,
          eventId: null,
          durationMs: 0,
        });
    }).toThrow('database or disk is full');
    const { w, errors, droppedCalls } = lossyWriter();

    const settled = await ingestAll(w, ['f1', 'f2', 'f3']);
    expect(settled.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(errors).toEqual([
      { message: 'database or disk is full', dropped: 0, loss: { deferred: 3, droppedTotal: 0 } },
    ]);
    expect(droppedCalls).toEqual([]);

    w.close();

    // No later batch will come: the 3 rows are given up, and said so.
    expect(errors[1]).toEqual({
      message: 'database or disk is full',
      dropped: 3,
      loss: { deferred: 0, droppedTotal: 3 },
    });
    expect(droppedCalls).toEqual([3]);
    expect(store.db.prepare('SELECT count(*) AS n FROM deliveries').get()).toEqual({ n: stored });
  });
});
