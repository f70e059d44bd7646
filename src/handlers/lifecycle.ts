import { isKnownEvento } from '../domain/catalogue';
import { transition } from '../domain/lifecycle';
import { normalizeDados } from '../domain/normalize';
import type { Db } from '../store/database';
import { proposalWrites } from '../store/proposal-writes';
import type { Handler } from './router';

/**
 * The life-cycle handler (contract §6): decides with the pure state machine from the proposal's
 * stored status, and has the store record every event in `proposal_transitions`, applied or not.
 * Registered with `router.on(EVENTOS, …)` like any partner handler. Idempotent: an event already
 * recorded (UNIQUE event_id) changes nothing.
 */
export function lifecycleHandler(db: Db): Handler {
  const proposals = proposalWrites(db);
  return (event, ctx) => {
    if (event.kind !== 'event' || event.evento === null || !isKnownEvento(event.evento)) return;
    const data = normalizeDados(event.dados);
    const nu = event.nuProposta ?? data.nu_proposta;
    if (nu === null) {
      ctx.logger.warn(
        { event_id: event.id, evento: event.evento },
        'life-cycle event without nu_proposta: nothing to move',
      );
      return;
    }
    const t = transition(proposals.statusOf(nu), event.evento);
    proposals.apply({ nu, eventId: event.id, transition: t, data, at: ctx.now.toISOString() });
  };
}
