import { randomBytes } from 'node:crypto';
import type { Destination } from '../domain/forwarding/destinations';
import { destinationWants, messagesFor } from '../domain/forwarding/messages';
import type { Db } from '../store/database';
import { forwardOutbox } from '../store/forward-outbox';
import type { Handler } from './router';

/**
 * The outbox handler (contract §8): runs after every other handler of an event, in the same
 * transaction, reads back what they recorded and stores the messages the event causes, each with a
 * delivery row for every destination that wants it. Messages are stored even with no destination:
 * the change feed serves them. Exactly once per event and message type (see `forwardOutbox`).
 */
export function forwardingHandler(db: Db, destinations: readonly Destination[]): Handler {
  const outbox = forwardOutbox(db);
  return (event, ctx) => {
    const effects = outbox.effectsOf({
      id: event.id,
      kind: event.kind,
      evento: event.evento,
      nu_proposta: event.nuProposta,
      request_id: event.requestId,
      received_at: event.receivedAt,
      payload: event.payload,
      raw_body: event.rawBody,
    });
    for (const message of messagesFor(effects, ctx.now.toISOString(), newWebhookId)) {
      const wanted = destinations.filter((d) => destinationWants(d, message)).map((d) => d.name);
      outbox.insert(message, wanted);
    }
  };
}

/**
 * `msg_` and 128 random bits: unique across databases too, so that a destination deduplicating on
 * `webhook-id` never mistakes a new install's first message for an old one.
 */
function newWebhookId(): string {
  return `msg_${randomBytes(16).toString('base64url')}`;
}
