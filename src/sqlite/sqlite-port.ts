import type { StorePort } from '../core/store-port';
import { forwardingFigures } from '../core/sender-queries';
import { driveSync } from '../core/event-step';
import { prunePass } from '../core/prune-pass';
import { storeGauges } from '../core/gauges';
import type { StoreQuery } from '../domain/sql/store-sql';
import { statOrNull } from './database-errors';
import { deliveryAlarmRepo } from './sqlite-delivery-alarm';
import { scrubSqlite } from './scrub';
import { sqliteStoreSql } from './sqlite-statements';
import { sqliteStepOps } from './sqlite-step-ops';
import type { Store } from './store';

/**
 * The store port (core/store-port.ts) on the SQLite file: the server's (`wake`: the in-process
 * pipeline's sweep after a replay, the sender thread's nudge after a write to the forwarding
 * tables) and the commands' (no wake: the next sweep or poll of a receiver on the file finds the
 * work).
 */
export function sqliteStorePort(
  store: Store,
  wake: { sweep?: (() => void) | undefined; nudge?: (() => void) | undefined } = {},
): StorePort<StoreQuery> {
  const sql = sqliteStoreSql(store.db);
  const alarm = deliveryAlarmRepo(store.db);
  const ops = sqliteStepOps(store.db, { traces: undefined });
  return {
    name: store.path,
    mayBeAway: false,
    file: store.path,
    sql,
    replaying: async (fn) => {
      const result = await sql.write((q) => fn(q));
      if (result.queued.length > 0) wake.sweep?.();
      return result;
    },
    // The statements as the pipeline's event step runs them (sqlite-step-ops.ts); no step for the first
    // poll: the poller reads the row's next_poll_at.
    effects: (program) => sql.write(async () => driveSync(program, ops)),
    // The sender thread reads on its own connection: woken once a write has committed.
    senderWake: { afterWrite: () => wake.nudge?.() },
    consoleFigures: async () => ({
      run: alarm.load(),
      lastDeliveryAt: alarm.lastDeliveryAt(),
      proposalsInFlight: () => alarm.proposalsInFlight(),
    }),
    gauges: (cutoffs) => sql.read((q) => storeGauges(q, cutoffs)),
    statsFigures: async (q, destinations) => ({
      databaseBytes: (statOrNull(store.path)?.size ?? 0) + (statOrNull(`${store.path}-wal`)?.size ?? 0),
      forwarding: await forwardingFigures(q, destinations),
    }),
    // The file has no notifications: `feed --follow` finds new messages at its next look.
    listen: async () => undefined,
    prune: async (cutoff, now) => ({ summary: await prunePass(sql, cutoff, now) }),
    scrub: async (forms, options) => {
      const report = await scrubSqlite(store.db, store.path, forms, options);
      return {
        files: report.files,
        walTruncated: report.walTruncated,
        vacuum: report.vacuumed ? 'full' : 'none',
      };
    },
  };
}
