import { isKnownEvento } from '../domain/catalogue';
import { transition, type ProposalStatus } from '../domain/lifecycle';
import { normalizeDados } from '../domain/normalize';
import type { Db } from '../store/database';
import type { Handler } from './router';

/**
 * The life-cycle handler (SPEC §6): moves `proposals` with the pure state machine and records every
 * event in `proposal_transitions`, applied or not. Registered with `router.on(EVENTOS, …)` like any
 * partner handler. Idempotent: an event already recorded (UNIQUE event_id) changes nothing.
 */
export function lifecycleHandler(db: Db): Handler {
  const getProposal = db.prepare<[number | string], { status: ProposalStatus }>(
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
    const at = ctx.now.toISOString();
    const current = getProposal.get(nu);
    const t = transition(current?.status ?? null, event.evento);
    const recorded = recordTransition.run({
      nu,
      eventId: event.id,
      evento: event.evento,
      from: t.from,
      to: t.to,
      applied: t.applied ? 1 : 0,
      reason: t.reason,
      at,
    });
    if (recorded.changes === 0) return; // processed before (replay, or a retry after a crash)
    const fields = {
      nu,
      uuid: data.uuid,
      nu_cpf: data.nu_cpf,
      nu_cnpj_conveniada: data.nu_cnpj_conveniada,
      vl_emprestimo: data.vl_emprestimo,
      no_conveniada: data.no_conveniada,
      at,
    };
    if (current === undefined) {
      insertProposal.run({
        ...fields,
        stage: t.stage,
        status: t.to,
        evento: event.evento,
        eventId: event.id,
      });
      return;
    }
    updateData.run(fields);
    if (t.applied)
      move.run({ nu, stage: t.stage, status: t.to, evento: event.evento, eventId: event.id, at });
  };
}
