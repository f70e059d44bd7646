import type { SignInFailures } from '../../core/store-port';

/**
 * Brute force on the console's sign-in: after {@link LoginThrottleOptions.maxFailures} wrong tokens
 * from one address within a window, that address gets 429 until the window that began with its
 * first failure is over. Counted in the log (`console_sign_in_failures`: the SQLite file, or
 * PostgreSQL in cluster mode), so a restart does not reset it and every replica counts the same
 * failures. A row lives one window (past ones are removed at each failure), so the table holds at
 * most the addresses that failed within the last window.
 */

export interface LoginThrottleOptions {
  /** @default 5 */
  maxFailures?: number;
  /** @default 60000 */
  windowMs?: number;
}

const iso = (ms: number): string => new Date(ms).toISOString();

export class LoginThrottle {
  private readonly maxFailures: number;
  private readonly windowMs: number;

  constructor(
    private readonly store: SignInFailures,
    options: LoginThrottleOptions = {},
  ) {
    this.maxFailures = options.maxFailures ?? 5;
    this.windowMs = options.windowMs ?? 60_000;
  }

  /** Seconds `address` must wait before trying again; 0 when it may try now. */
  async retryAfter(address: string, now: number): Promise<number> {
    const entry = await this.store.current(address, iso(now - this.windowMs));
    if (entry === undefined || entry.failures < this.maxFailures) return 0;
    return Math.max(1, Math.ceil((Date.parse(entry.since) + this.windowMs - now) / 1000));
  }

  failed(address: string, now: number): Promise<void> {
    return this.store.failed(address, iso(now), iso(now - this.windowMs));
  }

  succeeded(address: string): Promise<void> {
    return this.store.succeeded(address);
  }
}
