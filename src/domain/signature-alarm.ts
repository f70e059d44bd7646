/**
 * Watches for runs of rejected signatures. The service deactivates a callback after three
 * consecutive failed deliveries (interface §6.1), and a 401 is a failed delivery: three in a row almost
 * always mean the secret configured here is not the one registered with the service.
 *
 * Pure: the caller passes the time in and decides what to log.
 */
export interface SignatureAlarmState {
  /** Consecutive rejections since the last accepted signature. */
  readonly consecutive: number;
  readonly firstAt: number | null;
}

export const initialAlarmState: SignatureAlarmState = { consecutive: 0, firstAt: null };

/** How many consecutive rejections raise the alarm (interface §6.1: the third deactivates the callback). */
export const ALARM_THRESHOLD = 3;

export type AlarmStep = { state: SignatureAlarmState; alarm: boolean };

/**
 * Records one delivery's signature outcome. `alarm` is true on the third consecutive rejection and
 * again on every tenth after it, so a long outage keeps saying so without flooding the log.
 * Rejections further apart than `windowMs` start a new run.
 */
export function recordSignatureOutcome(
  state: SignatureAlarmState,
  rejected: boolean,
  now: number,
  windowMs = 60 * 60 * 1000,
): AlarmStep {
  if (!rejected) return { state: initialAlarmState, alarm: false };
  const fresh = state.firstAt === null || now - state.firstAt > windowMs;
  const consecutive = fresh ? 1 : state.consecutive + 1;
  const next = { consecutive, firstAt: fresh ? now : state.firstAt };
  const alarm =
    consecutive === ALARM_THRESHOLD ||
    (consecutive > ALARM_THRESHOLD && (consecutive - ALARM_THRESHOLD) % 10 === 0);
  return { state: next, alarm };
}
