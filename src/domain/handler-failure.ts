import { backoffDelayMs } from './backoff';
import { maskCpfsInText } from './privacy';

/**
 * What a failing handler does to its event, in either store (SQLite mode's pipeline, cluster mode's
 * turn): the attempt is counted; below `maxAttempts` the event is `failed` and waits for its retry
 * (its proposal waits with it, order is kept), at `maxAttempts` it is `dead` (replayable) and its
 * proposal moves on. The store only records it and writes the log line given here.
 *
 * A handler's message may name a CPF (`cpf 52998224725 not found`): the text kept in `last_error`
 * and the log line's `err` have every CPF masked (domain/privacy.ts), here, for both stores. The
 * `error` itself goes unchanged to the partner's own `onError` handlers.
 */

export interface HandlerFailureInput {
  /** Attempts already recorded for the event (this one not included). */
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly backoff: { readonly baseMs: number; readonly maxMs: number };
  readonly random: () => number;
  readonly now: Date;
  readonly error: unknown;
  readonly event: {
    readonly id: number;
    readonly evento: string | null;
    readonly nuProposta: number | string | null;
  };
}

export interface HandlerFailure {
  /** The event's new status. */
  readonly status: 'failed' | 'dead';
  /** As the processing metrics count it. */
  readonly outcome: 'retry' | 'dead';
  /** Attempts including this one. */
  readonly attempts: number;
  /** ISO-8601; null when dead. */
  readonly nextAttemptAt: string | null;
  /** For the event's `last_error` column: the message with every CPF masked. */
  readonly lastError: string;
  readonly error: Error;
  /** The one log line of this failure, the same in both modes. */
  readonly log: {
    readonly level: 'warn' | 'error';
    readonly fields: Readonly<Record<string, unknown>>;
    readonly message: string;
  };
}

/** `last_error` keeps this much of the message; the log line less. */
const LAST_ERROR_CHARS = 1000;
const LOG_ERROR_CHARS = 200;

export const HANDLER_RETRY_MESSAGE = 'handler failed: will retry';
export const HANDLER_DEAD_MESSAGE = 'handler failed for the last time: event is dead (replayable)';

/** A thrown value as an Error (handlers may throw anything). */
export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}

export function handlerFailure(input: HandlerFailureInput): HandlerFailure {
  const error = asError(input.error);
  // Masked before it is cut: a cut first could leave the first digits of a CPF whole.
  const message = maskCpfsInText(error.message);
  const attempts = input.attempts + 1;
  const dead = attempts >= input.maxAttempts;
  const nextAttemptAt = dead
    ? null
    : new Date(input.now.getTime() + backoffDelayMs(attempts, input.backoff, input.random)).toISOString();
  const fields = {
    event_id: input.event.id,
    evento: input.event.evento,
    nu_proposta: input.event.nuProposta,
    attempts,
    next_attempt_at: nextAttemptAt,
    err: message.slice(0, LOG_ERROR_CHARS),
  };
  return {
    status: dead ? 'dead' : 'failed',
    outcome: dead ? 'dead' : 'retry',
    attempts,
    nextAttemptAt,
    lastError: message.slice(0, LAST_ERROR_CHARS),
    error,
    log: dead
      ? { level: 'error', fields, message: HANDLER_DEAD_MESSAGE }
      : { level: 'warn', fields, message: HANDLER_RETRY_MESSAGE },
  };
}
