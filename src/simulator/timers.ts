/**
 * Every timer and wait of the simulator goes through one `Timers`, so that `close()` can cancel
 * them all at once and nothing fires into a closed simulator.
 */
export class Timers {
  private readonly pending = new Set<NodeJS.Timeout>();
  private readonly sleepers = new Set<(woken: boolean) => void>();
  private closedFlag = false;
  private readonly controller = new AbortController();

  /** Aborted by `close()`: pass it to in-flight work (fetch) so that it stops too. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Runs `fn` after `ms`, unless closed first. */
  after(ms: number, fn: () => void): void {
    if (this.closedFlag) return;
    const timer = setTimeout(() => {
      this.pending.delete(timer);
      fn();
    }, ms);
    this.pending.add(timer);
  }

  /** Resolves true after `ms`, or false as soon as the timers are closed. */
  sleep(ms: number): Promise<boolean> {
    if (this.closedFlag) return Promise.resolve(false);
    return new Promise((resolve) => {
      const wake = (woken: boolean) => {
        this.sleepers.delete(wake);
        resolve(woken);
      };
      this.sleepers.add(wake);
      this.after(ms, () => wake(true));
    });
  }

  close(): void {
    if (this.closedFlag) return;
    this.closedFlag = true;
    for (const timer of this.pending) clearTimeout(timer);
    this.pending.clear();
    for (const wake of [...this.sleepers]) wake(false);
    this.controller.abort();
  }
}
