import type { Destination } from '../domain/forwarding/destinations';
import { outboxEntries } from '../domain/forwarding/messages';
import type { Db } from '../store/database';
import { forwardOutbox } from '../store/forward-outbox';
import type { Handler } from './router';

/**
 * The outbox handler (contract §8): runs after every other handler of an event, in the same
 * transaction, reads back what they recorded and stores the messages the event causes, each with a
 * delivery row for every destination that wants it; a message nobody wants is stored only for the
 * change feed when it is on (`isStored`). Exactly once per event and message type (see
 * `forwardOutbox`). With no destination and the feed off, it reads nothing and writes nothing.
 */
export function forwardingHandler(
  db: Db,
  destinations: readonly Destination[],
  options: { feedEnabled: boolean },
): Handler {
  const outbox = forwardOutbox(db);
  if (destinations.length === 0 && !options.feedEnabled) return () => undefined;
  return (event, ctx) => {
    const effects = outbox.effectsOf({
      id: event.id,
      kind: event.kind,
      evento: event.evento,
      nu_proposta: event.nuProposta,
      request_id: event.requestId,
      dedup_key: event.dedupKey,
      received_at: event.receivedAt,
      payload: event.payload,
      raw_body: event.rawBody,
    });
    const now = ctx.now.toISOString();
    for (const entry of outboxEntries(effects, now, destinations, options.feedEnabled)) {
      outbox.insert(entry.message, entry.destinations);
    }
  };
}
