import { trackEffect } from '../domain/event-effects';
import type { AverbacoesRepo } from '../store/averbacoes-repo';

/**
 * Starts tracking a registration declared here (named by an operator) or started through the
 * client: domain/event-effects.ts `trackEffect` decides the row (`queued`, first poll after the
 * webhook's grace), as cluster mode's pg-track.ts applies it on PostgreSQL.
 * Returns false when it was tracked already (missing fields are filled, nothing overwritten).
 */
export function trackRegistration(
  repo: AverbacoesRepo,
  t: {
    requestId: string;
    nuProposta: number | string | null;
    correlationId?: string | null;
    via: 'declared' | 'started';
  },
  now: Date,
  graceMs: number,
): boolean {
  const effect = trackEffect({ ...t, correlationId: t.correlationId ?? null }, now.getTime(), { graceMs });
  return repo.track({ ...effect, now: now.toISOString() });
}

/** Tracks a registration this receiver just started (`POST /contract/averbacao` answered 202). */
export function trackStarted(
  repo: AverbacoesRepo,
  accepted: { requestId: string; correlationId: string | null },
  nuProposta: number | string | null,
  now: Date,
  graceMs: number,
): boolean {
  return trackRegistration(
    repo,
    { requestId: accepted.requestId, correlationId: accepted.correlationId, nuProposta, via: 'started' },
    now,
    graceMs,
  );
}
