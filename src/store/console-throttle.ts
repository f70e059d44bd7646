import type { Db } from './database';

/**
 * `console_sign_in_failures` (migration 0011): the console's sign-in throttle (http/console/throttle.ts)
 * in the log, so that a restart does not reset it (and in cluster mode every replica counts the
 * same, cluster/pg-console-sessions.ts). Times are ISO 8601 UTC strings.
 */

/** One more wrong token from an address: a window that began at or before `start` begins again `now`. */
const FAILED_SQL = `INSERT INTO console_sign_in_failures (address, since, failures) VALUES (@address, @now, 1)
  ON CONFLICT (address) DO UPDATE SET
    failures = CASE WHEN since <= @start THEN 1 ELSE failures + 1 END,
    since = CASE WHEN since <= @start THEN @now ELSE since END`;

export interface ThrottleEntry {
  since: string;
  failures: number;
}

export function consoleThrottleRepo(db: Db) {
  const current = db.prepare<[string, string], ThrottleEntry>(
    'SELECT since, failures FROM console_sign_in_failures WHERE address = ? AND since > ?',
  );
  const failed = db.prepare<[{ address: string; now: string; start: string }]>(FAILED_SQL);
  const prune = db.prepare<[string]>('DELETE FROM console_sign_in_failures WHERE since <= ?');
  const clear = db.prepare<[string]>('DELETE FROM console_sign_in_failures WHERE address = ?');
  return {
    /** The address's failures in the window that started after `windowStart`, if any. */
    current: (address: string, windowStart: string): ThrottleEntry | undefined =>
      current.get(address, windowStart),
    /** Counts a failure, and forgets the addresses whose window is over. */
    failed(address: string, now: string, windowStart: string): void {
      db.transaction(() => {
        prune.run(windowStart);
        failed.run({ address, now, start: windowStart });
      })();
    },
    succeeded: (address: string): void => {
      clear.run(address);
    },
  };
}

export type ConsoleThrottleRepo = ReturnType<typeof consoleThrottleRepo>;
