/**
 * The answer comes first (issue 23): the service waits 5 s for a webhook's answer and deactivates
 * the callback after three failures (interface §6.1); everything else the receiver does is durable
 * and can wait. These are the two sides of that rule, as the rest of the code sees them.
 */

/** The webhook path tells it when an answer starts and when it left (each `end` matches a `begin`). */
export interface AnswerTracker {
  begin(): void;
  end(): void;
}

/**
 * What background work (processing, forwarding, writing the sender's records) asks before each
 * turn: `null` to go now, or a promise that resolves when it may (never rejects). Waiting drops
 * nothing: the work stays in its durable backlog (events pending, deliveries pending).
 */
export interface BackgroundGate {
  whenClear(): Promise<void> | null;
  /**
   * Whether answers are being made now or were a moment ago: turns then stop at their budget
   * instead of running a full batch, so that a request arriving during one waits little.
   */
  underLoad(): boolean;
  /** Whether work should stop now (checked between two items of a turn; no side effect). */
  held(): boolean;
}

/** What the console's overview and the log show of the deferral (AnswerFirst.snapshot). */
export interface OverloadSnapshot {
  /** Background work is held now. */
  deferring: boolean;
  /** Milliseconds background work waited, since start. */
  deferredMsTotal: number;
  /** Milliseconds it waited in the last complete window, and that window's length. */
  deferredMsLastWindow: number;
  windowMs: number;
  /** The backlog when the last window closed (null before the first). */
  backlog: Record<string, number> | null;
}

/** A gate that never holds anything (tests, tools, a receiver without webhooks). */
export const OPEN_GATE: BackgroundGate = { whenClear: () => null, underLoad: () => false, held: () => false };

/** When background work may run, given how long it has been held (see {@link deferralStep}). */
export interface DeferralPolicy {
  /** Held continuously this long, background work gets one slice anyway (progress under saturation). */
  maxDeferMs: number;
  /** How long that slice stays open. */
  sliceMs: number;
  /**
   * Once no answer is being made, background work stays held this long more, and goes only if no
   * answer began meanwhile. Under a closed-loop saturation (the service's retries after a slow
   * spell, the bench's c=50) answers end together at each group commit and the next ones arrive a
   * fraction of a millisecond later: without the gap, background work ran in each of those
   * instants, a request's worth of CPU or more each time (issue 23, ingest with forwarding on).
   * @default 0
   */
  quietMs?: number;
}

/**
 * Held while an answer is being made; past `maxDeferMs` of continuous holding, open for `sliceMs`
 * (a floor of about sliceMs / (maxDeferMs + sliceMs) of the time for background work, so that a
 * receiver saturated by a closed loop still processes), then held again.
 */
export const DEFAULT_DEFERRAL: DeferralPolicy = { maxDeferMs: 500, sliceMs: 25, quietMs: 2 };

export type DeferralState =
  | { kind: 'open' }
  /**
   * `sinceMs`: when the overload began; `sliceAtMs`: when background work gets its next slice;
   * `quietUntilMs`: no answer is being made, and background work goes then unless one begins.
   */
  | { kind: 'held'; sinceMs: number; sliceAtMs: number; quietUntilMs?: number }
  | { kind: 'slice'; sinceMs: number; untilMs: number };

/**
 * The gate's next state at `nowMs` with `answering` answers in progress. Pure: the caller keeps
 * the state and the clock, and calls it when an answer begins or ends and when a planned time
 * (`sliceAtMs`, `untilMs`) comes. `sinceMs` survives the slices, so that the deferral reported
 * (metric, log) is the whole overload, not its last stretch.
 */
export function deferralStep(
  state: DeferralState,
  answering: number,
  nowMs: number,
  policy: DeferralPolicy,
): DeferralState {
  if (answering <= 0) return afterLastAnswer(state, nowMs, policy.quietMs ?? 0);
  switch (state.kind) {
    case 'open':
      return { kind: 'held', sinceMs: nowMs, sliceAtMs: nowMs + policy.maxDeferMs };
    case 'held':
      if (nowMs >= state.sliceAtMs)
        return { kind: 'slice', sinceMs: state.sinceMs, untilMs: nowMs + policy.sliceMs };
      // An answer began during the quiet gap: held as before, the gap starts again at its end.
      return state.quietUntilMs === undefined
        ? state
        : { kind: 'held', sinceMs: state.sinceMs, sliceAtMs: state.sliceAtMs };
    case 'slice':
      return nowMs < state.untilMs
        ? state
        : { kind: 'held', sinceMs: state.sinceMs, sliceAtMs: nowMs + policy.maxDeferMs };
  }
}

/** No answer is being made: open, once the quiet gap (if any) has passed with none begun. */
function afterLastAnswer(state: DeferralState, nowMs: number, quietMs: number): DeferralState {
  if (state.kind !== 'held' || quietMs <= 0) return { kind: 'open' };
  if (state.quietUntilMs === undefined) return { ...state, quietUntilMs: nowMs + quietMs };
  return nowMs >= state.quietUntilMs ? { kind: 'open' } : state;
}

/**
 * Runs `run` once `gate` lets background work go: at once when it is clear, otherwise when it
 * clears (asked again then: a slice may have closed meanwhile). Nothing is dropped or reordered:
 * the caller's work waits here.
 */
export function whenGateClear(gate: BackgroundGate | undefined, run: () => void): void {
  const wait = gate?.whenClear() ?? null;
  if (wait === null) return run();
  void wait.then(() => whenGateClear(gate, run));
}

/**
 * {@link whenGateClear} for async code: resolves once `gate` lets background work go (at once, as
 * a resolved promise, when it is clear or absent). `stopped`, asked after each wait, ends the wait
 * early (a stopping worker need not wait for the answers). Never rejects.
 */
export async function gateCleared(
  gate: BackgroundGate | undefined,
  stopped: () => boolean = () => false,
): Promise<void> {
  for (let wait = gate?.whenClear() ?? null; wait !== null && !stopped(); wait = gate?.whenClear() ?? null)
    await wait;
}
