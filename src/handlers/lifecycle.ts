import { lifecycleInput, lifecycleSkipLog } from '../domain/event-effects';
import { transition } from '../domain/lifecycle';
import type { Db } from '../store/database';
import { proposalWrites } from '../store/proposal-writes';
import type { Handler } from './router';

/**
 * The life-cycle handler (contract §6): decides with the pure state machine from the proposal's
 * stored status, and has the store record every event in `proposal_transitions`, applied or not.
 * Registered with `router.on(EVENTOS, …)` like any partner handler. Idempotent: an event already
 * recorded (UNIQUE event_id) changes nothing. Cluster mode applies the same decision to PostgreSQL
 * (src/cluster/pg-effects.ts).
 */
export function lifecycleHandler(db: Db): Handler {
  const proposals = proposalWrites(db);
  return (event, ctx) => {
    const input = lifecycleInput(event);
    if (!input.move) {
      const skip = lifecycleSkipLog(event, input);
      if (skip !== null) ctx.logger.warn(skip.fields, skip.message);
      return;
    }
    const t = transition(proposals.statusOf(input.nu), input.evento);
    proposals.apply({
      nu: input.nu,
      eventId: event.id,
      transition: t,
      data: input.data,
      at: ctx.now.toISOString(),
    });
  };
}
