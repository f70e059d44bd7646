import { join } from 'node:path';
import { createLogger } from '../../src/logger';
import { StorageError } from '../../src/domain/errors';
import { Pipeline } from '../../src/runtime/single/pipeline';
import { type Db, EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase, setBusyTimeout } from '../../src/sqlite/database';
import { type AuditLoss, type BatchInfo, IngestWriter } from '../../src/sqlite/ingest-writer';
import { openStore, type Store } from '../../src/sqlite/store';
import { delivery } from '../helpers/payloads';
import { eventually, startTestReceiver } from '../helpers/receiver';
import { pendingEvent } from '../helpers/events';
import { tempDir } from '../helpers/tmp';

/**
 * Another connection holds the file's write lock (a second receiver, a backup, a `sqlite3` shell):
 * the connections `serve` uses wait for it in short slices, so the event loop that answers webhooks
 * keeps turning. The lock is released by a timer of this same event loop: when a wait blocked the
 * loop for longer than a slice, the release could not run in time and these tests fail.
 */

let tmp: ReturnType<typeof tempDir>;
let path: string;
let store: Store;
/** The other connection, holding `BEGIN IMMEDIATE` while a test says so. */
let other: Db;

beforeEach(() => {
  tmp = tempDir('consig-locked-');
  path = join(tmp.dir, 'locked.db');
  store = openStore(path, { migrate: true });
  setBusyTimeout(store.db, EVENT_LOOP_BUSY_TIMEOUT_MS); // what serve does after migrating
  other = openDatabase(path, { busyTimeoutMs: 0 });
});
afterEach(() => {
  if (other.inTransaction) other.exec('ROLLBACK');
  other.close();
  store.close();
  tmp.cleanup();
});

/** `serve`'s registry schedule. */
const SCHEDULE = { graceMs: 60_000, intervalMs: 30_000, maxIntervalMs: 600_000, maxAgeMs: 86_400_000 };

const event = (key: string) =>
  pendingEvent(
    key,
    `{"evento":"proposta.criada","dados":{"nu_proposta":1},"metadata":{"webhook_id":"${key}"}}`,
  );

function pendingDelivery(startedAt: number) {
  return {
    receivedAt: '2026-11-23T00:00:00.000Z',
    path: '/webhooks',
    bodyBytes: 10,
    secretIndex: 0,
    remoteAddr: null,
    detail: null,
    startedAt,
  };
}

/** Resolves after `turns` timer turns of the event loop (each at least 1 ms apart). */
function loopTurns(turns: number): Promise<void> {
  return new Promise((resolve) => {
    let n = 0;
    const timer = setInterval(() => {
      n += 1;
      if (n >= turns) {
        clearInterval(timer);
        resolve();
      }
    }, 1);
  });
}

function settledState(p: Promise<unknown>): { settled: boolean } {
  const state = { settled: false };
  p.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

const count = (sql: string) => (store.db.prepare(sql).get() as { n: number }).n;

describe('the ingest writer while another connection holds the write lock', () => {
  it('waits without holding the event loop, new requests join, and all commit once the lock goes', async () => {
    const batches: BatchInfo[] = [];
    const auditErrors: AuditLoss[] = [];
    const writer = new IngestWriter(store.db, store.events, store.deliveries, {
      lockWaitMs: 60_000,
      onBatch: (b) => batches.push(b),
      onAuditError: (_e, _d, loss) => auditErrors.push(loss),
    });
    other.exec('BEGIN IMMEDIATE');
    const first = writer.ingest(event('a'), pendingDelivery(performance.now()));
    const firstState = settledState(first);
    await loopTurns(20);
    const later = [writer.ingest(event('b'), pendingDelivery(performance.now()))];
    await loopTurns(20);
    later.push(writer.ingest(event('c'), pendingDelivery(performance.now())));
    await loopTurns(5);
    expect(firstState.settled).toBe(false);
    expect(count('SELECT count(*) AS n FROM events')).toBe(0);
    other.exec('COMMIT');
    const results = await Promise.all([first, ...later]);
    expect(results.map((r) => r.outcome)).toEqual(['accepted', 'accepted', 'accepted']);
    // One commit for the three (the attempts that found the file locked wrote nothing and are not batches).
    expect(batches.map((b) => [b.size, b.ok])).toEqual([[3, true]]);
    expect(count("SELECT count(*) AS n FROM deliveries WHERE outcome = 'accepted'")).toBe(3);
    expect(auditErrors).toEqual([]); // a lock wait is not an audit failure: nothing logged per attempt
    writer.close();
  });

  it('a request whose wait reaches lockWaitMs is refused (503) then; its audit row is written with the next batch', async () => {
    let now = 0;
    const writer = new IngestWriter(store.db, store.events, store.deliveries, {
      lockWaitMs: 1000,
      monotonic: () => now,
    });
    other.exec('BEGIN IMMEDIATE');
    const refused = writer.ingest(event('late'), pendingDelivery(0));
    const state = settledState(refused);
    await loopTurns(10);
    expect(state.settled).toBe(false); // still inside its 1000 ms
    now = 1000;
    await expect(refused).rejects.toBeInstanceOf(StorageError);
    await expect(refused).rejects.toThrow(/database is locked/);
    expect(writer.queued).toBe(1); // its audit row, waiting for the lock
    other.exec('COMMIT');
    const ok = await writer.ingest(event('after'), pendingDelivery(now));
    expect(ok.outcome).toBe('accepted');
    const rows = store.db
      .prepare('SELECT outcome, http_status, event_id FROM deliveries ORDER BY id')
      .all() as { outcome: string; http_status: number; event_id: number | null }[];
    expect(rows).toEqual([
      { outcome: 'storage_unavailable', http_status: 503, event_id: null },
      { outcome: 'accepted', http_status: 200, event_id: ok.eventId },
    ]);
    expect(count("SELECT count(*) AS n FROM events WHERE webhook_id = 'late'")).toBe(0);
    writer.close();
  });

  it('at close, a locked file refuses what is queued at once instead of waiting', async () => {
    const writer = new IngestWriter(store.db, store.events, store.deliveries, { lockWaitMs: 60_000 });
    other.exec('BEGIN IMMEDIATE');
    const p = writer.ingest(event('closing'), pendingDelivery(performance.now()));
    await loopTurns(5);
    writer.close();
    await expect(p).rejects.toBeInstanceOf(StorageError);
    expect(writer.auditRowsDropped).toBe(1);
    other.exec('ROLLBACK');
  });
});

describe('the pipeline while another connection holds the write lock', () => {
  it('a turn that finds the file locked runs no event and counts no attempt; it runs once the lock goes', async () => {
    const ids = [0, 1, 2].map((i) => store.events.insertOrCountDuplicate(event(`p${i}`)).id);
    const pipelineDb = openDatabase(path, {
      synchronous: 'NORMAL',
      busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
    });
    const statuses = () =>
      store.db.prepare('SELECT status, attempts, last_error FROM events ORDER BY id').all();
    const pipeline = new Pipeline(pipelineDb, {
      stages: { schedule: SCHEDULE, outbox: null },
      maxAttempts: 2,
      clock: { now: () => new Date(), monotonic: () => performance.now() },
      logger: createLogger('silent'),
    });
    other.exec('BEGIN IMMEDIATE');
    pipeline.start();
    await loopTurns(40);
    expect(statuses()).toEqual(ids.map(() => ({ status: 'pending', attempts: 0, last_error: null })));
    other.exec('COMMIT');
    const deadline = Date.now() + 20_000;
    const done = () =>
      store.db.prepare("SELECT count(*) AS n FROM events WHERE status = 'done'").get() as { n: number };
    while (done().n < 3 && Date.now() < deadline) await loopTurns(5);
    await pipeline.onIdle();
    // attempts counts runs: one each, the successful one.
    expect(statuses()).toEqual(ids.map(() => ({ status: 'done', attempts: 1, last_error: null })));
    await pipeline.stop(1000);
    pipelineDb.close();
  });
});

describe('admin writes and the readiness probe while another connection holds the write lock', () => {
  it('answer 503 with Retry-After at once, and work again once the lock goes', async () => {
    const r = await startTestReceiver({ env: { ADMIN_TOKEN: 'admin-token-0123456789' } });
    try {
      const sent = await r.send(delivery('proposta.criada'));
      const id = Number(sent.body.event_id);
      await eventually(
        () =>
          (r.store.db.prepare('SELECT status FROM events WHERE id = ?').get(id) as { status: string })
            .status === 'done',
        'the event processed',
      );
      const lockHolder = openDatabase(r.dbPath, { busyTimeoutMs: 0 });
      const admin = { authorization: 'Bearer admin-token-0123456789' };
      try {
        lockHolder.exec('BEGIN IMMEDIATE');
        const replay = await fetch(`${r.url}/admin/events/${id}/replay`, { method: 'POST', headers: admin });
        expect(replay.status).toBe(503);
        expect(replay.headers.get('retry-after')).toBe('1');
        expect(await replay.json()).toMatchObject({ error: 'storage_busy' });
        const ready = await fetch(`${r.url}/readyz`);
        expect(ready.status).toBe(503);
        expect(ready.headers.get('retry-after')).toBe('1');
        lockHolder.exec('ROLLBACK');
        expect(
          (await fetch(`${r.url}/admin/events/${id}/replay`, { method: 'POST', headers: admin })).status,
        ).toBe(202);
        expect((await fetch(`${r.url}/readyz`)).status).toBe(200);
      } finally {
        if (lockHolder.inTransaction) lockHolder.exec('ROLLBACK');
        lockHolder.close();
      }
    } finally {
      await r.stop();
    }
  });
});
