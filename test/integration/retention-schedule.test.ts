import type { DestinationStream } from 'pino';
import { systemClock } from '../../src/clock';
import { createLogger } from '../../src/logger';
import {
  storePass,
  RETENTION_FAILED,
  scheduleRetention,
  type RetentionScheduleOptions,
  spoolPass,
} from '../../src/runtime/retention-schedule';
import { openDatabase } from '../../src/sqlite/database';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openSpool, type Spool } from '../../src/sqlite/spool';
import { LogSink, startTestApp, type TestApp } from '../helpers/app';
import { delivery, postRaw, signed } from '../helpers/payloads';
import { eventually } from '../helpers/receiver';

/**
 * RETENTION_DAYS' timer (src/runtime/retention-schedule.ts), one for SQLite mode's log and for a
 * cluster replica's own spool, on a real SQLite file filled over real HTTP: the first pass right
 * after start, hourly after, a locked file tried again in a minute, stop between two batches, and
 * what each logs. The spool's rows count as relayed once the relay's cursor is past them
 * (`Spool.advance`, what the relay records after PostgreSQL commits): no PostgreSQL is needed here;
 * test/integration/cluster-retention.test.ts relays to a real one.
 */

const DAYS = 30;
const SPOOL_LINE = 'retention: removed relayed rows from the spool';
const LOCKED_LINE = 'retention: database locked; trying again in a minute';

let app: TestApp;
let logs: LogSink;
let spool: Spool;
const schedules: { stop(): void }[] = [];
beforeEach(async () => {
  app = await startTestApp();
  logs = new LogSink();
  spool = openSpool(app.store.db);
});
afterEach(async () => {
  for (const s of schedules.splice(0)) s.stop();
  await app.close();
});

const logger = () => createLogger('info', logs as unknown as DestinationStream);
const lines = (msg: string) => logs.lines.filter((l) => l.msg === msg);
const deliveryIds = () =>
  (app.store.db.prepare('SELECT id FROM deliveries ORDER BY id').all() as { id: number }[]).map((r) => r.id);

/** As the modes compose them (runtime/single/single-mode.ts, runtime/cluster/cluster-mode.ts). */
const options = (more: Partial<RetentionScheduleOptions> = {}): RetentionScheduleOptions => ({
  days: DAYS,
  clock: systemClock,
  logger: logger(),
  fields: { replica: 'replica-a' },
  failure: RETENTION_FAILED.spool,
  ...more,
});

/** `n` accepted deliveries received 40 days ago, the first `relayed` of them relayed. */
async function oldSpool(n: number, relayed: number): Promise<void> {
  for (let i = 0; i < n; i += 1) {
    const { raw, signature } = signed(delivery('proposta.criada'));
    const res = await postRaw(`${app.url}/webhooks`, raw, {
      'content-type': 'application/json',
      'x-service-signature': signature,
    });
    expect(res.body.status).toBe('accepted');
  }
  const old = new Date(Date.now() - 40 * 86_400_000).toISOString();
  for (const table of ['deliveries', 'events'])
    app.store.db.prepare(`UPDATE ${table} SET received_at = ?`).run(old);
  spool.advance(relayed, new Date().toISOString());
}

/** The replica's spool on RETENTION_DAYS' timer (`batch`: rows per batch; `spool`: what prunes). */
function spoolSchedule(
  settings: Pick<RetentionScheduleOptions, 'everyMs' | 'lockedRetryMs'> & {
    batch?: number;
    spool?: Pick<Spool, 'pruneBatch'>;
  } = {},
): { stop(): void } {
  const { batch, spool: pruned = spool, ...more } = settings;
  const schedule = scheduleRetention(spoolPass(pruned, batch), options(more));
  schedules.push(schedule);
  return schedule;
}

describe("a replica's spool", () => {
  it('the first pass right after start, batch after batch, never a row not relayed; the replica on its line', async () => {
    await oldSpool(5, 3);
    spoolSchedule({ batch: 1 });
    await eventually(() => lines(SPOOL_LINE).length > 0, "the spool's first pass");
    expect(deliveryIds()).toEqual([4, 5]);
    expect(lines(SPOOL_LINE)).toEqual([
      expect.objectContaining({ deliveries: 3, events: 3, retention_days: DAYS, replica: 'replica-a' }),
    ]);
  });

  it('hourly after: the next pass takes what was relayed since (the newest row stays)', async () => {
    await oldSpool(5, 3);
    spoolSchedule({ everyMs: 50 });
    await eventually(() => lines(SPOOL_LINE).length > 0, 'the first pass');
    spool.advance(5, new Date().toISOString());
    await eventually(() => lines(SPOOL_LINE).length > 1, 'the next pass');
    expect(lines(SPOOL_LINE)[1]).toMatchObject({ deliveries: 1, events: 1, replica: 'replica-a' });
    expect(deliveryIds()).toEqual([5]);
  });

  it('stop() ends the walk after its batch, and what it removed is logged', async () => {
    await oldSpool(5, 4);
    // The real spool, stopped as its first batch commits (as a shutdown would, between two turns).
    const stopping = {
      pruneBatch: (cutoff: Date, afterId: number, size: number) => {
        const step = spool.pruneBatch(cutoff, afterId, size);
        schedule.stop();
        return step;
      },
    };
    const schedule = spoolSchedule({ batch: 1, spool: stopping });
    await eventually(() => lines(SPOOL_LINE).length > 0, 'the stopped pass');
    expect(deliveryIds()).toEqual([2, 3, 4, 5]);
    expect(lines(SPOOL_LINE)).toEqual([expect.objectContaining({ deliveries: 1, events: 1 })]);
  });

  it('a file locked by another connection: tried again in a minute (shortened here), then pruned', async () => {
    await oldSpool(3, 3);
    const holder = openDatabase(app.dbPath);
    holder.exec('BEGIN IMMEDIATE');
    try {
      spoolSchedule({ lockedRetryMs: 20 });
      await eventually(() => lines(LOCKED_LINE).length > 0, 'the locked pass');
      expect(lines(SPOOL_LINE)).toEqual([]);
      expect(deliveryIds()).toEqual([1, 2, 3]);
    } finally {
      holder.exec('COMMIT');
      holder.close();
    }
    await eventually(() => lines(SPOOL_LINE).length > 0, 'the pass tried again');
    expect(deliveryIds()).toEqual([3]);
    expect(lines(LOCKED_LINE)[0]).toMatchObject({ level: 'warn' });
  });

  it('any other failure: a warning, and the next hour', async () => {
    await oldSpool(3, 3);
    // Writes refused on the spool's connection (SQLITE_READONLY): not a lock another one holds.
    app.store.db.pragma('query_only = ON');
    spoolSchedule();
    const failed = 'retention: could not prune the spool; trying again in an hour';
    await eventually(() => lines(failed).length > 0, 'the failed pass');
    app.store.db.pragma('query_only = OFF');
    expect(lines(failed)[0]).toMatchObject({ level: 'warn' });
    expect(lines(LOCKED_LINE)).toEqual([]);
    expect(deliveryIds()).toEqual([1, 2, 3]);
  });
});

describe("SQLite mode's log", () => {
  it('the first pass right after start removes the bodies of old finished events and logs how many', async () => {
    await oldSpool(3, 0);
    app.store.db.prepare("UPDATE events SET status = 'done' WHERE id <= 2").run();
    const log = storePass(sqliteStoreSql(app.store.db));
    schedules.push(scheduleRetention(log, options({ fields: undefined, failure: RETENTION_FAILED.log })));
    const line = 'retention: removed bodies of old finished events';
    await eventually(() => lines(line).length > 0, 'the first pass');
    expect(lines(line)).toEqual([expect.objectContaining({ pruned: 2, retention_days: DAYS })]);
    expect(lines(line)[0]).not.toHaveProperty('replica');
    const bodies = app.store.db.prepare('SELECT id FROM events WHERE body IS NOT NULL').all();
    expect(bodies).toEqual([{ id: 3 }]);
  });
});
