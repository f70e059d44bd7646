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
