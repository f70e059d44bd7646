import { join } from 'node:path';
import { StorageError } from '../../src/domain/errors';
import type { NewEvent } from '../../src/store/events';
import { type BatchInfo, IngestWriter, type PendingDelivery } from '../../src/store/ingest-writer';
import { openStore, type Store } from '../../src/store/store';
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

function event(key: string): NewEvent {
  return {
    dedupKey: key,
    webhookId: key,
    kind: 'event',
    evento: 'proposta.criada',
    nuProposta: 1,
    requestId: null,
    registryStatus: null,
    tentativa: 1,
    receivedAt: new Date().toISOString(),
    body: `{"k":"${key}"}`,
    bodyBytes: 10,
    status: 'pending',
    lastError: null,
  };
}

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
    const started = Date.now();
    await writer.ingest(event('alone'), delivery);
    expect(batches.map((b) => b.size)).toEqual([1]);
    // No timer is involved: setImmediate only (no wall-clock assertion; the batch count says it).
    expect(Date.now() - started).toBeLessThan(60_000);
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
    expect(store.events.getByDedupKey('same')?.duplicates).toBe(4);
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
    expect(store.events.getByDedupKey('good')).toBeUndefined();
    expect(store.deliveries.countByOutcome()).toEqual({ storage_unavailable: 2 });
  });

  it('refuses work after close', async () => {
    writer.close();
    await expect(writer.ingest(event('late'), delivery)).rejects.toBeInstanceOf(StorageError);
  });
});
