import {
  messagesFor,
  type OutgoingMessage,
  type ProposalSnapshot,
} from '../../src/domain/forwarding/messages';
import type { ProposalStatus } from '../../src/domain/lifecycle';

export const CPF = '12345678909';

/**
 * The messages the pipeline stores for one processed life-cycle event of proposal `nu` (its
 * `event.received`, then `proposal.changed` to `to`), built with the real `messagesFor`. The event's
 * dedup key is `wh_<prefix><id>`, so its message ids are distinct for each prefix and id.
 */
export function lifecycleMessages(
  event: { id: number; nu: number; evento: string; to: ProposalStatus; at: string },
  options: { idPrefix?: string; proposal?: Partial<ProposalSnapshot> } = {},
): OutgoingMessage[] {
  const { id, nu, evento, to, at } = event;
  return messagesFor(
    {
      event: {
        id,
        kind: 'event',
        evento,
        nu_proposta: nu,
        request_id: null,
        dedup_key: `wh_${options.idPrefix ?? ''}${id}`,
        received_at: at,
        payload: { evento, dados: { nu_proposta: nu, nu_cpf: CPF } },
      },
      transition: { from_status: null, to_status: to, applied: true, reason: 'forward' },
      proposal: {
        nu_proposta: nu,
        uuid: null,
        nu_cpf: CPF,
        nu_cnpj_conveniada: null,
        vl_emprestimo: 1000,
        no_conveniada: null,
        stage: 'proposta',
        status: to,
        last_evento: evento,
        created_at: at,
        updated_at: at,
        ...options.proposal,
      },
      proposalAverbacao: null,
      finishedAverbacao: null,
    },
    at,
  );
}
