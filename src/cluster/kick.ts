import { backoffDelayMs } from '../domain/backoff';
import type { EventFacts } from '../domain/event-effects';
import type { OutboxEntry, ProcessedEvent } from '../domain/forwarding/messages';
import { type ClusterEventRouter, type HandlerEvent, handlerEventOf } from '../domain/event-router';
import { applyEvent, type EffectsContext } from './pg-effects';
import { type OutboxOptions, outboxEntriesOf, outboxOn, storeOutbox } from './pg-outbox';
import { canonicalNu, iso, type Sql } from './sql';

/**
 * A kick: processes one work key's due events in `events.id` order, inside the transaction pg-boss
 * opened for the kick and commits with the kick's completion (docs/cluster.md §5.2). Each event runs
 * in a savepoint: its effects and its `done` mark commit together, or, when a handler throws, roll
 * back together while the failure itself is recorded (attempts, backoff, dead letter). So an event's
 * effects happen once however often a kick runs, and a kick that dies before its commit leaves its
 * events pending for the next one.
 *
 * The advisory lock makes two kicks of one key never overlap even if the engine's one-active-per-key
 * rule were ever broken (a claim that expired while its kick was still running).
 */

/** Events per kick: a key with more is kicked again in the same transaction. */
export const KICK_BATCH = 64;

export interface KickOptions {
  maxAttempts: number;
  backoff: { baseMs: number; maxMs: number };
  random?: () => number;
  /** Re-queues the key (more events waiting, or a retry due at `startAfter`), in `sql`'s transaction. */
  kick(sql: Sql, keys: readonly string[], startAfter?: Date): Promise<void>;
  onProcessed?(evento: string, outcome: 'done' | 'retry' | 'dead'): void;
  onError?(error: Error, event: EventFacts): void;
  logger: EffectsContext['logger'] & { error(fields: Record<string, unknown>, message: string): void };
  /** Forwarding and the change feed: the messages each event causes are stored with its effects. */
  outbox?: OutboxOptions;
  /** A partner's own handlers (`configureClusterRouter`), awaited after the life cycle's effects. */
  handlers?: ClusterEventRouter | undefined;
}

interface EventRow {
  id: string;
  kind: EventFacts['kind'];
  evento: string | null;
  nu_proposta: string | null;
  request_id: string | null;
  registry_status: string | null;
  body: Buffer | null;
  received_at: Date;
  status: string;
  attempts: number;
  next_attempt_at: Date | null;
  webhook_id: string | null;
  tentativa: number | null;
}

/** The SQL condition that selects a work key's events, as pipeline.workKey() derives the key. */
function keyCondition(key: string): { where: string; value: string } {
  const value = key.slice(2);
  if (key.startsWith('p:')) return { where: 'nu_proposta = $1', value };
  if (key.startsWith('r:')) return { where: 'nu_proposta IS NULL AND request_id = $1', value };
  if (key.startsWith('e:') && /^\d+$/.test(value)) return { where: 'id = $1::bigint', value };
  throw new Error(`not a work key: ${key}`);
}

type KickContext = Omit<EffectsContext, 'sql' | 'now'> & { now: () => Date };

/** Processes `key`'s due events; returns how many reached a final status. */
export async function runKick(
  sql: Sql,
  key: string,
  ctx: KickContext,
  options: KickOptions,
): Promise<number> {
  return runKicks(sql, [key], ctx, options);
}

/**
 * Processes each key's due events, in one transaction (a batch of kicks pg-boss handed one
 * worker). The messages they cause are stored last, once for the batch: the outbox's lock
 * (pg-outbox.ts) is then held only for those inserts and the commit, never while events run.
 */
export async function runKicks(
  sql: Sql,
  keys: readonly string[],
  ctx: KickContext,
  options: KickOptions,
): Promise<number> {
  const outbox: OutboxEntry[] = [];
  let finished = 0;
  for (const key of keys) finished += await processKey(sql, key, ctx, options, outbox);
  await storeOutbox(sql, outbox);
  return finished;
}

async function processKey(
  sql: Sql,
  key: string,
  ctx: KickContext,
  options: KickOptions,
  outbox: OutboxEntry[],
): Promise<number> {
  const { where, value } = keyCondition(key);
  await sql.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`consig-kick:${key}`]);
  const rows = await sql.query<EventRow>(
    `SELECT id, kind, evento, nu_proposta, request_id, registry_status, body, received_at, status, attempts,
       next_attempt_at, webhook_id, tentativa
     FROM events WHERE ${where} AND status IN ('pending', 'failed') ORDER BY id LIMIT ${KICK_BATCH}`,
    [value],
  );
  let finished = 0;
  for (const row of rows) {
    const now = ctx.now();
    if (row.next_attempt_at !== null && row.next_attempt_at.getTime() > now.getTime()) {
      // A retry not due yet holds its proposal's later events back (order), until then.
      await options.kick(sql, [key], row.next_attempt_at);
      return finished;
    }
    const event = toFacts(row);
    await sql.query('SAVEPOINT consig_event');
    try {
      const entries = await runEvent(row, event, { ...ctx, sql, now }, options);
      await sql.query(
        `UPDATE events SET status = 'done', attempts = attempts + 1, processed_at = $2, next_attempt_at = NULL,
           last_error = NULL WHERE id = $1`,
        [row.id, now.toISOString()],
      );
      await sql.query('RELEASE SAVEPOINT consig_event');
      outbox.push(...entries);
      options.onProcessed?.(event.evento ?? event.kind, 'done');
      finished += 1;
    } catch (err) {
      await sql.query('ROLLBACK TO SAVEPOINT consig_event');
      const error = err instanceof Error ? err : new Error(String(err));
      const attempts = row.attempts + 1;
      const dead = attempts >= options.maxAttempts;
      const delay = backoffDelayMs(attempts, options.backoff, options.random ?? Math.random);
      const nextAt = dead ? null : new Date(now.getTime() + delay);
      await sql.query(
        `UPDATE events SET status = $2, attempts = $3, last_error = $4, next_attempt_at = $5,
           processed_at = CASE WHEN $2 = 'dead' THEN $6::timestamptz ELSE NULL END WHERE id = $1`,
        [
          row.id,
          dead ? 'dead' : 'failed',
          attempts,
          error.message.slice(0, 1000),
          iso(nextAt),
          now.toISOString(),
        ],
      );
      options.onError?.(error, event);
      options.handlers?.emitError(error, event);
      options.onProcessed?.(event.evento ?? event.kind, dead ? 'dead' : 'retry');
      const log = {
        event_id: Number(row.id),
        evento: event.evento,
        attempts,
        err: error.message.slice(0, 200),
      };
      if (dead) {
        options.logger.error(log, 'handler failed for the last time: event is dead (replayable)');
        finished += 1;
        continue; // a dead letter no longer holds its proposal back
      }
      options.logger.warn({ ...log, next_attempt_at: iso(nextAt) }, 'handler failed: will retry');
      await options.kick(sql, [key], nextAt ?? undefined);
      return finished;
    }
  }
  if (rows.length === KICK_BATCH) await options.kick(sql, [key]);
  return finished;
}

/**
 * What an event does: the life cycle's effects, then the partner's handlers, then the messages
 * they cause (read back after them), kept by the caller once the event's savepoint is released.
 */
async function runEvent(
  row: EventRow,
  event: HandlerEvent,
  ctx: Parameters<typeof applyEvent>[1],
  options: KickOptions,
): Promise<OutboxEntry[]> {
  await applyEvent(event, ctx);
  for (const handler of options.handlers?.handlersFor(event) ?? [])
    await handler(event, { sql: ctx.sql, now: ctx.now, logger: options.logger });
  return outboxOn(options.outbox)
    ? outboxEntriesOf(ctx.sql, processedOf(row, event), ctx.now, options.outbox)
    : [];
}

function toFacts(row: EventRow): HandlerEvent {
  return handlerEventOf({
    ...row,
    id: Number(row.id),
    nu_proposta: row.nu_proposta === null ? null : canonicalNu(row.nu_proposta),
    received_at: row.received_at.toISOString(),
  });
}

/** The event as the outbox's messages describe it (SQLite mode's pipeline hands the same). */
function processedOf(row: EventRow, event: EventFacts): ProcessedEvent {
  return {
    id: event.id,
    kind: event.kind,
    evento: event.evento,
    nu_proposta: event.nuProposta,
    request_id: event.requestId,
    received_at: row.received_at.toISOString(),
    payload: event.payload,
    raw_body: event.rawBody,
  };
}
