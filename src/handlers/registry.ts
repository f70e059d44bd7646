import type { RegistryStatus } from '../domain/catalogue';
import {
  firstPollAt,
  isFinalRegistryStatus,
  mergeRegistryStatus,
  type PollScheduleOptions,
} from '../domain/registry';
import { nonBlankString, own } from '../domain/json';
import { averbacoesRepo } from '../store/averbacoes';
import type { Db } from '../store/database';
import type { Handler, HandlerEvent } from './router';

/**
 * Registry results (the webhook of interface §4.4, kind `registry`) and poll answers (kind `poll`) update
 * the tracked averbação; any event whose `dados` carries a `requestId` starts tracking it.
 * Synchronous, inside the pipeline's transaction, idempotent.
 */

/** correlationId at the top level or under `dados` (the webhook's shape is "not shown", interface §6.2). */
function correlationIdOf(event: HandlerEvent): string | null {
  return (
    nonBlankString(own(event.payload, 'correlationId')) ?? nonBlankString(own(event.dados, 'correlationId'))
  );
}

export function registryHandlers(
  db: Db,
  schedule: PollScheduleOptions,
): { result: Handler; trackFromEvent: Handler } {
  const repo = averbacoesRepo(db);

  const result: Handler = (event, ctx) => {
    if (event.requestId === null) return;
    const now = ctx.now.toISOString();
    const source = event.kind === 'poll' ? 'poll' : 'webhook';
    const current = repo.get(event.requestId);
    const merge = mergeRegistryStatus(current?.status ?? null, event.registryStatus);
    if (!current) {
      // A result for a registration nobody declared here: track it from now on.
      const status: RegistryStatus = merge.status ?? 'queued';
      const final = isFinalRegistryStatus(status);
      repo.track({
        requestId: event.requestId,
        correlationId: correlationIdOf(event),
        nuProposta: event.nuProposta,
        status,
        via: 'registry',
        now,
        nextPollAt: final ? null : new Date(firstPollAt(ctx.now.getTime(), schedule)).toISOString(),
      });
      if (final)
        repo.setFinal(event.requestId, { status, source, body: event.rawBody, eventId: event.id, now });
      return;
    }
    // interface §2.3: the status query (and maybe the webhook) carries the correlationId; a
    // registration tracked by its requestId alone learns it from the first result that has one.
    const correlationId = correlationIdOf(event);
    if (current.correlation_id === null && correlationId !== null)
      repo.fillMissing(event.requestId, { correlationId, nuProposta: event.nuProposta }, now);
    if (!merge.apply || merge.status === null) {
      if (merge.reason === 'unknown_status') {
        ctx.logger.warn(
          { request_id: event.requestId, status: event.registryStatus, event_id: event.id },
          'registry result with an unknown status: kept, not applied',
        );
      }
      return;
    }
    if (isFinalRegistryStatus(merge.status)) {
      repo.setFinal(event.requestId, {
        status: merge.status,
        source,
        body: event.rawBody,
        eventId: event.id,
        now,
      });
      const log = {
        request_id: event.requestId,
        status: merge.status,
        source,
        nu_proposta: current.nu_proposta,
      };
      if (merge.status === 'error')
        ctx.logger.warn(log, 'averbação ended in error (definitive failure, interface §3.2)');
      else ctx.logger.info(log, 'averbação completed');
    } else {
      repo.setStatus(event.requestId, merge.status, now);
    }
  };

  const trackFromEvent: Handler = (event, ctx) => {
    if (event.kind !== 'event' || event.requestId === null) return;
    repo.track({
      requestId: event.requestId,
      correlationId: correlationIdOf(event),
      nuProposta: event.nuProposta,
      status: 'queued',
      via: 'event',
      now: ctx.now.toISOString(),
      nextPollAt: new Date(firstPollAt(ctx.now.getTime(), schedule)).toISOString(),
    });
  };

  return { result, trackFromEvent };
}
