import type { RegistryStatus } from './catalogue';
import type { TrackedVia } from './event-effects';
import type { ProposalSnapshot } from './forwarding/messages';
import { canonicalNuProposta } from './normalize';

/**
 * The rows the commands, the admin API and the console show, in the shapes of the SQLite log: both
 * stores hand them over so (PostgreSQL's reads convert ids, times, numbers and flags to these, see
 * postgres/pg-reads.ts), so that one renderer serves both. Beside them: `EventRow`
 * (event-status.ts) and `DeliveryRow` (delivery.ts).
 */

/** A `proposals` row: what a forwarded `proposal.changed` shows of it, and the events it was built from. */
export interface ProposalRow extends ProposalSnapshot {
  first_event_id: number | null;
  last_event_id: number | null;
}

/** One event of a proposal with its transition, when it has one (applied 0/1). */
export interface TimelineRow {
  event_id: number;
  received_at: string;
  evento: string | null;
  event_status: string;
  attempts: number;
  duplicates: number;
  from_status: string | null;
  to_status: string | null;
  applied: number | null;
  reason: string | null;
  last_error: string | null;
}

/** An `averbacoes` row (stale 0/1). */
export interface AverbacaoRow {
  request_id: string;
  correlation_id: string | null;
  nu_proposta: number | string | null;
  status: RegistryStatus;
  result_source: 'webhook' | 'poll' | null;
  tracked_via: TrackedVia;
  poll_attempts: number;
  next_poll_at: string | null;
  last_poll_at: string | null;
  last_poll_outcome: string | null;
  stale: number;
  result_body: string | null;
  result_event_id: number | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
}

// A canonical decimal that fits a JS number: the relay writes an integer nu_proposta this way
// (migrations-pg/0001_init.sql), and SQLite holds it as an INTEGER.
export const INTEGER_TEXT = '^(0|[1-9][0-9]{0,14})$';
const integerText = new RegExp(INTEGER_TEXT);

/**
 * `nu_proposta` as the SQLite log holds it: an integer as a number, anything else as the text
 * (PostgreSQL keeps it as text: postgres/pg-reads.ts, src/core/).
 */
export function logNuProposta(value: string): number | string;
export function logNuProposta(value: string | null): number | string | null;
export function logNuProposta(value: string | null): number | string | null {
  return value !== null && integerText.test(value) ? Number(value) : value;
}

export function withLogNuProposta<T extends { nu_proposta: string | null }>(
  row: T,
): Omit<T, 'nu_proposta'> & { nu_proposta: number | string | null } {
  return { ...row, nu_proposta: logNuProposta(row.nu_proposta) };
}

/** `nu_proposta` as typed by a person, read as a delivery's is ({@link canonicalNuProposta}); blank is ''. */
export function parseNuProposta(value: string): number | string {
  return canonicalNuProposta(value) ?? '';
}
