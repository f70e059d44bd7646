import type { Transition, ProposalStatus } from '../domain/lifecycle';
import type { ProposalData } from '../domain/normalize';
import type { Db } from './database';

/**
 * Writes of the life cycle (contract §6) to `proposals` and `proposal_transitions`. The handler
 * decides with the pure state machine from {@link ProposalWrites.statusOf}; this module only applies
 * the decision. Runs inside the pipeline's transaction.
 */

/** One decided transition and the event's data, as the handler hands it over. */
export interface TransitionToApply {
  nu: number | string;
  eventId: number;
  transition: Transition;
  /** The event's `dados`, normalised; non-null fields overwrite the stored ones. */
  data: Pick<ProposalData, 'uuid' | 'nu_cpf' | 'nu_cnpj_conveniada' | 'vl_emprestimo' | 'no_conveniada'>;
  at: string;
}

export function proposalWrites(db: Db) {
  const getStatus = db.prepare<[number | string], { status: ProposalStatus }>(
    'SELECT status FROM proposals WHERE nu_proposta = ?',
  );
  const recordTransition = db.prepare(
    `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
     VALUES (@nu, @eventId, @evento, @from, @to, @applied, @reason, @at)
     ON CONFLICT (event_id) DO NOTHING`,
  );
  const insertProposal = db.prepare(
    `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage, status,
       last_evento, first_event_id, last_event_id, created_at, updated_at)
     VALUES (@nu, @uuid, @nu_cpf, @nu_cnpj_conveniada, @vl_emprestimo, @no_conveniada, @stage, @status, @evento,
       @eventId, @eventId, @at, @at)`,
  );
  // Data fields: the newest non-null value wins, whether or not the event moved the status.
  const updateData = db.prepare(
    `UPDATE proposals SET uuid = coalesce(@uuid, uuid), nu_cpf = coalesce(@nu_cpf, nu_cpf),
       nu_cnpj_conveniada = coalesce(@nu_cnpj_conveniada, nu_cnpj_conveniada),
       vl_emprestimo = coalesce(@vl_emprestimo, vl_emprestimo), no_conveniada = coalesce(@no_conveniada, no_conveniada),
       updated_at = @at
     WHERE nu_proposta = @nu`,
  );
  const move = db.prepare(
    `UPDATE proposals SET stage = @stage, status = @status, last_evento = @evento, last_event_id = @eventId, updated_at = @at
     WHERE nu_proposta = @nu`,
  );

  return {
    /** The proposal's status; null when it has not been seen. */
    statusOf: (nu: number | string): ProposalStatus | null => getStatus.get(nu)?.status ?? null,

    /**
     * Records the transition and, the first time only, applies it: creates the proposal when
     * `from` is null, updates its data, moves it when the transition is applied. Returns false when
     * the event was recorded before (a replay, or a retry after a crash): nothing changes then.
     */
    apply(input: TransitionToApply): boolean {
      const { nu, eventId, transition: t, data, at } = input;
      const recorded = recordTransition.run({
        nu,
        eventId,
        evento: t.evento,
        from: t.from,
        to: t.to,
        applied: t.applied ? 1 : 0,
        reason: t.reason,
        at,
      });
      if (recorded.changes === 0) return false;
      const fields = { nu, ...pickData(data), at };
      if (t.from === null) {
        insertProposal.run({ ...fields, stage: t.stage, status: t.to, evento: t.evento, eventId });
        return true;
      }
      updateData.run(fields);
      if (t.applied) move.run({ nu, stage: t.stage, status: t.to, evento: t.evento, eventId, at });
      return true;
    },
  };
}

export type ProposalWrites = ReturnType<typeof proposalWrites>;

function pickData(data: TransitionToApply['data']) {
  const { uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada } = data;
  return { uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada };
}
