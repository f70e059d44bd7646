import type { SchemaHold } from './migration-compat';

/**
 * The hold-back window of cluster mode (docs/cluster.md §10): a work key's events are processed in
 * `received_at` order, and only once every relay still counted has moved past them, so that a
 * proposal's events acknowledged by different replicas are processed in the order the replicas
 * acknowledged them, as one process would (SQLite mode), whichever relay reached PostgreSQL first.
 *
 * Each spool's relay publishes a heartbeat: "everything I acknowledged before `coveredThrough` (my
 * clock) is in PostgreSQL", with PostgreSQL's clock at the beat. The watermark is the lowest of
 * those over the spools it counts. Pure: the clocks are passed in.
 */

/** One spool's last heartbeat (migrations-pg/0006, `relay_spools`). */
export interface RelayBeat {
  spool: string;
  replica: string;
  /** Everything the spool acknowledged before this instant is in PostgreSQL (its replica's clock). */
  coveredThrough: Date;
  /** PostgreSQL's clock at the spool's last heartbeat. */
  heartbeatAt: Date;
  /** PostgreSQL's clock at the first heartbeat of the spool's current run (after a silence). */
  liveSince: Date;
}

export interface Watermark {
  /**
   * Events with `received_at` at or below this are all in PostgreSQL (but those of a dropped spool);
   * null when no spool has ever relayed: there is nobody to wait for.
   */
  at: Date | null;
  /** Silent spools the watermark still waits for (not dropped yet), by spool id. */
  waiting: string[];
  /** Silent spools it no longer waits for: what they relay later is processed late. */
  dropped: string[];
}

/** Whether `beat` has been heard from within `maxMs` of `now` (both PostgreSQL's clock). */
export function isFresh(beat: Pick<RelayBeat, 'heartbeatAt'>, now: Date, maxMs: number): boolean {
  return now.getTime() - beat.heartbeatAt.getTime() <= maxMs;
}

/**
 * The watermark over `beats` at `now` (PostgreSQL's clock), given CLUSTER_HOLDBACK_MAX_MS.
 *
 * A spool silent for more than `maxMs` is dropped, but only once some spool has been heard from
 * continuously for `maxMs`: after an outage of PostgreSQL, when every relay was silent, the first
 * relay back does not drop the others before they had `maxMs` to come back too (their backlogs are
 * then processed in order with its own). A spool never dropped is waited for however long it is
 * silent only while nobody has been live that long, so the wait is bounded by `maxMs` after the
 * first relay is back.
 */
export function watermarkOf(beats: readonly RelayBeat[], now: Date, maxMs: number): Watermark {
  const settled = beats.some((b) => isFresh(b, now, maxMs) && now.getTime() - b.liveSince.getTime() >= maxMs);
  const waiting: string[] = [];
  const dropped: string[] = [];
  let atMs: number | null = null;
  for (const b of beats) {
    if (!isFresh(b, now, maxMs)) {
      if (settled) {
        dropped.push(b.spool);
        continue;
      }
      waiting.push(b.spool);
    }
    atMs = Math.min(atMs ?? Number.POSITIVE_INFINITY, b.coveredThrough.getTime());
  }
  return { at: atMs === null ? null : new Date(atMs), waiting, dropped };
}

/**
 * When a spool's current run of heartbeats began, after a beat at `now`: `now` for its first beat
 * and after a silence longer than `maxMs`, otherwise unchanged.
 */
export function liveSinceAfterBeat(
  previous: Pick<RelayBeat, 'heartbeatAt' | 'liveSince'> | null,
  now: Date,
  maxMs: number,
): Date {
  return previous === null || !isFresh(previous, now, maxMs) ? now : previous.liveSince;
}

/**
 * What a relay can say is covered, on its clock `now`: everything before the oldest delivery it
 * acknowledged that is not in PostgreSQL yet (`unrelayed`), and before the oldest request it is still
 * answering (`inFlight`: its received_at is taken when it arrives, before its body is read and
 * spooled); `now` when there is neither. A request open longer than `maxMs` (a client sending its
 * body slowly) no longer holds it back: the watermark would otherwise wait for any sender that
 * trickles its bytes; its delivery, if it comes, is then relayed as late.
 */
export function coveredThrough(
  now: Date,
  unrelayed: string | null,
  inFlight: string | null,
  maxMs: number,
): Date {
  let at = now.getTime();
  if (unrelayed !== null) at = Math.min(at, Date.parse(unrelayed));
  if (inFlight !== null) at = Math.min(at, Math.max(Date.parse(inFlight), now.getTime() - maxMs));
  return new Date(at);
}

/**
 * This replica's clock minus PostgreSQL's, ms: PostgreSQL's reading taken between `sentAt` and
 * `receivedAt` (this replica's clock), placed at their midpoint; off by at most half the round trip.
 */
export function clockOffsetMs(sentAt: Date, pgNow: Date, receivedAt: Date): number {
  return (sentAt.getTime() + receivedAt.getTime()) / 2 - pgNow.getTime();
}

/**
 * Whether a replica is ready for a load balancer's traffic (`/readyz`), as far as order goes. A
 * replica the others have not heard of holds nothing back: until its relay has published a first
 * heartbeat, a later event of a proposal taken by another replica could be processed before one it
 * took. So it is not ready until it has beaten (it still acknowledges what reaches it meanwhile),
 * but for at most `maxMs` after it started: when PostgreSQL cannot be reached, nobody processes
 * anyway, and a fleet restarted during an outage must still take the service's deliveries.
 */
export function readyForTraffic(o: { beaten: boolean; sinceStartMs: number; maxMs: number }): boolean {
  return o.beaten || o.sinceStartMs >= o.maxMs;
}

/** What `/readyz` reports of a runtime, and what the webhook routes ask (http/, runtime/). */
export interface Readiness {
  ready: boolean;
  ordered: boolean;
  /** Why the replica refuses PostgreSQL's schema (issue 46): out of rotation, webhooks 503. */
  refused?: string;
  /** Its schema is not in place yet: it is migrating, or waiting for another replica's migration (issue 46). */
  migrating?: boolean;
  /**
   * Why the webhook routes answer 503 now instead of acknowledging, or undefined while they
   * acknowledge: the schema refused, being migrated, or not read yet (issue 46, `schemaHold`).
   */
  holdWebhooks?: SchemaHold;
}
