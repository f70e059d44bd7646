/**
 * The kinds and statuses of a stored event (contract §5), and which of them can be replayed.
 * One definition for the classifier, the store, the pipeline, the admin API and the commands.
 */

/** `event`: a catalogue delivery; `registry`: a registry-result webhook; `poll`: a status-query answer. */
export type EventKind = 'event' | 'registry' | 'poll';

export const EVENT_STATUSES = ['pending', 'done', 'failed', 'dead', 'ignored', 'invalid'] as const;

export type EventStatus = (typeof EVENT_STATUSES)[number];

/** The statuses an event can have when it is first stored (a delivery's classification). */
export type ArrivalStatus = Extract<EventStatus, 'pending' | 'ignored' | 'invalid'>;

/**
 * Events that have handlers to run can go back in the queue. `ignored` (unknown `evento`) and
 * `invalid` (quarantined) have none: replaying them would do nothing.
 */
export const REPLAYABLE_STATUSES: readonly EventStatus[] = ['pending', 'done', 'failed', 'dead'];

export function isReplayable(status: EventStatus): boolean {
  return REPLAYABLE_STATUSES.includes(status);
}

/**
 * What a replay request did, in either store: events queued again, ids that do not exist, events
 * that cannot be replayed. All or nothing: `queued` is empty unless the other two are.
 */
export interface ReplayResult {
  queued: number[];
  unknown: number[];
  notReplayable: { id: number; status: EventStatus }[];
}

/** An event a replay reads: its status and its work key's parts (domain/work-key.ts). */
export interface ReplayedEvent {
  id: number;
  status: EventStatus;
  nu_proposta: number | string | null;
  request_id: string | null;
}

/** What a store does around the replay rule (core/replay.ts), in the replay's transaction. */
export interface ReplayHooks {
  /** Before the rows are read for update (PostgreSQL: the work keys' advisory locks). */
  hold?(events: readonly ReplayedEvent[]): Promise<void>;
  /** After the events are queued again (PostgreSQL: a turn per work key). */
  queued?(events: readonly ReplayedEvent[]): Promise<void>;
}

/** An `events` row as both stores hand it to readers (no body): SQLite's, and PostgreSQL's in its types. */
export interface EventRow {
  id: number;
  dedup_key: string;
  webhook_id: string | null;
  kind: EventKind;
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  registry_status: string | null;
  tentativa: number | null;
  received_at: string;
  body_bytes: number;
  status: EventStatus;
  attempts: number;
  next_attempt_at: string | null;
  last_error: string | null;
  processed_at: string | null;
  duplicates: number;
  last_duplicate_at: string | null;
}

/** An event as the webhook handler stores it. */
export interface NewEvent {
  dedupKey: string;
  webhookId: string | null;
  kind: EventKind;
  evento: string | null;
  nuProposta: number | string | null;
  requestId: string | null;
  registryStatus: string | null;
  tentativa: number | null;
  receivedAt: string;
  /** Raw body: a string when it is valid UTF-8, the bytes otherwise. */
  body: string | Buffer;
  bodyBytes: number;
  status: EventStatus;
  lastError: string | null;
  /** The delivery's trace context, when tracing is on (src/domain/tracing.ts). @default null */
  traceContext?: string | null;
}
