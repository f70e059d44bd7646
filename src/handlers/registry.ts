import { type RegistryEffect, registryResultEffects, trackFromEventEffects } from '../domain/event-effects';
import type { PollScheduleOptions } from '../domain/registry';
import type { Logger } from '../logger';
import { type AverbacoesRepo, averbacoesRepo } from '../store/averbacoes';
import type { Db } from '../store/database';
import type { Handler } from './router';

/**
 * Registry results (the webhook of interface §4.4, kind `registry`) and poll answers (kind `poll`)
 * update the tracked averbação; any event whose `dados` carries a `requestId` starts tracking it.
 * The decisions are domain/event-effects.ts's (shared with cluster mode); this applies them to
 * SQLite. Synchronous, inside the pipeline's transaction, idempotent.
 */
export function registryHandlers(
  db: Db,
  schedule: PollScheduleOptions,
): { result: Handler; trackFromEvent: Handler } {
  const repo = averbacoesRepo(db);
  const result: Handler = (event, ctx) => {
    if (event.requestId === null) return;
    const current = repo.get(event.requestId) ?? null;
    applyRegistryEffects(repo, registryResultEffects(event, current, ctx.now.getTime(), schedule), ctx);
  };
  const trackFromEvent: Handler = (event, ctx) =>
    applyRegistryEffects(repo, trackFromEventEffects(event, ctx.now.getTime(), schedule), ctx);
  return { result, trackFromEvent };
}

function applyRegistryEffects(
  repo: AverbacoesRepo,
  effects: readonly RegistryEffect[],
  ctx: { now: Date; logger: Logger },
): void {
  const now = ctx.now.toISOString();
  for (const e of effects) {
    switch (e.type) {
      case 'track':
        repo.track({ ...e, now });
        break;
      case 'fill':
        repo.fillMissing(e.requestId, e, now);
        break;
      case 'set_status':
        repo.setStatus(e.requestId, e.status, now);
        break;
      case 'set_final':
        repo.setFinal(e.requestId, { ...e, now });
        break;
      case 'log':
        ctx.logger[e.level](e.fields, e.message);
        break;
    }
  }
}
