import type { AttemptOutcome } from './retry';

/**
 * A circuit breaker per destination, as a pure state machine: after enough consecutive temporary
 * failures the destination is left alone for a while (open), then one request probes it
 * (half_open); a success closes it, a failure opens it again for twice as long, up to a ceiling.
 * This spares a dead destination a retry storm from every queued message, and spares the queue
 * requests that would only time out. The clock is passed in; nothing here sends anything.
 *
 * closed --threshold temporary failures--> open --until passed, circuitProbing--> half_open
 * half_open --delivered/permanent--> closed;  half_open --temporary--> open (open time doubled)
 */

/**
 * `failures` counts consecutive temporary failures in every state. `open` lasts from `since` to
 * `until`; `until - since` is the current open time. In `half_open`, `lastOpenMs` is how long the
 * circuit was open before this probe (a failed probe doubles it) and `probeSince` when the probe
 * was let through, so that a probe whose answer never comes (the process died) does not hold the
 * circuit half open for ever (see `probeTimeoutMs`).
 */
export type CircuitState =
  | { state: 'closed'; failures: number }
  | { state: 'open'; since: number; until: number; failures: number }
  | { state: 'half_open'; failures: number; lastOpenMs: number; probeSince: number };

export interface CircuitOptions {
  /**
   * Consecutive temporary failures that open the circuit.
   * @default 5
   */
  failureThreshold: number;
  /**
   * How long the circuit first stays open.
   * @default 30_000
   */
  openMs: number;
  /**
   * The longest it stays open: each failed probe doubles the open time up to this.
   * @default 600_000
   */
  maxOpenMs: number;
  /**
   * How long a probe may go unanswered before another one is let through. Longer than any
   * request timeout, so that it only matters when the answer was lost.
   * @default 120_000
   */
  probeTimeoutMs: number;
}

export const DEFAULT_CIRCUIT: Readonly<CircuitOptions> = Object.freeze({
  failureThreshold: 5,
  openMs: 30_000,
  maxOpenMs: 600_000,
  probeTimeoutMs: 120_000,
});

/**
 * While a probe is in flight, other messages for the destination are told to look again this much
 * later: a probe answers within one request timeout, usually far sooner, and looking again is
 * cheap, whereas waiting for a whole open period would delay every message after a good probe.
 */
export const HALF_OPEN_RECHECK_MS = 1_000;

export const CLOSED: CircuitState = Object.freeze({ state: 'closed', failures: 0 });

function open(nowMs: number, openMs: number, failures: number): CircuitState {
  return { state: 'open', since: nowMs, until: nowMs + openMs, failures };
}

/**
 * The state after one attempt's outcome (from `classifyAttempt`).
 *
 * - `delivered` closes the circuit and forgets the failures.
 * - `permanent` (a 4xx, a 3xx) is the message's fault, not the destination's: it never counts as
 *   a failure, and since it proves the destination answers, it resets the count and closes the
 *   circuit as a success does (a probe answered with a 400 is a destination that is back).
 * - `temporary` counts. In `closed`, reaching `failureThreshold` opens the circuit for `openMs`.
 *   A failed probe (`half_open`, or `open` with `until` passed, in case the caller did not call
 *   {@link circuitProbing}) opens it again for twice the last open time, at most `maxOpenMs`.
 *   In `open` before `until`, it is the late answer of a request sent before the circuit opened:
 *   it is counted but does not extend the open period.
 */
export function circuitAfter(
  state: CircuitState,
  outcome: AttemptOutcome,
  nowMs: number,
  options: CircuitOptions = DEFAULT_CIRCUIT,
): CircuitState {
  if (outcome !== 'temporary') return CLOSED;
  const failures = state.failures + 1;
  switch (state.state) {
    case 'closed':
      if (failures < Math.max(1, options.failureThreshold)) return { state: 'closed', failures };
      return open(nowMs, Math.min(options.openMs, options.maxOpenMs), failures);
    case 'half_open':
      return open(nowMs, Math.min(options.maxOpenMs, state.lastOpenMs * 2), failures);
    case 'open':
      if (nowMs < state.until) return { ...state, failures };
      return open(nowMs, Math.min(options.maxOpenMs, (state.until - state.since) * 2), failures);
  }
}

/**
 * Whether a request may be sent to the destination now.
 *
 * - `closed`: yes.
 * - `open` before `until`: no, look again at `until`.
 * - `open` from `until` on: yes, as the probe; the caller then records it with
 *   {@link circuitProbing} before sending, so no second probe goes out meanwhile.
 * - `half_open`: no second concurrent probe; look again in {@link HALF_OPEN_RECHECK_MS} — unless
 *   the probe has gone unanswered for `probeTimeoutMs`, then a new probe is allowed.
 */
export function mayAttempt(
  state: CircuitState,
  nowMs: number,
  options: CircuitOptions = DEFAULT_CIRCUIT,
): { allowed: true; probe: boolean } | { allowed: false; retryAtMs: number } {
  switch (state.state) {
    case 'closed':
      return { allowed: true, probe: false };
    case 'open':
      return nowMs >= state.until
        ? { allowed: true, probe: true }
        : { allowed: false, retryAtMs: state.until };
    case 'half_open':
      if (nowMs - state.probeSince >= options.probeTimeoutMs) return { allowed: true, probe: true };
      return { allowed: false, retryAtMs: nowMs + HALF_OPEN_RECHECK_MS };
  }
}

/**
 * Records that the probe `mayAttempt` allowed is being sent: `open` → `half_open` (keeping how long
 * it was open, which a failed probe doubles); a `half_open` whose probe timed out gets a fresh
 * `probeSince`. `closed` is returned as it is.
 */
export function circuitProbing(state: CircuitState, nowMs: number): CircuitState {
  switch (state.state) {
    case 'closed':
      return state;
    case 'open':
      return {
        state: 'half_open',
        failures: state.failures,
        lastOpenMs: state.until - state.since,
        probeSince: nowMs,
      };
    case 'half_open':
      return { ...state, probeSince: nowMs };
  }
}
