import type { Clock } from '../clock';
import type { Config } from '../config';
import {
  ALARM_THRESHOLD,
  alarmRaised,
  type AlarmStep,
  type CauseSettings,
  type DeliveryAlarmState,
  type DeliveryAnswer,
  describeRun,
  type FailedAnswer,
  IN_FLIGHT_COUNT_CAP,
  isFailedAnswer,
  judgeSilence,
  likelyCause,
  noFailures,
  noSilence,
  recordAnswer,
  runOfAnswers,
  runSpeaksSince,
  type SharedAnswers,
  type SilenceState,
  silenceDue,
} from '../domain/delivery-alarm';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';

/**
 * The deactivation alarm at run time (rules in src/domain/delivery-alarm.ts): every answer of the
 * webhook handler goes through `answered`, and a timer judges the silence. Metrics and error logs
 * are what an operator alerts on; the run of failures is stored so a restart does not forget it.
 *
 * Writes stay off the 200 path: a 200 writes only when it ends a run. A write that fails (another
 * connection holds the write lock: the very case that makes the receiver answer 503) keeps the run
 * in memory and is retried by the next check, so the alarm still speaks while the disk refuses.
 */

/** The stored run of the alarm (sqlite/sqlite-delivery-alarm.ts on the SQLite file). */
export interface DeliveryAlarmRepo {
  load(): DeliveryAlarmState;
  save(state: DeliveryAlarmState, now: Date): void;
  update(step: (stored: DeliveryAlarmState) => AlarmStep, now: Date): AlarmStep;
  lastDeliveryAt(): number | null;
  proposalsInFlight(): number;
}

export interface DeliveryWatchOptions extends CauseSettings {
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /**
   * Where the run is kept across restarts, and where the silence check reads the last delivery
   * and the proposals in flight.
   * @default undefined (the run lives in memory only; no silence alarm)
   */
  repo?: DeliveryAlarmRepo | undefined;
  /**
   * DELIVERY_SILENCE_ALARM_MS: no delivery for this long while proposals are in flight raises the
   * silence alarm; 0 disables it.
   * @default 0
   */
  silenceMs?: number | undefined;
  /**
   * How often the timer started by `start()` checks the silence and re-reads the stored run.
   * @default 15000
   */
  checkIntervalMs?: number | undefined;
  /** Called by `stop()` after the last save (closes a connection the watch was given for itself). */
  onStop?: (() => void) | undefined;
  /**
   * Cluster mode: reads every replica's answers from the shared log (PostgreSQL), or null when it
   * cannot. Read at each check and {@link SHARED_RECHECK_MS} after a failed answer (once the relay
   * has moved it). The gauges then show the longer of this replica's run and the cluster's; the
   * cluster's run is logged when it reaches a point this replica's own run did not report; the
   * silence is judged on the last delivery at any replica and the proposals in flight there. While
   * it returns null, this replica's own answers alone are judged, as in SQLite mode.
   * @default undefined (one receiver: its own answers and file)
   */
  shared?: (() => Promise<SharedAnswers | null>) | undefined;
}

/** After a failed answer, the shared log is read again this much later (the relay lag is ~tens of ms). */
export const SHARED_RECHECK_MS = 1000;

export class DeliveryWatch {
  private run: DeliveryAlarmState = noFailures;
  private silence: SilenceState = noSilence;
  /** The run changed but could not be stored; the stored row is behind memory. */
  private unsaved = false;
  /** Epoch ms of the last request this process answered on a webhook route. */
  private lastSeenAt: number | null = null;
  private readonly startedAt: number;
  private timer: NodeJS.Timeout | null = null;
  /** Cluster mode: the run across replicas, as last read, and the silence figures read with it. */
  private sharedRun: DeliveryAlarmState = noFailures;
  private sharedFigures: Pick<SharedAnswers, 'lastDeliveryAt' | 'proposalsInFlight'> | null = null;
  private sharedReading: Promise<void> | null = null;
  private recheck: NodeJS.Timeout | null = null;

  constructor(private readonly options: DeliveryWatchOptions) {
    this.startedAt = options.clock.now().getTime();
    // A restart in the middle of a run goes on counting from where it was.
    if (options.repo) this.run = this.readStored() ?? noFailures;
    this.publishRun();
  }

  /** Records the answer one webhook request got, 200 or not (interface §6.1: each one counts). */
  answered(answer: DeliveryAnswer): void {
    const now = this.options.clock.now().getTime();
    this.lastSeenAt = now;
    if (this.silence.raised) this.guarded(() => this.judgeSilence(now));
    // Cluster mode: a failure may extend the cluster's run, a 200 may end it.
    if (isFailedAnswer(answer) || this.sharedRun.consecutive > 0) this.recheckShared();
    // The 200 path with no run going on: nothing to count, nothing to write.
    if (!isFailedAnswer(answer) && this.run.consecutive === 0 && !this.unsaved) return;
    const ended = this.run.consecutive;
    const step = this.recordAndStore(answer, now);
    this.run = step.state;
    this.publishRun();
    if (step.alarm) this.logAlarm(this.run, 'replica');
    else if (step.changed && ended >= ALARM_THRESHOLD && step.state.consecutive === 0)
      this.options.logger.info({ failed_answers: ended }, 'webhook deliveries answered 200 again');
  }

  /** Retries an unsaved run or adopts the stored one (another process may move it), and judges the silence. */
  check(): void {
    this.guarded(() => {
      if (this.unsaved) this.save();
      else if (this.options.repo) {
        this.run = this.readStored() ?? this.run;
        this.publishRun();
      }
      // Cluster mode judges the silence once the shared figures are read.
      if (this.options.shared) void this.readShared();
      else this.judgeSilence(this.options.clock.now().getTime());
    });
  }

  /** Reads the cluster's answers (one read at a time); never rejects. */
  readShared(): Promise<void> {
    const { shared } = this.options;
    if (!shared) return Promise.resolve();
    this.sharedReading ??= shared()
      .then(
        (answers) => this.adoptShared(answers),
        (err: unknown) => {
          this.options.logger.warn(
            { err: (err as Error).message },
            'could not read the answers of the other replicas',
          );
          this.adoptShared(null);
        },
      )
      .finally(() => {
        this.sharedReading = null;
      });
    return this.sharedReading;
  }

  private recheckShared(): void {
    if (!this.options.shared || this.recheck !== null) return;
    this.recheck = setTimeout(() => {
      this.recheck = null;
      void this.readShared();
    }, SHARED_RECHECK_MS);
    this.recheck.unref();
  }

  private adoptShared(answers: SharedAnswers | null): void {
    this.guarded(() => {
      if (answers !== null) {
        const seen = this.sharedRun;
        const run = runOfAnswers(answers.run);
        this.sharedRun = run;
        this.sharedFigures = {
          lastDeliveryAt: answers.lastDeliveryAt,
          proposalsInFlight: answers.proposalsInFlight,
        };
        this.publishRun();
        // This replica's own run reports itself; the cluster's only when it is the longer one.
        if (run.consecutive > this.run.consecutive && runSpeaksSince(seen, run))
          this.logAlarm(run, 'cluster');
        else if (alarmRaised(seen) && run.consecutive === 0)
          this.options.logger.info(
            { failed_answers: seen.consecutive },
            'webhook deliveries answered 200 again at the replicas',
          );
      } else this.sharedFigures = null;
      this.judgeSilence(this.options.clock.now().getTime());
    });
  }

  /** The alarm must never break an answer or the timer: a failed read or write is logged and retried later. */
  private guarded(work: () => void): void {
    try {
      work();
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'delivery alarm check failed');
    }
  }

  /** Checks every `checkIntervalMs` until `stop()`; the timer does not keep the process alive. */
  start(): this {
    this.check();
    this.timer ??= setInterval(() => this.check(), this.options.checkIntervalMs ?? 15_000);
    this.timer.unref();
    return this;
  }

  /** Stops the timer and makes a last attempt to store an unsaved run. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.recheck) clearTimeout(this.recheck);
    this.recheck = null;
    if (this.unsaved) {
      try {
        this.save();
      } catch {
        // Best effort: the run since the last stored change is lost, and the next start counts on from there.
      }
    }
    this.options.onStop?.();
  }

  /**
   * Steps the rule on the stored run when memory and row agree (another process on the file may
   * have moved it), in one IMMEDIATE transaction; on memory alone when the row cannot be written.
   */
  private recordAndStore(answer: DeliveryAnswer, now: number) {
    const { repo } = this.options;
    if (repo && !this.unsaved) {
      try {
        return repo.update((stored) => recordAnswer(stored, answer, now), new Date(now));
      } catch (err) {
        this.markUnsaved(err);
      }
    }
    const step = recordAnswer(this.run, answer, now);
    if (repo && step.changed) this.unsaved = true;
    return step;
  }

  private save(): void {
    this.options.repo?.save(this.run, this.options.clock.now());
    this.unsaved = false;
  }

  private markUnsaved(err: unknown): void {
    if (!this.unsaved)
      this.options.logger.warn(
        { err: (err as Error).message },
        'could not store the delivery alarm state; kept in memory and retried',
      );
    this.unsaved = true;
  }

  private readStored(): DeliveryAlarmState | null {
    try {
      return this.options.repo?.load() ?? null;
    } catch (err) {
      this.options.logger.warn({ err: (err as Error).message }, 'could not read the delivery alarm state');
      return null;
    }
  }

  /** The gauges show the longer run: this replica's own, or (cluster mode) every replica's. */
  private publishRun(): void {
    const { metrics } = this.options;
    const run = this.sharedRun.consecutive > this.run.consecutive ? this.sharedRun : this.run;
    metrics.consecutiveFailedAnswers.set(run.consecutive);
    metrics.consecutiveInvalidSignatures.set(run.byAnswer.invalid_signature ?? 0);
    metrics.deactivationAlarm.set(alarmRaised(run) ? 1 : 0);
  }

  private logAlarm(run: DeliveryAlarmState, scope: 'replica' | 'cluster'): void {
    const kinds = Object.keys(run.byAnswer) as FailedAnswer[];
    const what =
      kinds.length === 1 && kinds[0] === 'invalid_signature'
        ? 'rejected for invalid signature'
        : `failed (${describeRun(run)})`;
    const causes = kinds.map((k) => `${k}: ${likelyCause(k, this.options)}`).join('; ');
    this.options.logger.error(
      {
        consecutive: run.consecutive,
        since: new Date(run.firstFailureAt ?? 0).toISOString(),
        last_answer: run.lastAnswer,
        by_answer: run.byAnswer,
        header: this.options.signatureHeader,
        ...(scope === 'cluster' ? { across: 'replicas' } : {}),
      },
      `${run.consecutive} consecutive webhook deliveries ${what}${scope === 'cluster' ? ' across the replicas' : ''}: the service deactivates the callback after 3 consecutive failed deliveries (interface §6.1). Likely cause — ${causes}. Then have the service re-activate the callback.`,
    );
  }

  private judgeSilence(now: number): void {
    const { repo, metrics } = this.options;
    const silenceMs = this.options.silenceMs ?? 0;
    const shared = this.sharedFigures;
    const stored = shared ? shared.lastDeliveryAt : (repo?.lastDeliveryAt() ?? null);
    const known = [this.lastSeenAt, stored].filter((t): t is number => t !== null);
    const lastDeliveryAt = known.length > 0 ? Math.max(...known) : this.startedAt;
    const due = (repo !== undefined || shared !== null) && silenceDue(now, lastDeliveryAt, silenceMs);
    const inFlight = !due ? null : shared ? shared.proposalsInFlight : (repo?.proposalsInFlight() ?? null);
    const step = judgeSilence(this.silence, { now, lastDeliveryAt, silenceMs, inFlight });
    this.silence = step.state;
    metrics.secondsSinceLastDelivery.set(step.silentMs / 1000);
    metrics.silenceAlarm.set(step.state.raised ? 1 : 0);
    if (step.log === 'raised' || step.log === 'repeat')
      this.logSilence(step.silentMs, lastDeliveryAt, inFlight ?? 0);
    if (step.log === 'cleared')
      this.options.logger.info({ silent_ms: step.silentMs }, 'webhook delivery silence ended');
  }

  private logSilence(silentMs: number, lastDeliveryAt: number, inFlight: number): void {
    const minutes = Math.floor(silentMs / 60_000);
    const proposals = inFlight >= IN_FLIGHT_COUNT_CAP ? `at least ${inFlight}` : String(inFlight);
    this.options.logger.error(
      {
        silent_ms: silentMs,
        last_delivery_at: new Date(lastDeliveryAt).toISOString(),
        proposals_in_flight: inFlight,
      },
      `no webhook delivery for ${minutes} min while ${proposals} proposals are in flight: the service may have deactivated the callback after 3 failed deliveries (interface §6.1), or cannot reach this receiver (timeouts and refused connections never show up here). Ask the service for the callback's status and re-activate it; check the public URL, DNS, TLS and firewall.`,
    );
  }
}

/**
 * The watch `serve` runs, on `alarm` (sqlite/sqlite-delivery-alarm.ts `openDeliveryAlarm`: its own connection to
 * DATABASE_PATH), loaded with the stored run and checking on a timer. `stop()` closes the alarm's
 * connection.
 */
export function startDeliveryWatch(
  config: Pick<Config, 'signatureHeader' | 'maxBodyBytes' | 'deliverySilenceAlarmMs'>,
  deps: {
    alarm: { repo: DeliveryAlarmRepo; close(): void };
    metrics: Metrics;
    logger: Logger;
    clock: Clock;
    checkIntervalMs?: number | undefined;
    shared?: DeliveryWatchOptions['shared'];
  },
): DeliveryWatch {
  const { alarm, ...rest } = deps;
  return new DeliveryWatch({
    ...rest,
    signatureHeader: config.signatureHeader,
    maxBodyBytes: config.maxBodyBytes,
    repo: alarm.repo,
    silenceMs: config.deliverySilenceAlarmMs,
    onStop: () => alarm.close(),
  }).start();
}
