import {
  type AlarmStep,
  type DeliveryAlarmState,
  type FailedAnswer,
  FAILED_ANSWERS,
  IN_FLIGHT_COUNT_CAP,
  noFailures,
} from '../domain/delivery-alarm';
import { NON_FINAL_STATUSES } from '../domain/lifecycle';
import { type Db, EVENT_LOOP_BUSY_TIMEOUT_MS, openDatabase } from './database';

/**
 * The deactivation alarm's persistent side (migration 0006): the one-row `delivery_alarm` table
 * holding the run of failed answers, and the two reads the silence check needs — when the last
 * request reached a webhook route (`deliveries.received_at`, any process on the file) and whether
 * proposals are still in flight.
 */

interface AlarmRow {
  consecutive: number;
  by_answer: string;
  first_failure_at: string | null;
  last_failure_at: string | null;
  last_answer: string | null;
}

/** Every status a proposal can be at that is not final: what "in flight" means. */
const IN_FLIGHT_STATUSES: string[] = [...NON_FINAL_STATUSES];

export function deliveryAlarmRepo(db: Db) {
  const select = db.prepare<[], AlarmRow>(
    'SELECT consecutive, by_answer, first_failure_at, last_failure_at, last_answer FROM delivery_alarm WHERE id = 1',
  );
  const update = db.prepare<[number, string, string | null, string | null, string | null, string]>(
    `UPDATE delivery_alarm SET consecutive = ?, by_answer = ?, first_failure_at = ?, last_failure_at = ?,
       last_answer = ?, updated_at = ? WHERE id = 1`,
  );
  // max() over the received_at index is one seek (SQLite's min/max optimisation); ISO-8601 UTC
  // strings of one format sort as time does.
  const lastDelivery = db.prepare<[], { at: string | null }>('SELECT max(received_at) AS at FROM deliveries');
  // IN over the non-final statuses seeks the proposals_status index; the LIMIT bounds the count.
  const inFlight = db.prepare<string[], { n: number }>(
    `SELECT count(*) AS n FROM (SELECT 1 FROM proposals WHERE status IN (${IN_FLIGHT_STATUSES.map(() => '?').join(', ')})
     LIMIT ${IN_FLIGHT_COUNT_CAP})`,
  );
  const load = (): DeliveryAlarmState => {
    const row = select.get();
    return row ? fromRow(row) : noFailures;
  };
  const save = (state: DeliveryAlarmState, now: Date): void => {
    update.run(
      state.consecutive,
      JSON.stringify(state.byAnswer),
      iso(state.firstFailureAt),
      iso(state.lastFailureAt),
      state.lastAnswer,
      now.toISOString(),
    );
  };
  // Read, step and write in one IMMEDIATE transaction, so that processes sharing the file count one run.
  const stepStored = db.transaction((step: (stored: DeliveryAlarmState) => AlarmStep, now: Date) => {
    const result = step(load());
    if (result.changed) save(result.state, now);
    return result;
  });
  return {
    /** The stored run; no failures when the row is missing. */
    load,
    /** Replaces the stored run. Throws what SQLite throws (SQLITE_BUSY while another connection writes). */
    save,
    /** Applies `step` to the stored run and stores the result when it changed; throws like `save`. */
    update(step: (stored: DeliveryAlarmState) => AlarmStep, now: Date): AlarmStep {
      return stepStored.immediate(step, now);
    },
    /** Epoch ms of the latest request to a webhook route stored by any process, or null. */
    lastDeliveryAt(): number | null {
      const at = lastDelivery.get()?.at;
      return at ? Date.parse(at) : null;
    },
    /** Proposals whose status is not final, counted up to IN_FLIGHT_COUNT_CAP. */
    proposalsInFlight(): number {
      return inFlight.get(...IN_FLIGHT_STATUSES)?.n ?? 0;
    },
  };
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function epoch(at: string | null): number | null {
  if (at === null) return null;
  const ms = Date.parse(at);
  return Number.isNaN(ms) ? null : ms;
}

/** A row written by hand or by a newer version is read leniently: unknown kinds are dropped. */
function fromRow(row: AlarmRow): DeliveryAlarmState {
  let parsed: unknown;
  try {
    parsed = JSON.parse(row.by_answer);
  } catch {
    parsed = {};
  }
  const byAnswer: Partial<Record<FailedAnswer, number>> = {};
  if (parsed !== null && typeof parsed === 'object') {
    for (const [k, v] of Object.entries(parsed)) {
      if (Object.hasOwn(FAILED_ANSWERS, k) && Number.isSafeInteger(v) && (v as number) > 0)
        byAnswer[k as FailedAnswer] = v as number;
    }
  }
  const lastAnswer =
    row.last_answer !== null && Object.hasOwn(FAILED_ANSWERS, row.last_answer)
      ? (row.last_answer as FailedAnswer)
      : null;
  return {
    consecutive: Math.max(0, row.consecutive),
    byAnswer,
    firstFailureAt: epoch(row.first_failure_at),
    lastFailureAt: epoch(row.last_failure_at),
    lastAnswer,
  };
}

/**
 * The delivery alarm's stored run (http/delivery-watch.ts), on a connection of its own to the file
 * at `databasePath` with a short busy timeout: a write of the alarm's row must not hold the event
 * loop for SQLITE_BUSY_TIMEOUT_MS when another connection has the lock.
 */
export function openDeliveryAlarm(databasePath: string) {
  const db = openDatabase(databasePath, {
    // The run is an alarm, not a delivery: losing its last change to a power cut is acceptable.
    synchronous: 'NORMAL',
    busyTimeoutMs: EVENT_LOOP_BUSY_TIMEOUT_MS,
  });
  return { repo: deliveryAlarmRepo(db), close: () => db.close() };
}
