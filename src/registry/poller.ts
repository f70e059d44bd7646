import PQueue from 'p-queue';
import { type Clock, settlesWithin } from '../clock';
import {
  classifyPollError,
  isFinalRegistryStatus,
  isRegistryStatus,
  isStale,
  nextPollAt,
  type PollOutcome,
  type PollScheduleOptions,
} from '../domain/registry';
import type { Logger } from '../logger';
import { type AverbacaoRow, averbacoesRepo } from '../store/averbacoes';
import type { Db } from '../store/database';
import type { EventsRepo } from '../store/events';

/**
 * The registry poller (interface §4.3: the status query is the fallback when the registry webhook is
 * late). Its schedule lives in `averbacoes.next_poll_at` (indexed, NULL once final or stale), so a
 * restart resumes it and thousands of waiting registrations cost one indexed range query per tick.
 *
 * A poll answer is stored as an event of kind `poll` (dedup key `poll:<requestId>:<status>`, so
 * the same answer twice is one event) and goes through the pipeline like a registry webhook: the
 * same handler applies both, and whichever brings the final status first wins.
 *
 * Failures are classified by domain/registry.ts's classifyPollError (shared with cluster mode's
 * poll job): each keeps polling with backoff; a 429 waits at least its Retry-After.
 */

export interface StatusAnswer {
  requestId: string;
  correlationId?: string | null;
  status: string;
  raw: unknown;
}

export interface StatusClient {
  requestStatus(requestId: string): Promise<StatusAnswer>;
}

export type { PollOutcome } from '../domain/registry';

export interface PollerOptions {
  schedule: PollScheduleOptions;
  clock: Clock;
  logger: Logger;
  /** Polls in flight at once. Default 4. */
  concurrency?: number;
  /** How often the due list is read. Default 1000 ms. */
  tickMs?: number;
  /** Due registrations read per tick. Default 200. */
  batch?: number;
  random?: () => number;
  onPoll?: (outcome: PollOutcome) => void;
  /** Called with a stored poll answer's event id (the pipeline queues it). */
  onStored?: (eventId: number, requestId: string) => void;
}

export class RegistryPoller {
  private readonly repo: ReturnType<typeof averbacoesRepo>;
  private readonly queue: PQueue;
  private readonly inFlight = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private stopping = false;
  private readonly random: () => number;
  private readonly storePoll: (row: AverbacaoRow, answer: StatusAnswer, now: string) => number | null;

  constructor(
    private readonly db: Db,
    events: EventsRepo,
    private readonly client: StatusClient,
    private readonly options: PollerOptions,
  ) {
    this.repo = averbacoesRepo(db);
    this.queue = new PQueue({ concurrency: options.concurrency ?? 4 });
    this.random = options.random ?? Math.random;
    this.storePoll = db.transaction((row: AverbacaoRow, answer: StatusAnswer, now: string) => {
      const body = JSON.stringify(answer.raw ?? { requestId: answer.requestId, status: answer.status });
      const stored = events.insertOrCountDuplicate({
        dedupKey: `poll:${row.request_id}:${answer.status}`,
        webhookId: null,
        kind: 'poll',
        evento: null,
        nuProposta: null,
        requestId: row.request_id,
        registryStatus: answer.status,
        tentativa: null,
        receivedAt: now,
        body,
        bodyBytes: Buffer.byteLength(body),
        status: 'pending',
        lastError: null,
      });
      return stored.duplicate ? null : stored.id;
    });
  }

  start(): void {
    this.stopping = false;
    const tick = this.options.tickMs ?? 1000;
    this.timer = setInterval(() => this.tick(), tick);
    this.timer.unref();
  }

  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.queue.clear();
    await settlesWithin(this.queue.onIdle(), timeoutMs);
  }

  /** Reads the due list and starts the polls it holds. Returns how many were started. */
  tick(): number {
    if (this.stopping) return 0;
    const now = this.options.clock.now();
    let due: AverbacaoRow[];
    try {
      due = this.repo.due(now.toISOString(), this.options.batch ?? 200);
    } catch (err) {
      this.options.logger.error(
        { err: (err as Error).message },
        'registry poller could not read its schedule',
      );
      return 0;
    }
    let started = 0;
    for (const row of due) {
      if (this.inFlight.has(row.request_id)) continue;
      if (isStale(Date.parse(row.created_at), now.getTime(), this.options.schedule)) {
        this.markStale(row, now);
        continue;
      }
      this.inFlight.add(row.request_id);
      started += 1;
      this.queue
        .add(() => this.poll(row))
        .catch((err: Error) =>
          this.options.logger.error({ err: err.message }, 'registry poll failed unexpectedly'),
        )
        .finally(() => this.inFlight.delete(row.request_id));
    }
    return started;
  }

  /** Resolves when no poll is running. */
  onIdle(): Promise<void> {
    return this.queue.onIdle();
  }

  private markStale(row: AverbacaoRow, now: Date): void {
    this.repo.markStale(row.request_id, now.toISOString());
    this.options.onPoll?.('stale');
    this.options.logger.error(
      {
        request_id: row.request_id,
        nu_proposta: row.nu_proposta,
        status: row.status,
        polls: row.poll_attempts,
        since: row.created_at,
      },
      'averbação still not final after REGISTRY_POLL_MAX_AGE_MS: marked stale, polling stopped; check it with the service',
    );
  }

  private async poll(row: AverbacaoRow): Promise<void> {
    const attempts = row.poll_attempts + 1;
    const trackedAt = Date.parse(row.created_at);
    let outcome: PollOutcome = 'ok';
    let detail = '';
    let retryAfterMs = 0;
    let final = false;
    try {
      const answer = await this.client.requestStatus(row.request_id);
      const now = this.options.clock.now().toISOString();
      detail = answer.status;
      final = isRegistryStatus(answer.status) && isFinalRegistryStatus(answer.status);
      const eventId = this.storePoll(row, answer, now);
      if (eventId !== null) this.options.onStored?.(eventId, row.request_id);
    } catch (err) {
      const c = classifyPollError(err);
      outcome = c.outcome;
      retryAfterMs = c.retryAfterMs;
      detail = c.message.slice(0, 200);
      const log = { request_id: row.request_id, outcome, attempts, err: detail };
      if (outcome === 'unauthorized')
        this.options.logger.error(log, 'registry poll refused: check SERVICE_* credentials');
      else this.options.logger.warn(log, 'registry poll failed: will retry');
    }
    const now = this.options.clock.now();
    const next = final
      ? null
      : nextPollAt(trackedAt, now.getTime(), attempts, this.options.schedule, this.random, retryAfterMs);
    try {
      // A final answer stops polling now; the pipeline then applies it (result_source = poll).
      this.repo.recordPoll(row.request_id, {
        attempts,
        nextPollAt: next === null ? null : new Date(next).toISOString(),
        outcome: detail ? `${outcome}:${detail}` : outcome,
        now: now.toISOString(),
      });
      if (next === null && !final) this.markStale({ ...row, poll_attempts: attempts }, now);
    } catch (err) {
      this.options.logger.error(
        { err: (err as Error).message, request_id: row.request_id },
        'could not record a registry poll',
      );
    }
    this.options.onPoll?.(outcome);
  }
}
