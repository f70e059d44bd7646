import type { EventStatus } from './event-status';

/**
 * Retention (RETENTION_DAYS, the `prune` command): what is removed, in one place for both stores.
 * core/prune-pass.ts (the statements, once for SQLite and PostgreSQL) passes these values to them
 * as parameters and filters with these functions; it does not spell the rule out itself.
 *
 * - The raw body of an event whose status is final and whose handlers ran or will never run
 *   (`done`, `ignored`, `invalid`) and that was received before the cutoff. The row and its dedup
 *   key stay, so a late copy of the delivery is still a duplicate. `pending`, `failed` and `dead`
 *   events keep their bodies: they may still be processed or replayed.
 * - A forwarded message created before the cutoff whose every delivery is `delivered`, with its
 *   deliveries and their attempts. A message still pending or dead somewhere stays whole.
 * - The personal fields of a proposal (nu_cpf, nu_cnpj_conveniada, no_conveniada) once it has been in
 *   a final status, unchanged, since before the cutoff (issue 45: their purpose ended). Ids,
 *   statuses, dates and amounts stay (docs/privacy.md, the legal-hold set); the proposal is marked
 *   `personal_erased_at`, so no later event brings them back.
 * - In cluster mode, a replica's spool: deliveries relayed and received before the cutoff, and the
 *   events they stored (sqlite/spool.ts; never a row not relayed yet, never the newest row).
 *
 * A pass removes bodies first, then messages (then, in cluster mode, the spool); each store walks
 * its tables in short transactions of the sizes in {@link RETENTION_BATCH} and logs what it removed
 * with {@link retentionLog}. What stays per store is how it walks and locks (its dialect,
 * domain/sql/dialect.ts: `idsFollowArrival`, `rowLock`): SQLite walks in arrival order and stops
 * at the cutoff; PostgreSQL walks the whole table (ids follow relay commits, not arrival) and
 * skips rows another transaction holds.
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

/** Whether a time stored as ISO-8601 text (SQLite's columns) is before the cutoff (also ISO-8601). */
export function isBeforeCutoff(atIso: string, cutoffIso: string): boolean {
  return atIso < cutoffIso;
}

/**
 * Rows looked at per transaction, by store and table: each batch is one short transaction, so the
 * receiver's own writes never wait for long. They differ by store because a batch holds different
 * things: on SQLite the whole file's write lock, on PostgreSQL only the batch's row locks
 * (bench/pg-retention.ts measures how long). A running replica's spool batch sits between two
 * answers on the thread that sends them (sqlite/spool.ts `pruneSpoolPaced`).
 */
export const RETENTION_BATCH = {
  sqlite: { bodies: 2000, messages: 500, proposals: 500 },
  postgres: { bodies: 1000, messages: 250, proposals: 250 },
  /** `prune` walks a spool back to back; a running replica a batch per turn of its event loop. */
  spool: { command: 2000, replica: 500 },
} as const;

/**
 * Which of a batch's candidate messages (created before the cutoff) go: those whose deliveries were
 * all read under the batch's lock (`total`: how many each has; PostgreSQL skips a delivery another
 * transaction holds, so it may read fewer) and are all delivered. Without `total`, every delivery
 * was read (SQLite's batch holds the file's write lock).
 */
export function removableMessages<Id>(
  candidates: readonly Id[],
  deliveries: readonly { messageId: Id; status: string }[],
  total?: ReadonlyMap<Id, number>,
): Id[] {
  const statuses = new Map<Id, string[]>();
  for (const d of deliveries) statuses.set(d.messageId, [...(statuses.get(d.messageId) ?? []), d.status]);
  return candidates.filter((id) => {
    const mine = statuses.get(id) ?? [];
    return (total === undefined || mine.length === (total.get(id) ?? 0)) && isMessagePrunable(mine);
  });
}

/** Whether removing a relayed spool delivery removes the event it stored (only these stored one). */
export function spoolDeliveryOwnsEvent(outcome: string, eventId: number | null): eventId is number {
  return eventId !== null && (outcome === 'accepted' || outcome === 'quarantined');
}

/**
 * What one pass removed, in the shape `prune --json` prints in both modes: `pruned` bodies,
 * `forwarded` messages, and the cutoff (ISO-8601).
 */
export interface PruneSummary {
  pruned: number;
  forwarded: number;
  /** Proposals whose personal fields were removed. */
  anonymised: number;
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
  anonymised: 'retention: removed the personal data of proposals final for longer than RETENTION_DAYS',
  spool: 'retention: removed relayed rows from the spool',
} as const;

/**
 * The `info` lines of a pass that removed something, in the pass's order (nothing removed: none).
 * `fields` is what every line carries: `retention_days`, and `replica` in cluster mode.
 */
export function retentionLog(
  removed: { pruned?: number; forwarded?: number; anonymised?: number; spool?: SpoolPruneSummary },
  fields: Readonly<Record<string, unknown>>,
): { fields: Record<string, unknown>; message: string }[] {
  const lines: { fields: Record<string, unknown>; message: string }[] = [];
  if (removed.pruned)
    lines.push({ fields: { pruned: removed.pruned, ...fields }, message: RETENTION_LOG.bodies });
  if (removed.forwarded)
    lines.push({ fields: { forwarded: removed.forwarded, ...fields }, message: RETENTION_LOG.forwarded });
  if (removed.anonymised)
    lines.push({ fields: { anonymised: removed.anonymised, ...fields }, message: RETENTION_LOG.anonymised });
  const spool = removed.spool;
  if (spool && (spool.deliveries > 0 || spool.events > 0))
    lines.push({ fields: { ...spool, ...fields }, message: RETENTION_LOG.spool });
  return lines;
}
