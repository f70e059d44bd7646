import {
  type RegistryEventRow,
  STORY_CAP,
  type StoryEventRow,
  type StoryForwardRow,
} from '../domain/console';
import type { Db } from './database';

/**
 * The reads behind the console's proposal page: everything that happened to one proposal, each
 * from an index on `nu_proposta` or `request_id` (events, transitions, averbações, the registry's
 * answers, forwarded messages). Each list is capped at {@link STORY_CAP} rows: a proposal has tens
 * of events, and a hostile or broken sender must not make its page unbounded.
 */

// The row shapes shared with cluster mode (cluster/pg-console-reads.ts) live in domain/console.ts.
export {
  type RegistryEventRow,
  STORY_CAP,
  type StoryEventRow,
  type StoryForwardRow,
} from '../domain/console';

export function consoleProposals(db: Db) {
  const events = db.prepare<[number | string], StoryEventRow>(
    `SELECT e.id, e.kind, e.evento, e.request_id, e.received_at, e.status, e.attempts, e.last_error, e.processed_at,
            e.duplicates, e.last_duplicate_at, t.from_status, t.to_status, t.applied, t.reason, t.at AS transition_at
     FROM events e LEFT JOIN proposal_transitions t ON t.event_id = e.id
     WHERE e.nu_proposta = ? ORDER BY e.id LIMIT ${STORY_CAP}`,
  );
  const registry = db.prepare<[string], RegistryEventRow>(
    `SELECT id, kind, request_id, registry_status, received_at, status, duplicates FROM events
     WHERE request_id = ? AND kind IN ('registry', 'poll') ORDER BY id LIMIT ${STORY_CAP}`,
  );
  const forwards = db.prepare<[number | string], StoryForwardRow>(
    `SELECT m.id AS message_id, m.type, m.event_id, m.created_at, d.id AS delivery_id, d.destination, d.status,
            d.attempts, d.last_status, d.last_error, d.delivered_at
     FROM forward_messages m LEFT JOIN forward_deliveries d ON d.message_id = m.id
     WHERE m.nu_proposta = ? ORDER BY m.id, d.destination LIMIT ${STORY_CAP}`,
  );
  const eventForwards = db.prepare<[number], StoryForwardRow>(
    `SELECT m.id AS message_id, m.type, m.event_id, m.created_at, d.id AS delivery_id, d.destination, d.status,
            d.attempts, d.last_status, d.last_error, d.delivered_at
     FROM forward_messages m LEFT JOIN forward_deliveries d ON d.message_id = m.id
     WHERE m.event_id = ? ORDER BY m.id, d.destination`,
  );
  return {
    /** The proposal's events in the order received, each with its transition. */
    events: (nu: number | string): StoryEventRow[] => events.all(nu),
    /** The registry's answers (webhooks and polls) about `requestId`, in the order received. */
    registryEvents: (requestId: string): RegistryEventRow[] => registry.all(requestId),
    /** The proposal's forwarded messages with their deliveries, in message order. */
    forwards: (nu: number | string): StoryForwardRow[] => forwards.all(nu),
    /** The messages one event caused, with their deliveries. */
    eventForwards: (eventId: number): StoryForwardRow[] => eventForwards.all(eventId),
  };
}

export type ConsoleProposals = ReturnType<typeof consoleProposals>;
