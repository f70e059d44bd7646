import { workKeyOf } from '../work-key';
import { createHash } from 'node:crypto';
import { type ProposalStatus, stageOf } from '../lifecycle';
import { maskCpf, maskCpfsInText } from '../privacy';
import type { Destination, MessageType } from './destinations';
import { matchesFilter } from './filter';
import { anyGlobMatches } from './glob';

/**
 * The messages the receiver forwards (contract §8) and who gets them. Pure: the caller loads the
 * event's stored effects (its transition, the proposal, the averbação it finished) and passes them
 * in; these functions only shape them.
 *
 * Every body is `{ id, type, created_at, data }`; `id` is the message's `webhook-id`, the same on
 * every attempt and at every destination.
 */

/** What `proposal.changed` says of the proposal as it stands after the event. */
export interface ProposalSnapshot {
  nu_proposta: number | string;
  uuid: string | null;
  nu_cpf: string | null;
  nu_cnpj_conveniada: string | null;
  vl_emprestimo: number | null;
  no_conveniada: string | null;
  stage: string;
  status: string;
  last_evento: string | null;
  created_at: string;
  updated_at: string;
}

/** An averbação as stored (`averbacoes`), the columns a message shows. */
export interface AverbacaoSnapshot {
  request_id: string;
  correlation_id: string | null;
  nu_proposta: number | string | null;
  status: string;
  result_source: string | null;
  stale: number;
  result_body: string | null;
  completed_at: string | null;
  updated_at: string;
}

/** The event that was processed, as the pipeline read it. */
export interface ProcessedEvent {
  id: number;
  kind: 'event' | 'registry' | 'poll';
  evento: string | null;
  nu_proposta: number | string | null;
  request_id: string | null;
  /** The event's dedup key: its messages' webhook-ids derive from it ({@link messageWebhookId}). */
  dedup_key: string;
  received_at: string;
  /** The parsed body; undefined when it does not parse (such an event is not forwarded as received). */
  payload: unknown;
  /**
   * The body as stored: `event.received` carries these bytes as its `payload`, untouched (a payload
   * nested thousands of levels deep parses, but would overflow the stack if serialised again).
   */
  raw_body?: string | null;
}

/** The transition the life cycle recorded for the event (`proposal_transitions`). */
export interface RecordedTransition {
  from_status: ProposalStatus | null;
  to_status: ProposalStatus;
  applied: boolean;
  reason: string;
}

/** What one processed event left behind, loaded in its transaction. */
export interface EventEffects {
  event: ProcessedEvent;
  /** Null when the event moved no proposal (not a life-cycle event, or no `nu_proposta`). */
  transition: RecordedTransition | null;
  /** The proposal after the event (present whenever `transition` is). */
  proposal: ProposalSnapshot | null;
  /** The proposal's latest averbação, shown in `proposal.changed`. */
  proposalAverbacao: AverbacaoSnapshot | null;
  /** The averbação this event gave its final result to, if any (`averbacao.result`). */
  finishedAverbacao: AverbacaoSnapshot | null;
}

/** A message ready for the outbox. */
export interface OutgoingMessage {
  type: MessageType;
  webhookId: string;
  eventId: number;
  evento: string | null;
  nuProposta: number | string | null;
  requestId: string | null;
  orderKey: string;
  createdAt: string;
  /** The parsed body (for the destinations' filters); stored as {@link serializeMessage} writes it. */
  body: MessageBody;
  /**
   * JSON text from the service, embedded as the last field of `data` when serialised (the
   * `payload` of `event.received`, the `result` of `averbacao.result`) instead of its parsed value.
   */
  rawField?: { key: string; json: string };
}

export interface MessageBody {
  id: string;
  type: MessageType;
  created_at: string;
  data: Record<string, unknown>;
}

/**
 * The line a message waits in at each destination: the event's work key (domain/work-key.ts), so a
 * proposal's `averbacao.result` stays in order with its `proposal.changed`.
 */
export function orderKeyOf(
  nuProposta: number | string | null,
  requestId: string | null,
  eventId: number,
): string {
  return workKeyOf({ id: eventId, nu_proposta: nuProposta, request_id: requestId });
}

/**
 * The messages one processed event causes, in the order they are stored (and so sent):
 * `event.received` (events and registry webhooks; a poll answer was not received from the service),
 * then `proposal.changed` when the life cycle recorded a transition, then `averbacao.result` when
 * the event gave a registration its final result. Each message's `webhook-id` is
 * {@link messageWebhookId} of the event's dedup key and its type.
 */
export function messagesFor(effects: EventEffects, createdAt: string): OutgoingMessage[] {
  const { event } = effects;
  const out: OutgoingMessage[] = [];
  const nu =
    event.nu_proposta ?? effects.proposal?.nu_proposta ?? effects.finishedAverbacao?.nu_proposta ?? null;
  const base = (
    type: MessageType,
    data: Record<string, unknown>,
    nuProposta: number | string | null,
    requestId: string | null,
    rawField?: OutgoingMessage['rawField'],
  ) => {
    const webhookId = messageWebhookId(event.dedup_key, type);
    out.push({
      rawField,
      type,
      webhookId,
      eventId: event.id,
      evento: event.evento,
      nuProposta,
      requestId,
      orderKey: orderKeyOf(nuProposta, requestId, event.id),
      createdAt,
      body: { id: webhookId, type, created_at: createdAt, data },
    });
  };
  if (event.kind !== 'poll' && event.payload !== undefined) {
    const raw = event.raw_body == null ? undefined : { key: 'payload', json: event.raw_body };
    base('event.received', eventReceivedData(event), nu, event.request_id, raw);
  }
  if (effects.transition !== null && effects.proposal !== null) {
    const data = proposalChangedData(event, effects.transition, effects.proposal, effects.proposalAverbacao);
    base('proposal.changed', data, effects.proposal.nu_proposta, event.request_id);
  }
  if (effects.finishedAverbacao !== null) {
    const a = effects.finishedAverbacao;
    const data = averbacaoResultData(event, a);
    // A result that parsed is embedded as received; one that did not is a string, safe to serialise.
    const raw =
      a.result_body !== null && typeof data.result === 'object'
        ? { key: 'result', json: a.result_body }
        : undefined;
    base('averbacao.result', data, a.nu_proposta ?? nu, a.request_id, raw);
  }
  return out;
}

function eventReceivedData(event: ProcessedEvent): Record<string, unknown> {
  return {
    event_id: event.id,
    received_at: event.received_at,
    kind: event.kind,
    evento: event.evento,
    nu_proposta: event.nu_proposta,
    request_id: event.request_id,
    payload: event.payload,
  };
}

function proposalChangedData(
  event: ProcessedEvent,
  t: RecordedTransition,
  proposal: ProposalSnapshot,
  averbacao: AverbacaoSnapshot | null,
): Record<string, unknown> {
  return {
    nu_proposta: proposal.nu_proposta,
    evento: event.evento,
    event_id: event.id,
    received_at: event.received_at,
    from: t.from_status,
    from_stage: t.from_status === null ? null : stageOf(t.from_status),
    to: t.to_status,
    stage: stageOf(t.to_status),
    applied: t.applied,
    reason: t.reason,
    averbacao: averbacao === null ? null : averbacaoSummary(averbacao),
    proposal: { ...proposal },
  };
}

function averbacaoResultData(event: ProcessedEvent, a: AverbacaoSnapshot): Record<string, unknown> {
  return {
    ...averbacaoSummary(a),
    nu_proposta: a.nu_proposta,
    event_id: event.id,
    received_at: event.received_at,
    result: a.result_body === null ? null : parseOrText(a.result_body),
  };
}

function averbacaoSummary(a: AverbacaoSnapshot): Record<string, unknown> {
  return {
    request_id: a.request_id,
    correlation_id: a.correlation_id,
    status: a.status,
    source: a.result_source,
    stale: a.stale === 1,
    completed_at: a.completed_at,
  };
}

function parseOrText(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * Whether a destination wants a message: its type matches one of `types`, its `evento` one of
 * `eventos` (a message no service event caused — a registry or poll result — has no `evento` and is
 * chosen by type alone), and the payload filter, if any, holds on the body as stored (CPF in full).
 * A paused destination still wants its messages: they wait for it.
 */
export function destinationWants(
  destination: Pick<Destination, 'types' | 'eventos' | 'filter'>,
  message: Pick<OutgoingMessage, 'type' | 'evento' | 'body'>,
): boolean {
  if (!anyGlobMatches(destination.types, message.type)) return false;
  if (message.evento !== null && !anyGlobMatches(destination.eventos, message.evento)) return false;
  return destination.filter === null || matchesFilter(destination.filter, message.body);
}

/** What the change feed serves: the receiver's own understanding, not the raw deliveries. */
export const FEED_TYPES: readonly MessageType[] = ['proposal.changed', 'averbacao.result', 'subject.erased'];

/**
 * Whether a message is stored at all: when a destination wants it, or when the change feed is on
 * and serves its type. Otherwise nothing would ever read it, and storing it would cost every
 * event an insert (forwarding off costs nothing).
 */
export function isStored(type: MessageType, wantedBy: number, feedEnabled: boolean): boolean {
  return wantedBy > 0 || (feedEnabled && FEED_TYPES.includes(type));
}

/** A message to store, and the destinations that want it (none: stored for the change feed only). */
export interface OutboxEntry {
  message: OutgoingMessage;
  destinations: string[];
  /** Tracing: the context of the processing that caused the message (src/domain/tracing.ts). */
  traceContext?: string | null;
}

/**
 * What the outbox stores for one processed event, in either store: its messages
 * ({@link messagesFor}), each with the destinations that want it, keeping only those that are
 * stored at all ({@link isStored}).
 */
export function outboxEntries(
  effects: EventEffects,
  createdAt: string,
  destinations: readonly Pick<Destination, 'name' | 'types' | 'eventos' | 'filter'>[],
  feedEnabled: boolean,
): OutboxEntry[] {
  const out: OutboxEntry[] = [];
  for (const message of messagesFor(effects, createdAt)) {
    const wanted = destinations.filter((d) => destinationWants(d, message)).map((d) => d.name);
    if (isStored(message.type, wanted.length, feedEnabled)) out.push({ message, destinations: wanted });
  }
  return out;
}

/**
 * A message's `webhook-id`: `msg_` and the first 128 bits of SHA-256 over the event's dedup key and
 * the message type (issue 32). The same fact always gets the same id, whichever database or
 * processing made it: an event processed again after its first processing was lost (a PostgreSQL
 * failover that lost commits, a SQLite backup restored) yields messages a destination deduplicating
 * on `webhook-id`, as Standard Webhooks asks of every consumer, recognises. Unique per message: an
 * event has one dedup key and at most one message of each type (`UNIQUE (event_id, type)`).
 */
export function messageWebhookId(dedupKey: string, type: MessageType): string {
  const digest = createHash('sha256').update(dedupKey).update('\n').update(type).digest();
  return `msg_${digest.subarray(0, 16).toString('base64url')}`;
}

/** A page of the change feed: the stored bodies in id order, and the id to go on after. */
export interface FeedPage {
  messages: { id: number; body: string }[];
  /**
   * The last message returned; when the page is not full, the newest message the read saw, of any
   * type, so that a follower asking only for some types does not scan the others again.
   */
  lastId: number;
}

/** Keys whose value is a CPF, wherever they appear in a message. */
const CPF_KEYS = new Set(['nu_cpf', 'cpf']);

/**
 * The body as a destination gets it: the stored JSON text itself when it may see the CPF in full,
 * else with every `nu_cpf` / `cpf` value masked (`***.456.789-**`, LGPD) wherever it sits, the
 * original service payload included. Deterministic, so every attempt of a message sends the same
 * bytes.
 *
 * Whatever sits under a CPF key is masked whole, an object or array too (`{"cpf": {"numero": …}}`
 * becomes `"***"`): the service payload is not ours to trust, and descending into it would send
 * the digits under a key that is not a CPF key. Only null stays as it is. An object is never
 * turned into text (`String({"toString": 1})` throws): every attempt would fail on it.
 */
export function bodyFor(storedBody: string, fullCpf: boolean): string {
  if (fullCpf) return storedBody;
  try {
    return JSON.stringify(JSON.parse(storedBody), (key, value: unknown) =>
      !CPF_KEYS.has(key) || value === null ? value : typeof value === 'object' ? '***' : maskCpf(value),
    );
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    // Nested too deep to serialise again (a hostile payload): every CPF-shaped number in the text
    // is masked instead — more than needed, never less.
    return maskCpfsInText(storedBody);
  }
}

/**
 * The JSON text stored for a message. The service's JSON (an `event.received`'s payload, an
 * `averbacao.result`'s result) is embedded exactly as received instead of serialising the parsed
 * value again: the bytes stay the service's, and a payload nested thousands of levels deep cannot
 * overflow the stack.
 */
export function serializeMessage(message: Pick<OutgoingMessage, 'body' | 'rawField'>): string {
  const { body, rawField } = message;
  if (rawField === undefined) return JSON.stringify(body);
  // The raw field is the last key of `data`, and `data` the last of the body.
  const text = JSON.stringify({ ...body, data: { ...body.data, [rawField.key]: null } });
  const tail = `${JSON.stringify(rawField.key)}:null}}`;
  if (!text.endsWith(tail))
    throw new Error(`serializeMessage: ${rawField.key} is not the last field of data`);
  return `${text.slice(0, -tail.length)}${JSON.stringify(rawField.key)}:${rawField.json}}}`;
}
