/**
 * The deactivation alarm (interface §6.1, rule 4: after 3 failures in a row to the same URL the
 * service deactivates the webhook by itself). The service counts every attempt that did not get a
 * 200, whatever the reason, so the receiver counts every non-200 answer it gives on the webhook
 * routes; and because timeouts and refused connections never reach it, it also watches for the
 * silence that follows a deactivation.
 *
 * Pure: state in, state out; the caller passes the time in and decides what to log and store.
 */

/** The answers that carry the delivery: 200 (contract §4). */
export const ACCEPTED_ANSWERS = ['accepted', 'duplicate', 'quarantined'] as const;

/** The answers the service counts as a failed attempt, each with the status it is sent with. */
export const FAILED_ANSWERS = {
  invalid_signature: 401,
  forbidden: 403,
  payload_too_large: 413,
  aborted: 400,
  storage_unavailable: 503,
} as const;

export type FailedAnswer = keyof typeof FAILED_ANSWERS;
/** Every answer a webhook request can end with (the `deliveries.outcome` values). */
export type DeliveryAnswer = (typeof ACCEPTED_ANSWERS)[number] | FailedAnswer;

export function isFailedAnswer(answer: DeliveryAnswer): answer is FailedAnswer {
  return Object.hasOwn(FAILED_ANSWERS, answer);
}

export interface DeliveryAlarmState {
  /** Failed answers since the last 200. */
  readonly consecutive: number;
  /** The same run by kind of answer, so the log can name the likely cause of each. */
  readonly byAnswer: Readonly<Partial<Record<FailedAnswer, number>>>;
  /** Epoch ms of the run's first and latest failure; null when there is no run. */
  readonly firstFailureAt: number | null;
  readonly lastFailureAt: number | null;
  readonly lastAnswer: FailedAnswer | null;
}

export const noFailures: DeliveryAlarmState = Object.freeze({
  consecutive: 0,
  byAnswer: Object.freeze({}),
  firstFailureAt: null,
  lastFailureAt: null,
  lastAnswer: null,
});

/** Proposals in flight are counted up to here: the log says "at least", and the query stays bounded. */
export const IN_FLIGHT_COUNT_CAP = 1000;

/** A run read back from a shared log is counted up to here (the service stops sending after three). */
export const SHARED_RUN_CAP = 1000;

/** interface §6.1, rule 4: the third failure in a row deactivates the callback. */
export const ALARM_THRESHOLD = 3;
/** While a run goes on, the alarm speaks again every this many further failures. */
export const ALARM_REPEAT_EVERY = 10;

export interface AlarmStep {
  readonly state: DeliveryAlarmState;
  /** True when this answer should be reported as an error (the third failure, then every tenth). */
  readonly alarm: boolean;
  /** Whether the state differs from the one passed in (nothing to store when it does not). */
  readonly changed: boolean;
}

/**
 * Records one answer. A 200 of any kind ends the run. Failures have no time window: the service's
 * rule has none, and a stale run is ended by the next 200 anyway.
 */
export function recordAnswer(state: DeliveryAlarmState, answer: DeliveryAnswer, now: number): AlarmStep {
  if (!isFailedAnswer(answer)) {
    const changed = state.consecutive > 0;
    return { state: changed ? noFailures : state, alarm: false, changed };
  }
  const consecutive = state.consecutive + 1;
  const next: DeliveryAlarmState = {
    consecutive,
    byAnswer: { ...state.byAnswer, [answer]: (state.byAnswer[answer] ?? 0) + 1 },
    firstFailureAt: state.firstFailureAt ?? now,
    lastFailureAt: now,
    lastAnswer: answer,
  };
  return { state: next, alarm: alarmSpeaksAt(consecutive), changed: true };
}

/** One answer as a shared log keeps it: what was answered, and when (epoch ms). */
export interface TimedAnswer {
  readonly answer: DeliveryAnswer;
  readonly at: number;
}

/**
 * What a log shared by several receivers (cluster mode's PostgreSQL) knows of their answers: the
 * service counts failed attempts to the callback URL whatever replica answered them, so three
 * failures spread over three replicas are one run; and a replica's silence is only a silence when
 * no replica hears from the service.
 */
export interface SharedAnswers {
  /** The answers since the latest 200 at any receiver, oldest first (at most SHARED_RUN_CAP). */
  readonly run: readonly TimedAnswer[];
  /** Epoch ms of the latest request any receiver answered, or null. */
  readonly lastDeliveryAt: number | null;
  /** Proposals whose status is not final, counted up to IN_FLIGHT_COUNT_CAP. */
  readonly proposalsInFlight: number;
}

/**
 * The run of failed answers at the end of `answers` (in the order they were answered), by the same
 * rule as {@link recordAnswer}: cluster mode folds every replica's answers read back from
 * PostgreSQL, so three failures spread over three replicas are one run, as the service counts them.
 */
export function runOfAnswers(
  answers: readonly TimedAnswer[],
  from: DeliveryAlarmState = noFailures,
): DeliveryAlarmState {
  let state = from;
  for (const { answer, at } of answers) state = recordAnswer(state, answer, at).state;
  return state;
}

/**
 * Whether a run seen again (read back later, perhaps grown by several failures at once) has reached
 * a point {@link alarmSpeaksAt} reports since it was last seen: a new run counts from zero.
 */
export function runSpeaksSince(seen: DeliveryAlarmState, now: DeliveryAlarmState): boolean {
  // Two states without a run (a null first failure) are the same run, of 0 failures: `from` is 0.
  const sameRun = seen.firstFailureAt === now.firstFailureAt;
  const from = sameRun ? seen.consecutive : 0;
  for (let n = from + 1; n <= now.consecutive; n++) if (alarmSpeaksAt(n)) return true;
  return false;
}

/** Whether the failure numbered `consecutive` in a run is reported: the third, then every tenth. */
export function alarmSpeaksAt(consecutive: number): boolean {
  if (consecutive < ALARM_THRESHOLD) return false;
  return (consecutive - ALARM_THRESHOLD) % ALARM_REPEAT_EVERY === 0;
}

/** Whether the run has reached the point where the service deactivates the callback. */
export function alarmRaised(state: DeliveryAlarmState): boolean {
  return state.consecutive >= ALARM_THRESHOLD;
}

/** The settings a likely cause names. */
export interface CauseSettings {
  signatureHeader: string;
  maxBodyBytes: number;
}

/** What an operator should check first for each kind of failed answer. */
export function likelyCause(answer: FailedAnswer, settings: CauseSettings): string {
  switch (answer) {
    case 'invalid_signature':
      return `check that WEBHOOK_SECRETS holds the secret registered with the service and SIGNATURE_HEADER (${settings.signatureHeader}) its header name`;
    case 'payload_too_large':
      return `the service sends bodies over MAX_BODY_BYTES (${settings.maxBodyBytes}): raise it`;
    case 'storage_unavailable':
      return 'the database refuses writes: check the disk (full, read-only, I/O errors) and whether another process holds a long write lock on the file';
    case 'forbidden':
      return "the sender's address is not in ALLOWED_CIDRS (or TRUST_PROXY does not match the proxies in front): add the service's egress addresses";
    case 'aborted':
      return 'request bodies are cut off before their end: check the network and any proxy timeouts between the service and the receiver';
  }
}

/** The run in a few words: "invalid_signature ×2, storage_unavailable ×1". */
export function describeRun(state: DeliveryAlarmState): string {
  return Object.entries(state.byAnswer)
    .map(([answer, n]) => `${answer} ×${n}`)
    .join(', ');
}

export interface SilenceState {
  readonly raised: boolean;
  /** Epoch ms of the last error logged for this silence, to repeat it every `silenceMs`. */
  readonly loggedAt: number | null;
}

export const noSilence: SilenceState = Object.freeze({ raised: false, loggedAt: null });

export interface SilenceInput {
  readonly now: number;
  /** Epoch ms of the latest request on a webhook route, or of the start when none is known. */
  readonly lastDeliveryAt: number;
  /** DELIVERY_SILENCE_ALARM_MS; 0 disables the silence alarm. */
  readonly silenceMs: number;
  /** Proposals whose status is not final; null when not counted (the silence is not long enough). */
  readonly inFlight: number | null;
}

export interface SilenceStep {
  readonly state: SilenceState;
  readonly silentMs: number;
  /** What to log: the alarm raised, the same alarm again after another `silenceMs`, or its end. */
  readonly log: 'raised' | 'repeat' | 'cleared' | null;
}

/** Whether the silence is long enough that the proposals in flight are worth counting. */
export function silenceDue(now: number, lastDeliveryAt: number, silenceMs: number): boolean {
  return silenceMs > 0 && now - lastDeliveryAt >= silenceMs;
}

/**
 * No delivery for `silenceMs` while proposals are still in flight: the callback may have been
 * deactivated, or the service cannot reach the receiver (timeouts, refused connections never show
 * up as answers). Without proposals in flight the service has nothing to say, so silence is normal.
 */
export function judgeSilence(prev: SilenceState, input: SilenceInput): SilenceStep {
  const silentMs = Math.max(0, input.now - input.lastDeliveryAt);
  const raised = silenceDue(input.now, input.lastDeliveryAt, input.silenceMs) && (input.inFlight ?? 0) > 0;
  if (!raised) return { state: noSilence, silentMs, log: prev.raised ? 'cleared' : null };
  if (!prev.raised) return { state: { raised, loggedAt: input.now }, silentMs, log: 'raised' };
  const repeat = prev.loggedAt === null || input.now - prev.loggedAt >= input.silenceMs;
  return repeat
    ? { state: { raised, loggedAt: input.now }, silentMs, log: 'repeat' }
    : { state: prev, silentMs, log: null };
}
