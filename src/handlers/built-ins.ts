import { stageEffects } from '../core/effects';
import type { BuiltInStage } from '../domain/handler-order';
import type { PollScheduleOptions } from '../domain/registry';
import { sqliteDialect } from '../domain/sql/dialect';
import type { Db } from '../store/database';
import { effectsOn } from '../store/handler-sql';
import type { Handler } from './router';

/**
 * The built-in stages of domain/handler-order.ts but forwarding, as SQLite mode's handlers on the
 * pipeline's connection: the life cycle (contract §6: the pure state machine from the proposal's
 * stored status, every event recorded in `proposal_transitions`, applied or not), registry
 * tracking, and registry results and poll answers. Registered like any partner handler. Each runs
 * core/effects.ts's statements synchronously inside the event's transaction; cluster mode's kick
 * runs the same ones.
 */
export function effectHandlers(db: Db, schedule: PollScheduleOptions): Record<BuiltInStage, Handler> {
  const run = effectsOn(db);
  const handler =
    (stage: BuiltInStage): Handler =>
    (event, ctx) =>
      run(stageEffects(stage, event, { dialect: sqliteDialect, now: ctx.now, logger: ctx.logger, schedule }));
  return {
    lifecycle: handler('lifecycle'),
    registry_tracking: handler('registry_tracking'),
    registry_results: handler('registry_results'),
  };
}
