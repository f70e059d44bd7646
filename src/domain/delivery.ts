import { createHash } from 'node:crypto';
import { isKnownEvento } from './catalogue';
import type { ArrivalStatus, EventKind, EventStatus, NewEvent } from './event-status';
import { isObject, type JsonObject, nonBlankText, own } from './json';
import { canonicalNuProposta } from './normalize';

/**
 * What a signed body is, decided from its bytes alone (contract §4): an event of the catalogue, an
 * event of an unknown name, a registry result, or something to quarantine. Pure and total: it
 * never throws, whatever the bytes.
 */

export interface ClassifiedDelivery {
  kind: Exclude<EventKind, 'poll'>;
  status: ArrivalStatus;
  dedupKey: string;
  webhookId: string | null;
  evento: string | null;
  /** Integer when the payload's value is one; otherwise the value as text (never lost). */
  nuProposta: number | string | null;
  requestId: string | null;
  /** The registry status carried by a registry result (`queued`, `processing`, …). */
  registryStatus: string | null;
  tentativa: number | null;
  /** Why a body was quarantined; null otherwise. */
  invalidReason: string | null;
  /** The body as text when it is valid UTF-8 (stored byte-exact as TEXT), else null. */
  text: string | null;
}

export type Route = 'events' | 'registry';

/** What a webhook route answered a request (contract §4's response table), as `deliveries.outcome` records it. */
export type DeliveryOutcome =
  | 'accepted'
  | 'duplicate'
  | 'quarantined'
  | 'invalid_signature'
  | 'payload_too_large'
  | 'storage_unavailable'
  | 'aborted'
  | 'forbidden';

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function positiveInteger(value: unknown): number | null {
  const n = typeof value === 'string' && /^\d{1,9}$/.test(value.trim()) ? Number(value) : value;
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : null;
}

export function sha256Hex(body: Uint8Array): string {
  return createHash('sha256').update(body).digest('hex');
}

/**
 * The body as text when it is valid UTF-8, else null: SQLite stores such a body as TEXT and any
 * other as a BLOB, and a reader of PostgreSQL's `bytea` tells them apart the same way.
 */
export function decodeUtf8(body: Uint8Array): string | null {
  try {
    return utf8.decode(body);
  } catch {
    return null;
  }
}

function parse(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    // Malformed JSON, or nesting deep enough to overflow the parser's stack: both quarantined.
    return { ok: false };
  }
}

function quarantine(body: Uint8Array, text: string | null, reason: string, webhookId: string | null) {
  return {
    kind: 'event' as const,
    status: 'invalid' as const,
    dedupKey: webhookId ?? `sha256:${sha256Hex(body)}`,
    webhookId,
    evento: null,
    nuProposta: null,
    requestId: null,
    registryStatus: null,
    tentativa: null,
    invalidReason: reason,
    text,
  };
}

/** The registry result's fields, read at the top level or under `dados` (its shape is "not shown", interface §6.2). */
function registryFields(obj: JsonObject): { requestId: string; status: string | null } | null {
  const dados = own(obj, 'dados');
  const requestId = nonBlankText(own(obj, 'requestId')) ?? nonBlankText(own(dados, 'requestId'));
  if (requestId === null) return null;
  const status = nonBlankText(own(obj, 'status')) ?? nonBlankText(own(dados, 'status'));
  return { requestId, status };
}

/**
 * Classifies a signed body received on `route`.
 *
 * - `/webhooks`: an object with a string `evento` is an event; without `evento` but with
 *   `requestId` and `status` it is a registry result; anything else is quarantined.
 * - `/webhooks/registry`: a `requestId` (top level or under `dados`) makes a registry result even
 *   without a status; a body with `evento` and no `requestId` is still taken as an event.
 */
export function classifyDelivery(body: Uint8Array, route: Route): ClassifiedDelivery {
  const text = decodeUtf8(body);
  if (text === null) return quarantine(body, null, 'body is not valid UTF-8', null);
  const parsed = parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
  if (!parsed.ok) return quarantine(body, text, 'body is not JSON', null);
  const obj = parsed.value;
  if (!isObject(obj)) return quarantine(body, text, 'body is not a JSON object', null);

  const metadata = own(obj, 'metadata');
  const webhookId = nonBlankText(own(metadata, 'webhook_id'));
  const tentativa = positiveInteger(own(metadata, 'tentativa'));
  const dados = own(obj, 'dados');
  const rawEvento = own(obj, 'evento');
  const evento = typeof rawEvento === 'string' && rawEvento.trim() !== '' ? rawEvento.trim() : null;
  const registry = registryFields(obj);

  const isRegistry =
    registry !== null && (route === 'registry' || (evento === null && registry.status !== null));

  if (isRegistry) {
    return {
      kind: 'registry',
      status: 'pending',
      dedupKey: webhookId ?? `registry:${registry.requestId}:${registry.status ?? ''}`,
      webhookId,
      evento,
      nuProposta: canonicalNuProposta(own(dados, 'nu_proposta') ?? own(obj, 'nu_proposta')),
      requestId: registry.requestId,
      registryStatus: registry.status,
      tentativa,
      invalidReason: null,
      text,
    };
  }

  if (evento === null) {
    const reason =
      rawEvento !== undefined
        ? '`evento` is not a non-empty string'
        : 'neither an event (`evento`) nor a registry result (`requestId` and `status`)';
    return quarantine(body, text, reason, webhookId);
  }

  return {
    kind: 'event',
    status: isKnownEvento(evento) ? 'pending' : 'ignored',
    dedupKey: webhookId ?? `sha256:${sha256Hex(body)}`,
    webhookId,
    evento,
    nuProposta: canonicalNuProposta(own(dados, 'nu_proposta')),
    requestId: nonBlankText(own(dados, 'requestId')),
    registryStatus: null,
    tentativa,
    invalidReason: null,
    text,
  };
}

/** A `deliveries` row as both stores hand it to readers (PostgreSQL's replica column aside). */
export interface DeliveryRow {
  id: number;
  received_at: string;
  path: string;
  outcome: DeliveryOutcome;
  http_status: number;
  dedup_key: string | null;
  event_id: number | null;
  duration_ms: number;
  body_bytes: number | null;
  secret_index: number | null;
  remote_addr: string | null;
  detail: string | null;
}

/** A row of the `deliveries` audit table, as the webhook handler writes it. */
export interface NewDelivery {
  receivedAt: string;
  path: string;
  outcome: DeliveryOutcome;
  httpStatus: number;
  dedupKey: string | null;
  eventId: number | null;
  durationMs: number;
  bodyBytes: number | null;
  secretIndex: number | null;
  remoteAddr: string | null;
  detail: string | null;
  /**
   * Cluster mode: PostgreSQL's time when the request arrived, as this replica estimates it (the
   * order its event is processed in, runtime/cluster/order-clock.ts); null or absent otherwise.
   */
  orderAt?: string | null;
}

export type IngestOutcome = 'accepted' | 'duplicate' | 'quarantined';

export interface IngestResult {
  outcome: IngestOutcome;
  eventId: number;
  /** Status of the stored event (for a duplicate: the status it was first stored with). */
  status: EventStatus;
}

/** The delivery row of a stored event: its outcome is decided inside the transaction. */
export type PendingDelivery = Omit<
  NewDelivery,
  'outcome' | 'httpStatus' | 'eventId' | 'durationMs' | 'dedupKey'
> & {
  /** Monotonic start of the request, for `duration_ms` measured at write time. */
  startedAt: number;
};

/** What stores a delivery and its event (sqlite/ingest-writer.ts `IngestWriter`, group commit). */
export interface DeliveryWriter {
  /** Stores the event and its delivery row in one commit; resolves once it is durable. */
  ingest(event: NewEvent, delivery: PendingDelivery): Promise<IngestResult>;
  /** An audit row for a request that stored no event (refused, invalid…), written with the next batch. */
  audit(delivery: NewDelivery): void;
}
