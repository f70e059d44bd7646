import { REGISTRY_STATUSES, STAGES } from '../../domain/catalogue';
import { FAILED_ANSWERS, ACCEPTED_ANSWERS } from '../../domain/delivery-alarm';
import { parseDuration } from '../../domain/duration';
import { PROPOSAL_STATUSES } from '../../domain/lifecycle';
import type { ConsoleEventFilter } from '../../domain/console';
import { parseInstant } from '../../domain/forwarding/admin';
import { parseNuProposta } from '../../domain/log-rows';
import { HttpError } from '../errors';
import { parseJsonFilter } from './json-filter';

/**
 * The console's filters, read from a query string (or a form body) into typed values. Every filter
 * is in the URL, so a view can be shared; a value that makes no sense is a 400 page saying which
 * field and what it expects, never a crash and never a silently wider filter. Pure.
 */

export type Query = Record<string, unknown>;

export const EVENT_STATUSES = ['pending', 'done', 'failed', 'dead', 'ignored', 'invalid'] as const;
export const EVENT_KINDS = ['event', 'registry', 'poll'] as const;
export const DELIVERY_OUTCOMES: readonly string[] = [...ACCEPTED_ANSWERS, ...Object.keys(FAILED_ANSWERS)];
/** Longest text a filter takes (the JSON match has its own bound). */
const MAX_TEXT = 200;

/** A filter the person got wrong: answered with a 400 page that says so. */
export class FilterError extends HttpError {
  constructor(message: string) {
    super(400, 'bad_request', message);
  }
}

/** The parameter `name` given once, trimmed; undefined when absent or blank. */
export function text(q: Query, name: string, max = MAX_TEXT): string | undefined {
  const value = q[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new FilterError(`${name}: give it once`);
  const t = value.trim();
  if (t === '') return undefined;
  if (t.length > max) throw new FilterError(`${name}: at most ${max} characters`);
  return t;
}

/** One of `values`, or undefined. */
export function oneOf<T extends string>(q: Query, name: string, values: readonly T[]): T | undefined {
  const t = text(q, name);
  if (t === undefined) return undefined;
  if (!(values as readonly string[]).includes(t))
    throw new FilterError(`${name}: expected one of ${values.join(', ')}`);
  return t as T;
}

/** A positive integer id (keyset cursors). */
export function positiveId(q: Query, name: string): number | undefined {
  const t = text(q, name);
  if (t === undefined) return undefined;
  if (!/^[1-9]\d{0,14}$/.test(t)) throw new FilterError(`${name}: expected a positive whole number`);
  return Number(t);
}

/** `1`, `yes`, `true` → true; `0`, `no`, `false` → false. */
export function flag(q: Query, name: string): boolean | undefined {
  const t = text(q, name)?.toLowerCase();
  if (t === undefined) return undefined;
  if (['1', 'yes', 'true', 'on'].includes(t)) return true;
  if (['0', 'no', 'false', 'off'].includes(t)) return false;
  throw new FilterError(`${name}: expected yes or no`);
}

/**
 * An instant: ISO 8601 with its zone (`2026-11-21T10:00:00-03:00`), a date (`2026-11-21`, midnight
 * UTC), or what a `datetime-local` field sends (`2026-11-21T10:00`), read as UTC like the
 * times shown.
 */
export function instant(q: Query, name: string): string | undefined {
  const t = text(q, name);
  if (t === undefined) return undefined;
  const local = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?$/.test(t);
  const parsed = parseInstant(local ? `${t}Z` : t);
  if (parsed === null)
    throw new FilterError(
      `${name}: expected a date (2026-11-21) or a date-time (2026-11-21T10:00, UTC unless a zone is given)`,
    );
  return parsed;
}

/** `nu_proposta` as typed: the integer when it is digits, otherwise the text. */
export function nuProposta(q: Query, name: string): number | string | undefined {
  const t = text(q, name, 40);
  return t === undefined ? undefined : parseNuProposta(t);
}

/** A duration such as `90m`, `36h`, `5d` in ms. */
export function duration(q: Query, name: string): number | undefined {
  const t = text(q, name, 20);
  if (t === undefined) return undefined;
  const ms = parseDuration(t);
  if (ms === null || ms > 3650 * 86_400_000)
    throw new FilterError(`${name}: expected a duration such as 90m, 36h or 5d`);
  return ms;
}

function checkRange(from: string | undefined, to: string | undefined): void {
  if (from !== undefined && to !== undefined && from >= to) throw new FilterError('from: must be before to');
}

/** The events list: status, evento, kind, nu_proposta, from, to, json, before. */
export function eventFilter(q: Query): ConsoleEventFilter {
  const from = instant(q, 'from');
  const to = instant(q, 'to');
  checkRange(from, to);
  const json = text(q, 'json', 2000);
  let leaves;
  if (json !== undefined) {
    const parsed = parseJsonFilter(json);
    if (!parsed.ok) throw new FilterError(parsed.message);
    leaves = parsed.leaves;
  }
  return {
    status: oneOf(q, 'status', EVENT_STATUSES),
    evento: text(q, 'evento', 100),
    kind: oneOf(q, 'kind', EVENT_KINDS),
    nuProposta: nuProposta(q, 'nu_proposta'),
    from,
    to,
    json: leaves,
    before: positiveId(q, 'before'),
  };
}

/** The deliveries list: outcome, from, to, before. */
export function deliveryFilter(q: Query) {
  const from = instant(q, 'from');
  const to = instant(q, 'to');
  checkRange(from, to);
  return { outcome: oneOf(q, 'outcome', DELIVERY_OUTCOMES), from, to, before: positiveId(q, 'before') };
}

/** Dead letters: the events list's filters at status `dead` (no status, no kind choice). */
export function deadFilter(q: Query): ConsoleEventFilter {
  const {
    evento,
    nuProposta: nu,
    from,
    to,
    json,
    before,
  } = eventFilter({ ...q, status: undefined, kind: undefined });
  return { status: 'dead', evento, nuProposta: nu, from, to, json, before };
}

/** The proposals list: status, stage, age, stuck, and the keyset cursor `after` (`updated_at~nu`). */
export function proposalFilter(q: Query) {
  const cursor = text(q, 'after', 80);
  let after: { updated_at: string; nu_proposta: number | string } | undefined;
  if (cursor !== undefined) {
    const at = cursor.indexOf('~');
    const updated = parseInstant(cursor.slice(0, at));
    if (at < 0 || updated === null || cursor.length === at + 1)
      throw new FilterError('after: not a cursor this page wrote');
    after = { updated_at: cursor.slice(0, at), nu_proposta: parseNuProposta(cursor.slice(at + 1)) };
  }
  return {
    status: oneOf(q, 'status', PROPOSAL_STATUSES),
    stage: oneOf(q, 'stage', STAGES),
    age: text(q, 'age', 20),
    ageMs: duration(q, 'age'),
    stuck: flag(q, 'stuck') ?? false,
    nu: text(q, 'nu', 40),
    after,
  };
}

export type ProposalFilter = ReturnType<typeof proposalFilter>;

/** Averbações: status, stale, waiting, before. */
export function averbacaoFilter(q: Query) {
  return {
    status: oneOf(q, 'status', REGISTRY_STATUSES),
    stale: flag(q, 'stale'),
    waiting: flag(q, 'waiting'),
    before: positiveId(q, 'before'),
  };
}
