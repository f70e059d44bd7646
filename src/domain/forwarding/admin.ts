import { parseJsonOrUndefined } from '../json';
import { maskCpfsInJsonText, maskCpfsInText } from '../privacy';
import type { CircuitState } from './circuit';
import { type Destination, MESSAGE_TYPES, type MessageType } from './destinations';
import { bodyFor, FEED_TYPES } from './messages';

/**
 * The shapes and rules of the operators' tools over the forwarding tables (contract §8), whichever
 * store holds them: core/forward-admin.ts runs them on SQLite and on PostgreSQL, and one formatter
 * per command serves both.
 */

/** Rows written per transaction by replays and backfills. */
export const CHUNK_ROWS = 1000;

/** A delivery's status as filters name it; `retrying` is `pending` after at least one attempt. */
export const DELIVERY_STATUS_FILTERS = ['pending', 'retrying', 'delivered', 'dead'] as const;
export type DeliveryStatusFilter = (typeof DELIVERY_STATUS_FILTERS)[number];

/** What the change feed serves when no `types` are asked for: everything it serves (messages.ts). */
export const FEED_DEFAULT_TYPES: readonly MessageType[] = FEED_TYPES;

/**
 * Which deliveries a replay (or a count) means. Times are ISO instants (see {@link parseInstant})
 * compared with the message's `created_at`: `since` inclusive, `until` exclusive.
 */
export interface ForwardFilter {
  destination?: string | undefined;
  status?: DeliveryStatusFilter | undefined;
  nuProposta?: number | string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

/** A listing's filter: a replay's, plus the message type and keyset paging. */
export interface ForwardListFilter extends ForwardFilter {
  type?: MessageType | undefined;
  /** Deliveries with an id below this one (paging backwards from the newest). */
  beforeId?: number | undefined;
  /** @default 50 (at most 1000) */
  limit?: number | undefined;
}

/** A delivery and the columns of its message that say what it is. */
export interface ForwardRow {
  id: number;
  message_id: number;
  destination: string;
  status: 'pending' | 'delivered' | 'dead';
  attempts: number;
  next_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
  delivered_at: string | null;
  webhook_id: string;
  type: MessageType;
  event_id: number;
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  order_key: string;
  message_created_at: string;
}

export interface AttemptRow {
  id: number;
  attempt: number;
  started_at: string;
  duration_ms: number;
  http_status: number | null;
  error: string | null;
  outcome: 'delivered' | 'permanent' | 'temporary';
  /** The first KB of the answer's body. */
  answer: string | null;
}

/** One delivery, its message's stored body (CPF in full) and every attempt in order. */
export interface ForwardDetail {
  delivery: ForwardRow;
  body: string;
  attempts: AttemptRow[];
}

/** One delivery as operators see it: see {@link shownForward}. */
export interface ShownForward {
  delivery: ForwardRow;
  message: unknown;
  attempts: AttemptRow[];
}

function masked(text: string | null): string | null {
  return text === null ? null : maskCpfsInText(text);
}

/** A delivery as operators see it (admin API, commands, console): its last error with any CPF masked. */
export function shownForwardRow(row: ForwardRow): ForwardRow {
  return { ...row, last_error: masked(row.last_error) };
}

/**
 * One delivery as operators see it: its message with every CPF masked, even when its destination
 * gets the CPF in full (`full_cpf`: that is the destination's, contract §5 keeps admin answers,
 * commands and logs masked), and its attempts' errors and answers masked too (a destination may
 * echo the body it got).
 */
export function shownForward(detail: ForwardDetail): ShownForward {
  return {
    delivery: shownForwardRow(detail.delivery),
    message: JSON.parse(maskCpfsInJsonText(bodyFor(detail.body, false))) as unknown,
    attempts: detail.attempts.map((a) => ({ ...a, error: masked(a.error), answer: masked(a.answer) })),
  };
}

/** What a replay did, by the status each delivery had before. */
export interface ReplayCounts {
  replayed: number;
  by_status: { pending: number; delivered: number; dead: number };
}

/** The messages a backfill looks at: all of them when nothing is given. */
export interface BackfillRange {
  nuProposta?: number | string | undefined;
  since?: string | undefined;
  until?: string | undefined;
}

export interface BackfillCounts {
  /** Messages in the range that the destination wants. */
  matched: number;
  /** Of those, the ones that had no delivery row for it and got one. */
  created: number;
}

/** One destination as an operator sees it: never its secrets. */
export interface DestinationSummary {
  name: string;
  /** False for a name met in the tables that no longer is in the configuration. */
  configured: boolean;
  /** The configured URL, its query string hidden (`?…`: it may carry a token); null when not configured. */
  url: string | null;
  types: readonly string[] | null;
  eventos: readonly string[] | null;
  has_filter: boolean | null;
  full_cpf: boolean | null;
  /** Paused in the configuration file or by an operator: its messages accumulate. */
  paused: boolean;
  paused_in_config: boolean;
  paused_by_operator: boolean;
  counts: { pending: number; retrying: number; delivered: number; dead: number };
  /** `created_at` of the first pending delivery (the head of the queue); null when none. */
  oldest_pending_at: string | null;
  /** As the sender last stored it; closed when it never stored one. */
  circuit: CircuitState;
}

/** Whether a replay filter names nothing: refused by the commands and routes (it would mean every delivery). */
export function isEmptyFilter(filter: ForwardFilter): boolean {
  return [filter.destination, filter.status, filter.nuProposta, filter.since, filter.until].every(
    (value) => value === undefined || value === '',
  );
}

/** A listing's page size: {@link ForwardListFilter.limit}, 50 when not given, within 1–1000. */
export function listLimit(filter: ForwardListFilter): number {
  return Math.max(1, Math.min(filter.limit ?? 50, 1000));
}

const INSTANT = /^(\d{4})-(\d{2})-(\d{2})(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/**
 * An ISO 8601 date (`2026-11-21`, midnight UTC) or date-time with its zone
 * (`2026-11-21T10:00:00-03:00`, `…Z`) as the stored timestamps write it (`toISOString`), or null
 * when it is neither. A date-time without a zone is refused: it would mean the server's zone.
 */
export function parseInstant(text: string): string | null {
  const match = INSTANT.exec(text);
  if (!match) return null;
  const [y, m, d] = [Number(match[1]), Number(match[2]), Number(match[3])];
  // setUTCFullYear, not Date.UTC, which reads years 0-99 as 1900-1999.
  const day = new Date(0);
  day.setUTCFullYear(y, m - 1, d);
  // Date.parse rolls 2026-02-30 over to March; a date that does not exist is a typo. It always lands
  // in another month (a day is at most 31, a month at least 28 days; month 13 is January, 00 December).
  if (day.getUTCMonth() !== m - 1) return null;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : new Date(ms).toISOString();
}

/** Whether `value` names a message type (`event.received`, `proposal.changed`, `averbacao.result`). */
export function isMessageType(value: string): value is MessageType {
  return (MESSAGE_TYPES as readonly string[]).includes(value);
}

// ---- replays -------------------------------------------------------------------------------------
//
// The replay rule, the same in both stores: a delivered or dead delivery starts over (attempts
// counted again from 1; forward_attempts keeps the history); a pending one is due now, its attempt
// count kept, so its retry schedule goes on. By id any delivery is replayed; a filter chooses which.

/** Counts of deliveries by the status they had, as a replay reports them. */
export function replayCounts(rows: readonly { status: string; n: number }[]): ReplayCounts {
  const counts: ReplayCounts = { replayed: 0, by_status: { pending: 0, delivered: 0, dead: 0 } };
  for (const { status, n } of rows) {
    if (status === 'pending' || status === 'delivered' || status === 'dead') counts.by_status[status] += n;
    counts.replayed += n;
  }
  return counts;
}

/** Adds a chunk's counts to the running total. */
export function addReplayCounts(total: ReplayCounts, chunk: ReplayCounts): void {
  total.replayed += chunk.replayed;
  total.by_status.pending += chunk.by_status.pending;
  total.by_status.delivered += chunk.by_status.delivered;
  total.by_status.dead += chunk.by_status.dead;
}

// ---- destinations --------------------------------------------------------------------------------

/** Deliveries of one destination with one status (`retrying` counted apart, within `pending`). */
export interface DestinationCountRow {
  destination: string;
  status: string;
  n: number;
}

/** A `forward_destinations` row, `paused` as SQLite's 0/1. */
export interface DestinationStateRow {
  name: string;
  paused: number;
  circuit: string | null;
}

/**
 * Every configured destination, in configuration order, then every other name met in the tables
 * (`configured: false`, by name), each with its counts, oldest waiting delivery, pause and circuit.
 */
export function destinationSummaries(
  configured: readonly Destination[],
  states: readonly DestinationStateRow[],
  countRows: readonly DestinationCountRow[],
  oldestPendingAt: (name: string) => string | null,
): DestinationSummary[] {
  const names = [
    ...new Set([
      ...configured.map((d) => d.name),
      ...[...states.map((r) => r.name), ...countRows.map((r) => r.destination)].sort(),
    ]),
  ];
  return names.map((name) =>
    summary(
      name,
      configured.find((d) => d.name === name),
      states.find((r) => r.name === name),
      countRows.filter((r) => r.destination === name),
      oldestPendingAt(name),
    ),
  );
}

function summary(
  name: string,
  destination: Destination | undefined,
  row: DestinationStateRow | undefined,
  countRows: readonly DestinationCountRow[],
  oldestPendingAt: string | null,
): DestinationSummary {
  const count = (status: string) => countRows.find((r) => r.status === status)?.n ?? 0;
  const pausedInConfig = destination?.paused ?? false;
  const pausedByOperator = row?.paused === 1;
  return {
    name,
    configured: destination !== undefined,
    url: destination === undefined ? null : withoutQuery(destination.url),
    types: destination?.types ?? null,
    eventos: destination?.eventos ?? null,
    has_filter: destination === undefined ? null : destination.filter !== null,
    full_cpf: destination?.fullCpf ?? null,
    paused: pausedInConfig || pausedByOperator,
    paused_in_config: pausedInConfig,
    paused_by_operator: pausedByOperator,
    counts: {
      pending: count('pending'),
      retrying: count('retrying'),
      delivered: count('delivered'),
      dead: count('dead'),
    },
    oldest_pending_at: oldestPendingAt,
    circuit: parseCircuit(row?.circuit ?? null),
  };
}

function withoutQuery(url: string): string {
  const at = url.indexOf('?');
  return at === -1 ? url : `${url.slice(0, at)}?…`;
}

/** A stored circuit (JSON), or closed when there is none or it cannot be read. */
export function parseCircuit(text: string | null): CircuitState {
  const parsed = text === null ? undefined : parseJsonOrUndefined(text);
  const state = (parsed as { state?: unknown } | undefined)?.state;
  return state === 'open' || state === 'half_open' || state === 'closed'
    ? (parsed as CircuitState)
    : { state: 'closed', failures: 0 };
}
