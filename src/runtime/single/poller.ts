import PQueue from 'p-queue';
import { type Clock, settlesWithin } from '../../clock';
import type { PollOutcome, PollScheduleOptions } from '../../domain/registry';
import {
  decidePoll,
  type PollAnswer,
  type PollEvent,
  type PollLog,
  pollStart,
  type PollTarget,
  refusedAnswer,
} from '../../domain/registry-poll';
import type { Logger } from '../../logger';
import type { AverbacaoRow } from '../../domain/log-rows';
import type { Db } from '../../sqlite/database';
import { averbacoesRepo, type EventsRepo } from '../../sqlite/store';

/**
 * The registry poller (interface §4.3: the status query is the fallback when the registry webhook is
 * late). Its schedule lives in `averbacoes.next_poll_at` (indexed, NULL once final or stale), so a
 * restart resumes it and thousands of waiting registrations cost one indexed range query per tick.
 *
 * A poll answer is stored as an event of kind `poll` (dedup key `poll:<requestId>:<status>`, so
 * the same answer twice is one event) and goes through the pipeline like a registry webhook: the
 * same handler applies both, and whichever brings the final status first wins.
 *
 * Every decision (what an answer or a failure means, the next poll, stale, the log lines) is
 * domain/registry-poll.ts's, shared with cluster mode's poll job; this class only reads the due
 * list, asks the service and applies the decision.
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

export type { PollOutcome } from '../../domain/registry';

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
  private readonly storePoll: (event: PollEvent, now: string) => number | null;

  constructor(
    private readonly db: Db,
    events: EventsRepo,
    private readonly client: StatusClient,
    private readonly options: PollerOptions,
  ) {
    this.repo = averbacoesRepo(db);
    this.queue = new PQueue({ concurrency: options.concurrency ?? 4 });
    this.random = options.random ?? Math.random;
    this.storePoll = db.transaction((event: PollEvent, now: string) => {
      const stored = events.insertOrCountDuplicate({
        dedupKey: event.dedupKey,
        webhookId: null,
        kind: event.kind,
        evento: null,
        nuProposta: null,
        requestId: event.requestId,
        registryStatus: event.registryStatus,
        tentativa: null,
        receivedAt: now,
        body: event.body,
        bodyBytes: Buffer.byteLength(event.body),
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
      const start = pollStart(pollTarget(row), now.getTime(), this.options.schedule);
      if (start.action === 'stale') this.markStale(row.request_id, start.log, now);
      if (start.action !== 'poll') continue;
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

  private markStale(requestId: string, log: PollLog, now: Date): void {
    this.repo.markStale(requestId, now.toISOString());
    this.options.onPoll?.('stale');
    this.options.logger[log.level](log.fields, log.message);
  }

  /** Asks the service, then applies domain/registry-poll.ts's decision (as runtime/cluster/poll-job.ts does). */
  private async poll(row: AverbacaoRow): Promise<void> {
    const target = pollTarget(row);
    const answer: PollAnswer = await this.client.requestStatus(row.request_id).then(
      (a) => ({ ok: true, status: a.status, raw: a.raw }),
      (error: unknown) => ({ ok: false, error }),
    );
    const now = this.options.clock.now();
    let d = decidePoll(target, answer, now.getTime(), this.options.schedule, this.random);
    if (d.event) {
      try {
        const eventId = this.storePoll(d.event, now.toISOString());
        if (eventId !== null) this.options.onStored?.(eventId, row.request_id);
      } catch (error) {
        d = refusedAnswer(target, error, now.getTime(), this.options.schedule, this.random);
      }
    }
    if (d.log) this.options.logger[d.log.level](d.log.fields, d.log.message);
    try {
      // A final answer stops polling now; the pipeline then applies it (result_source = poll).
      this.repo.recordPoll(row.request_id, {
        attempts: d.record.attempts,
        nextPollAt: d.record.nextPollAt === null ? null : new Date(d.record.nextPollAt).toISOString(),
        outcome: d.record.outcome,
        now: now.toISOString(),
      });
      if (d.stale) this.markStale(row.request_id, d.stale, now);
    } catch (err) {
      this.options.logger.error(
        { err: (err as Error).message, request_id: row.request_id },
        'could not record a registry poll',
      );
    }
    this.options.onPoll?.(d.outcome);
  }
}

/** The row as domain/registry-poll.ts reads it. */
function pollTarget(row: AverbacaoRow): PollTarget {
  return {
    requestId: row.request_id,
    nuProposta: row.nu_proposta,
    status: row.status,
    pollAttempts: row.poll_attempts,
    stale: row.stale === 1,
    trackedAt: Date.parse(row.created_at),
  };
}
