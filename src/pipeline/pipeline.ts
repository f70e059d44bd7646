import PQueue from 'p-queue';
import type { Clock } from '../clock';
import { backoffDelayMs } from '../domain/backoff';
import type { EventRouter, HandlerEvent } from '../handlers/router';
import type { Logger } from '../logger';
import type { Db } from '../store/database';
import {
  type EventForWork,
  type PipelineQueries,
  pipelineQueries,
  type WorkItem,
} from '../store/pipeline-queries';

/**
 * The event pipeline: stored events → handlers, in an in-process p-queue.
 *
 * - Events of one proposal (one `requestId` for registry results) run one at a time, in the order
 *   they were received (event id order); different proposals run in parallel up to `concurrency`.
 * - Each event runs all its handlers and is marked `done` in ONE transaction: effects happen once.
 * - A handler that throws rolls its transaction back; the event becomes `failed` with a backoff
 *   kept in the DB (`attempts`, `next_attempt_at`, `last_error`), and its proposal waits for it
 *   (order is kept). After `maxAttempts` it is `dead` and the proposal moves on.
 * - At start, everything `pending` or `failed` is queued again: a crash loses no work. A sweep finds
 *   retries that fell due and events put back by `replay` from another process.
 */

export interface PipelineMetrics {
  processed(evento: string, outcome: 'done' | 'retry' | 'dead'): void;
  depth(n: number): void;
}

export interface PipelineOptions {
  concurrency: number;
  maxAttempts: number;
  clock: Clock;
  logger: Logger;
  metrics?: PipelineMetrics;
  /** Handler retry backoff: first delay and cap. Default 1 s … 10 min. */
  backoff?: { baseMs: number; maxMs: number };
  random?: () => number;
  /** How often due retries and replays are looked for. Default 1000 ms. */
  sweepIntervalMs?: number;
  /** Events processed before yielding to the event loop (HTTP must not starve). Default 32. */
  yieldEvery?: number;
}

interface KeyState {
  ids: number[];
  running: boolean;
  /** The head event failed and waits for its retry. */
  blocked: boolean;
}

/** `unavailable`: the database refused the work itself; the event is tried again shortly. */
export type ProcessOutcome = 'done' | 'retry' | 'dead' | 'skipped' | 'unavailable';

/** How long a proposal waits after the database refused its event, before trying again. */
const UNAVAILABLE_RETRY_MS = 1000;

export function workKey(item: Pick<WorkItem, 'id' | 'nu_proposta' | 'request_id'>): string {
  if (item.nu_proposta !== null && item.nu_proposta !== undefined) return `p:${item.nu_proposta}`;
  if (item.request_id !== null && item.request_id !== undefined) return `r:${item.request_id}`;
  return `e:${item.id}`;
}

function parse(body: string | Buffer | null): unknown {
  if (body === null) return undefined;
  try {
    return JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  } catch {
    return undefined;
  }
}

function toHandlerEvent(row: EventForWork): HandlerEvent {
  const payload = parse(row.body);
  const dados =
    typeof payload === 'object' && payload !== null && Object.hasOwn(payload, 'dados')
      ? (payload as Record<string, unknown>).dados
      : undefined;
  return {
    id: row.id,
    kind: row.kind,
    evento: row.evento,
    nuProposta: row.nu_proposta,
    requestId: row.request_id,
    registryStatus: row.registry_status,
    webhookId: row.webhook_id,
    tentativa: row.tentativa,
    receivedAt: row.received_at,
    attempts: row.attempts,
    payload,
    dados,
  };
}

export class Pipeline {
  private readonly queue: PQueue;
  private readonly q: PipelineQueries;
  private readonly keys = new Map<string, KeyState>();
  private readonly tracked = new Set<number>();
  private sweeper: NodeJS.Timeout | null = null;
  private stopping = false;
  private readonly random: () => number;
  private readonly runEvent: (row: EventForWork, event: HandlerEvent, now: Date) => void;

  constructor(
    private readonly db: Db,
    private readonly router: EventRouter,
    private readonly options: PipelineOptions,
  ) {
    this.queue = new PQueue({ concurrency: options.concurrency });
    this.q = pipelineQueries(db);
    this.random = options.random ?? Math.random;
    this.runEvent = db.transaction((row: EventForWork, event: HandlerEvent, now: Date) => {
      const ctx = { db, now, logger: options.logger };
      for (const handler of this.router.handlersFor(event)) handler(event, ctx);
      this.q.markDone(row.id, now.toISOString());
    });
  }

  /** Queues everything left pending or failed (crash recovery) and starts the sweep. */
  start(): void {
    this.stopping = false;
    const backlog = this.q.backlog();
    for (const item of backlog) this.enqueue(item.id, workKey(item), false);
    if (backlog.length > 0)
      this.options.logger.info({ events: backlog.length }, 'pipeline: recovered backlog');
    for (const key of this.keys.keys()) this.schedule(key);
    const interval = this.options.sweepIntervalMs ?? 1000;
    this.sweeper = setInterval(() => this.sweep(), interval);
    this.sweeper.unref();
    this.reportDepth();
  }

  /** Queues one stored event (called right after its commit). */
  enqueue(id: number, key: string, schedule = true): void {
    if (this.stopping) return; // it stays pending in the DB for the next start
    let state = this.keys.get(key);
    if (this.tracked.has(id)) {
      // A due retry found by the sweep: release the key if this is the event it waits for.
      if (state?.blocked && state.ids[0] === id) {
        state.blocked = false;
        if (schedule) this.schedule(key);
      }
      return;
    }
    if (!state) {
      state = { ids: [], running: false, blocked: false };
      this.keys.set(key, state);
    }
    const last = state.ids[state.ids.length - 1];
    if (last === undefined || last < id) state.ids.push(id);
    else
      state.ids.splice(
        state.ids.findIndex((x) => x > id),
        0,
        id,
      ); // a replayed older event
    this.tracked.add(id);
    if (schedule) this.schedule(key);
    this.reportDepth();
  }

  /** Events known to the pipeline and not finished. */
  get depth(): number {
    return this.tracked.size;
  }

  /** Resolves when nothing is running or runnable (blocked retries do not count). */
  async onIdle(): Promise<void> {
    await this.queue.onIdle();
  }

  /**
   * Stops taking work and waits (bounded) for running handlers. What did not finish stays
   * `pending`/`failed` in the DB for the next start.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
    this.queue.clear();
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([
      this.queue.onIdle().then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    return finished;
  }

  /** Finds retries that fell due and events replayed from another process. */
  sweep(): void {
    if (this.stopping) return;
    try {
      const now = this.options.clock.now().toISOString();
      for (const item of this.q.due(now, 1000)) this.enqueue(item.id, workKey(item));
    } catch (err) {
      this.options.logger.error({ err: (err as Error).message }, 'pipeline sweep failed; trying again');
    }
  }

  private schedule(key: string): void {
    const state = this.keys.get(key);
    if (!state || state.running || state.blocked || state.ids.length === 0 || this.stopping) return;
    state.running = true;
    this.queue
      .add(() => this.runKey(key, state))
      .catch((err: Error) => {
        state.running = false;
        this.options.logger.error({ err: err.message, key }, 'pipeline task failed');
      });
  }

  private async runKey(key: string, state: KeyState): Promise<void> {
    const yieldEvery = this.options.yieldEvery ?? 32;
    let n = 0;
    try {
      while (state.ids.length > 0 && !this.stopping) {
        const id = state.ids[0] as number;
        const outcome = this.process(id);
        if (outcome === 'retry' || outcome === 'unavailable') {
          state.blocked = true;
          if (outcome === 'unavailable') {
            setTimeout(() => {
              state.blocked = false;
              this.schedule(key);
            }, UNAVAILABLE_RETRY_MS).unref();
          }
          return;
        }
        state.ids.shift();
        this.tracked.delete(id);
        n += 1;
        if (n % yieldEvery === 0) {
          this.reportDepth();
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
    } finally {
      state.running = false;
      if (state.ids.length === 0) this.keys.delete(key);
      else if (!state.blocked) this.schedule(key);
      this.reportDepth();
    }
  }

  /** Runs one event's handlers in a transaction. Never throws. */
  process(id: number): ProcessOutcome {
    let row: EventForWork | undefined;
    try {
      row = this.q.load(id);
    } catch (err) {
      // The database refused even a read: leave the event where it is and retry on the next sweep.
      this.options.logger.error(
        { err: (err as Error).message, event_id: id },
        'pipeline could not load an event',
      );
      return 'unavailable';
    }
    if (!row || (row.status !== 'pending' && row.status !== 'failed')) return 'skipped';
    const event = toHandlerEvent(row);
    const name = row.evento ?? row.kind;
    const now = this.options.clock.now();
    try {
      this.runEvent(row, event, now);
      this.options.metrics?.processed(name, 'done');
      return 'done';
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      const attempts = row.attempts + 1;
      const dead = attempts >= this.options.maxAttempts;
      const delay = backoffDelayMs(
        attempts,
        this.options.backoff ?? { baseMs: 1000, maxMs: 600_000 },
        this.random,
      );
      const nextAt = dead ? null : new Date(now.getTime() + delay).toISOString();
      try {
        this.q.markFailed(id, dead ? 'dead' : 'failed', attempts, error.message.slice(0, 1000), nextAt);
      } catch (markErr) {
        this.options.logger.error(
          { err: (markErr as Error).message, event_id: id },
          'could not record a handler failure',
        );
        return 'unavailable';
      }
      this.router.emitError(error, event);
      this.options.metrics?.processed(name, dead ? 'dead' : 'retry');
      const log = {
        event_id: id,
        evento: row.evento,
        nu_proposta: row.nu_proposta,
        attempts,
        err: error.message,
      };
      if (dead)
        this.options.logger.error(log, 'handler failed for the last time: event is dead (replayable)');
      else this.options.logger.warn({ ...log, retry_at: nextAt }, 'handler failed: will retry');
      return dead ? 'dead' : 'retry';
    }
  }

  private reportDepth(): void {
    this.options.metrics?.depth(this.tracked.size);
  }
}
