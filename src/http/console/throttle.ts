/**
 * Brute force on the console's sign-in, kept simple: after {@link LoginThrottleOptions.maxFailures}
 * wrong tokens from one address within a window, that address gets 429 until the window that began
 * with its first failure is over. In memory (a restart forgets it; the tokens are long random
 * strings, so this only has to make guessing slow, not impossible to retry). Bounded: at most
 * `maxAddresses` addresses are remembered, the oldest forgotten first.
 */

export interface LoginThrottleOptions {
  /** @default 5 */
  maxFailures?: number;
  /** @default 60000 */
  windowMs?: number;
  /** @default 10000 */
  maxAddresses?: number;
}

interface Entry {
  since: number;
  failures: number;
}

export class LoginThrottle {
  private readonly entries = new Map<string, Entry>();
  private readonly maxFailures: number;
  private readonly windowMs: number;
  private readonly maxAddresses: number;

  constructor(options: LoginThrottleOptions = {}) {
    this.maxFailures = options.maxFailures ?? 5;
    this.windowMs = options.windowMs ?? 60_000;
    this.maxAddresses = options.maxAddresses ?? 10_000;
  }

  /** Seconds `address` must wait before trying again; 0 when it may try now. */
  retryAfter(address: string, now: number): number {
    const entry = this.current(address, now);
    if (entry === undefined || entry.failures < this.maxFailures) return 0;
    return Math.max(1, Math.ceil((entry.since + this.windowMs - now) / 1000));
  }

  failed(address: string, now: number): void {
    const entry = this.current(address, now);
    if (entry !== undefined) {
      entry.failures += 1;
      return;
    }
    if (this.entries.size >= this.maxAddresses) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    this.entries.set(address, { since: now, failures: 1 });
  }

  succeeded(address: string): void {
    this.entries.delete(address);
  }

  private current(address: string, now: number): Entry | undefined {
    const entry = this.entries.get(address);
    if (entry !== undefined && now - entry.since >= this.windowMs) {
      this.entries.delete(address);
      return undefined;
    }
    return entry;
  }
}
