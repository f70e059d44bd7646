import type { EventStatus } from './event-status';

/**
 * Retention (RETENTION_DAYS, the `prune` command): what is removed, in one place for both stores.
 * SQLite (store/retention.ts) and PostgreSQL (cluster/pg-retention.ts) pass these values to their
 * statements as parameters and filter with these functions; neither spells the rule out itself.
 *
 * - The raw body of an event whose status is final and whose handlers ran or will never run
 *   (`done`, `ignored`, `invalid`) and that was received before the cutoff. The row and its dedup
 *   key stay, so a late copy of the delivery is still a duplicate. `pending`, `failed` and `dead`
 *   events keep their bodies: they may still be processed or replayed.
 * - A forwarded message created before the cutoff whose every delivery is `delivered`, with its
 *   deliveries and their attempts. A message still pending or dead somewhere stays whole.
 */

/** Statuses whose raw body retention removes. */
export const BODY_PRUNABLE_STATUSES = [
  'done',
  'ignored',
  'invalid',
] as const satisfies readonly EventStatus[];

/** The only forward-delivery status that lets a message go. */
export const FORWARD_DELIVERED = 'delivered';

/** Whether an event with this status gives up its body once older than the cutoff. */
export function isBodyPrunable(status: string): boolean {
  return (BODY_PRUNABLE_STATUSES as readonly string[]).includes(status);
}

/** Whether a message whose deliveries have these statuses may be removed (no delivery: yes). */
export function isMessagePrunable(deliveryStatuses: readonly string[]): boolean {
  return deliveryStatuses.every((s) => s === FORWARD_DELIVERED);
}

/** Everything received (or created) strictly before this instant is old enough. */
export function retentionCutoff(now: Date, days: number): Date {
  return new Date(now.getTime() - days * 24 * 3600 * 1000);
}

/**
 * What one pass removed, in the shape `prune --json` prints in both modes: `pruned` bodies,
 * `forwarded` messages, and the cutoff (ISO-8601).
 */
export interface PruneSummary {
  pruned: number;
  forwarded: number;
  cutoff: string;
}

/** What a replica's spool gave up (cluster mode): relayed deliveries and the events they stored. */
export interface SpoolPruneSummary {
  deliveries: number;
  events: number;
}

/** One batch of a spool's pass: what it removed, where the next starts, whether the walk ended. */
export interface SpoolPruneStep extends SpoolPruneSummary {
  lastId: number;
  done: boolean;
}

/** The log lines of a pass, the same in both modes (operators grep for them). */
export const RETENTION_LOG = {
  bodies: 'retention: removed bodies of old finished events',
  forwarded: 'retention: removed old messages delivered everywhere',
  spool: 'retention: removed relayed rows from the spool',
} as const;
