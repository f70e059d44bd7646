/**
 * The feed requests waiting for a commit. `wait()` resolves on `notify()` (main calls it after every
 * pipeline commit), after `ms`, when `signal` aborts (the client went away), or on `close()` (at
 * shutdown, so that a long-poll never holds the server's close up); after `close()` it resolves at
 * once. It never rejects.
 */
export class FeedWaiters {
  private readonly waiting = new Set<() => void>();
  private isClosed = false;
  private waitCalls = 0;
  private timerEnds = 0;

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.isClosed;
  }

  /** Requests waiting now. */
  get size(): number {
    return this.waiting.size;
  }

  /**
   * Calls of `wait()`, and those of them that ended by their `ms` (a re-check, not a notify, an
   * abort or `close()`): what tells a test which of those ended a wait, with no timing window.
   */
  get counts(): { waits: number; timeouts: number } {
    return { waits: this.waitCalls, timeouts: this.timerEnds };
  }

  wait(ms: number, signal?: AbortSignal): Promise<void> {
    this.waitCalls += 1;
    if (this.isClosed || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiting.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timedOut = () => {
        this.timerEnds += 1;
        done();
      };
      // A waiting feed request alone is no reason to keep the process alive.
      const timer = setTimeout(timedOut, Math.max(0, ms)).unref();
      this.waiting.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  /** New messages may have been committed: every waiting request looks again. */
  notify(): void {
    for (const done of [...this.waiting]) done();
  }

  /** Releases every waiting request, now and from now on. */
  close(): void {
    this.isClosed = true;
    this.notify();
  }
}

export type { FeedReader } from '../../core/store-port';
