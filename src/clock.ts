/** Time, passed in so that the domain and tests never read the wall clock themselves. */
export interface Clock {
  /** Wall-clock time, for timestamps stored and shown. */
  now(): Date;
  /** Monotonic milliseconds, for durations. */
  monotonic(): number;
}

export const systemClock: Clock = {
  now: () => new Date(),
  monotonic: () => performance.now(),
};

/**
 * Waits for `work` at most `timeoutMs`: true when it settled in time, false otherwise (it goes on,
 * unawaited). For bounded shutdowns: what did not finish stays in the database for the next start.
 */
export async function settlesWithin(work: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([work.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
