import type { Db } from './database';

/**
 * The reads behind the console's proposal page: everything that happened to one proposal, each
 * from an index on `nu_proposta` or `request_id` (events, transitions, averbações, the registry's
 * answers, forwarded messages). Each list is capped at {@link STORY_CAP} rows: a proposal has tens
 * of events, and a hostile or broken sender must not make its page unbounded.
 */

export const STORY_CAP = 1000;

/** An event of the proposal with the transition it caused (if it was processed). */
export interface StoryEventRow {
  id: number;
  kind: string;
  evento: string | null;
  request_id: string | null;
  received_at: string;
  status: string;
  attempts: number;
  last_error: string | null;
  processed_at: string | null;
  duplicates: number;
  last_duplicate_at: string | null;
  from_status: string | null;
  to_status: string | null;
  applied: number | null;
  reason: string | null;
  transition_at: string | null;
}

/** A registry answer (webhook or poll) about one of the proposal's averbações. */
export interface RegistryEventRow {
  id: number;
  kind: string;
  request_id: string;
  registry_status: string | null;
  received_at: string;
  status: string;
  duplicates: number;
}

/** A forwarded message and one of its deliveries (destination null: stored for the feed only). */
export interface StoryForwardRow {
  message_id: number;
  type: string;
  event_id: number;
  created_at: string;
  delivery_id: number | null;
  destination: string | null;
  status: string | null;
  attempts: number | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: string | null;
}

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
