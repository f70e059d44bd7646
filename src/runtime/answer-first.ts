import {
  type AnswerTracker,
  type BackgroundGate,
  DEFAULT_DEFERRAL,
  type DeferralPolicy,
  type DeferralState,
  deferralStep,
  type OverloadSnapshot,
} from '../domain/answer-first';
import type { Logger } from '../logger';

/**
 * The answer comes first (issue 23). The webhook path reports each answer's start and end; while
 * one is being made, background work (pipeline turns, the sender's sends and record writes,
 * cluster mode's forwarder) waits at its next turn, with a floor (DeferralPolicy) so that a
 * saturated receiver still makes progress. Nothing is dropped: what waits is pending in the
 * database.
 *
 * Why "an answer in progress" and not event-loop lag: lag is seen only after the answers were
 * already slow, and a request being answered is the exact thing that must not wait. On a starved
 * core the open-loop service leaves gaps between requests; background work runs in them, in
 * bounded turns (`underLoad`), and the backlog drains when the load ends.
 *
 * The sender's worker thread competes for the same core through the kernel's scheduler, not this
 * event loop: it reads {@link AnswerFirst.hold} (1 while held) with `Atomics`, and waits on it.
 */

export interface AnswerFirstOptions {
  /** Monotonic milliseconds. */
  monotonic: () => number;
  logger: Logger;
  /** @default DEFAULT_DEFERRAL */
  policy?: DeferralPolicy;
  /** Called with each stretch of deferral, in seconds (the counter's hook). */
  onDeferred?: (seconds: number) => void;
  /**
   * The log line's window: one warning per window in which background work waited for at least
   * {@link LOG_SHARE} of it, one line when a window after such warnings is calm again.
   * @default 10000
   */
  windowMs?: number;
}

/** How long after an answer a turn still stops at its budget (more answers are likely close by). */
const LOAD_LINGER_MS = 1000;
/** The share of a window spent deferring that is worth a warning. */
const LOG_SHARE = 0.2;

export class AnswerFirst implements AnswerTracker, BackgroundGate {
  /** 1 while background work must wait: for another thread (Atomics.load / Atomics.waitAsync). */
  readonly hold = new Int32Array(new SharedArrayBuffer(4));
  private answering = 0;
  private begunTotal = 0;
  private state: DeferralState = { kind: 'open' };
  private waiters: (() => void)[] = [];
  /** When the first waiter of the current hold started waiting (null: none waits). */
  private waitingSinceMs: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private lastAnswerMs = -Infinity;
  private deferredMsTotal = 0;
  private windowDeferredMs = 0;
  private lastWindow = { deferredMs: 0, backlog: null as Record<string, number> | null };
  private warned = false;
  private windowTimer: NodeJS.Timeout | null = null;
  private readonly policy: DeferralPolicy;
  private backlog: (() => Record<string, number>) | null = null;
  private readonly windowMs: number;

  constructor(private readonly options: AnswerFirstOptions) {
    this.policy = options.policy ?? DEFAULT_DEFERRAL;
    this.windowMs = options.windowMs ?? 10_000;
  }

  /** What the log line and the console show as the backlog (events to process, messages to send). */
  backlogFrom(read: () => Record<string, number>): void {
    this.backlog = read;
  }

  /** Starts the window of the log line (a timer; `stop()` ends it). */
  start(): void {
    if (this.windowTimer !== null) return;
    this.windowTimer = setInterval(() => this.closeWindow(), this.windowMs).unref();
  }

  stop(): void {
    if (this.windowTimer !== null) clearInterval(this.windowTimer);
    this.windowTimer = null;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.answering = 0;
    // Open at once (no quiet gap): whatever waits is let go.
    const wasOpen = this.state.kind === 'open';
    this.state = { kind: 'open' };
    if (!wasOpen) this.release(this.options.monotonic());
  }

  /** Answers begun since start (the webhook path's reports). */
  get begun(): number {
    return this.begunTotal;
  }

  begin(): void {
    this.begunTotal += 1;
    this.answering += 1;
    this.step();
  }

  end(): void {
    this.answering = Math.max(0, this.answering - 1);
    this.lastAnswerMs = this.options.monotonic();
    this.step();
  }

  whenClear(): Promise<void> | null {
    if (this.state.kind !== 'held') return null;
    this.waitingSinceMs ??= this.options.monotonic();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  held(): boolean {
    return this.state.kind === 'held';
  }

  underLoad(): boolean {
    return this.answering > 0 || this.options.monotonic() - this.lastAnswerMs < LOAD_LINGER_MS;
  }

  snapshot(): OverloadSnapshot {
    const now = this.options.monotonic();
    const waiting = this.waitingSinceMs === null ? 0 : now - this.waitingSinceMs;
    return {
      deferring: this.state.kind === 'held' && (this.waitingSinceMs !== null || this.hold[0] === 1),
      deferredMsTotal: Math.round(this.deferredMsTotal + waiting),
      deferredMsLastWindow: Math.round(this.lastWindow.deferredMs),
      windowMs: this.windowMs,
      backlog: this.lastWindow.backlog,
    };
  }

  /** Moves the state on (an answer began or ended, a planned time came) and acts on the change. */
  private step(): void {
    const before = this.state;
    const now = this.options.monotonic();
    const next = deferralStep(before, this.answering, now, this.policy);
    this.state = next;
    if (next !== before) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      if (next.kind === 'held') Atomics.store(this.hold, 0, 1);
      else this.release(now);
    }
    // The planned time of a hold or a slice (again, when a timer fired a little early).
    if (this.timer === null && next.kind !== 'open') {
      const at =
        next.kind === 'held' ? Math.min(next.sliceAtMs, next.quietUntilMs ?? Infinity) : next.untilMs;
      this.timer = setTimeout(
        () => {
          this.timer = null;
          this.step();
        },
        Math.max(1, at - now),
      ).unref();
    }
  }

  /** Background work may go: wake the thread and the waiters, and count how long they waited. */
  private release(now: number): void {
    Atomics.store(this.hold, 0, 0);
    Atomics.notify(this.hold, 0);
    if (this.waitingSinceMs !== null) {
      const waited = now - this.waitingSinceMs;
      this.waitingSinceMs = null;
      this.deferredMsTotal += waited;
      this.windowDeferredMs += waited;
      this.options.onDeferred?.(waited / 1000);
    }
    const waiters = this.waiters;
    if (waiters.length === 0) return;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Every `windowMs`: the log line when background work waited for much of it, or calmed down. */
  private closeWindow(): void {
    const now = this.options.monotonic();
    let deferred = this.windowDeferredMs;
    // A wait still going on counts up to now (and from now on in the next window).
    if (this.waitingSinceMs !== null) {
      deferred += now - this.waitingSinceMs;
      this.deferredMsTotal += now - this.waitingSinceMs;
      this.options.onDeferred?.((now - this.waitingSinceMs) / 1000);
      this.waitingSinceMs = now;
    }
    this.windowDeferredMs = 0;
    const backlog = this.readBacklog();
    this.lastWindow = { deferredMs: deferred, backlog };
    const fields = { deferred_ms: Math.round(deferred), window_ms: this.windowMs, backlog };
    if (deferred >= LOG_SHARE * this.windowMs) {
      this.warned = true;
      this.options.logger.warn(
        fields,
        'overload: background work deferred so that webhook answers go first (it waits in its backlog)',
      );
    } else if (this.warned) {
      this.warned = false;
      this.options.logger.info(fields, 'overload over: background work runs again');
    }
  }

  private readBacklog(): Record<string, number> | null {
    try {
      return this.backlog?.() ?? null;
    } catch {
      return null; // a backlog that cannot be read now (the file locked) is left out of the line
    }
  }
}
