import type { EventFacts } from '../../src/domain/event-effects';
import type { NewEvent } from '../../src/domain/event-status';

/** A pending `proposta.criada` of proposal 1 as the writer stores it, keyed `key` (dedup key and webhook_id). */
export function pendingEvent(key: string, body = `{"k":"${key}"}`): NewEvent {
  return {
    dedupKey: key,
    webhookId: key,
    kind: 'event',
    evento: 'proposta.criada',
    nuProposta: 1,
    requestId: null,
    registryStatus: null,
    tentativa: 1,
    receivedAt: new Date().toISOString(),
    body,
    bodyBytes: Buffer.byteLength(body),
    status: 'pending',
    lastError: null,
  };
}

/** An event as the handlers' decisions read it (domain/event-effects.ts): event 7, `proposta.aprovada`, no proposal. */
export function eventFacts(over: Partial<EventFacts> = {}): EventFacts {
  return {
    id: 7,
    kind: 'event',
    evento: 'proposta.aprovada',
    nuProposta: null,
    requestId: null,
    registryStatus: null,
    rawBody: null,
    payload: null,
    dados: null,
    ...over,
  };
}
