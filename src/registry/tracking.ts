import { firstPollAt } from '../domain/registry';
import type { AverbacoesRepo, TrackedVia } from '../store/averbacoes';

/**
 * Starts tracking a registration declared here (started through the client, or named by an
 * operator): status `queued` until the service says more, first poll after the webhook's grace.
 * Returns false when it was tracked already (missing fields are filled, nothing overwritten).
 */
export function trackRegistration(
  repo: AverbacoesRepo,
  t: {
    requestId: string;
    nuProposta: number | string | null;
    correlationId?: string | null;
    via: TrackedVia;
    status?: 'queued' | 'processing';
  },
  now: Date,
  graceMs: number,
): boolean {
  return repo.track({
    requestId: t.requestId,
    correlationId: t.correlationId ?? null,
    nuProposta: t.nuProposta,
    status: t.status ?? 'queued',
    via: t.via,
    now: now.toISOString(),
    nextPollAt: new Date(firstPollAt(now.getTime(), { graceMs })).toISOString(),
  });
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
