import type { Store } from '../../sqlite/store';
import type { Output } from '../log-commands';

/** Progress lines, each stamped with the seconds since the demo began (`[  1.2s] …`). */
export function stampedPrinter(io: Output, startedAt = Date.now()): (text: string) => void {
  return (text) => io.out(`[${((Date.now() - startedAt) / 1000).toFixed(1).padStart(5)}s] ${text}`);
}

const WATCH_INTERVAL_MS = 50;

/**
 * Prints each followed proposal's stage and status whenever they change, as the receiver's own
 * database sees them: the demo shows what the receiver recorded, not what the simulator sent.
 */
export class ProgressWatch {
  private readonly labels = new Map<number, string>();
  private readonly shown = new Map<number, string>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly store: Store,
    private readonly say: (text: string) => void,
  ) {
    this.timer = setInterval(() => this.printChanges(), WATCH_INTERVAL_MS);
  }

  follow(nu: number, label: string): void {
    this.labels.set(nu, label);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private printChanges(): void {
    for (const [nu, label] of this.labels) {
      const p = this.store.proposals.get(nu);
      if (!p) continue;
      const now = `${p.stage} / ${p.status}`;
      if (this.shown.get(nu) === now) continue;
      this.shown.set(nu, now);
      this.say(`${nu} (${label}): ${now}`);
    }
  }
}
