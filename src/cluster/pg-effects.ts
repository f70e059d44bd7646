import {
  type AverbacaoState,
  type EventFacts,
  lifecycleInput,
  type RegistryEffect,
  registryResultEffects,
  trackFromEventEffects,
} from '../domain/event-effects';
import { isKnownEvento } from '../domain/catalogue';
import { type ProposalStatus, transition } from '../domain/lifecycle';
import type { PollScheduleOptions } from '../domain/registry';
import type { Sql } from './sql';

/**
 * The effects of one event on PostgreSQL: the same decisions as the SQLite handlers
 * (domain/event-effects.ts, domain/lifecycle.ts), applied here with PostgreSQL's SQL, inside the
 * kick's transaction. Idempotent like them: a transition already recorded for the event
 * (UNIQUE event_id) changes nothing.
 */

export interface EffectsLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

export interface EffectsContext {
  sql: Sql;
  now: Date;
  logger: EffectsLogger;
  schedule: PollScheduleOptions;
  /** Schedules a registration's first poll, in the same transaction. */
  schedulePoll(sql: Sql, requestId: string, at: Date): Promise<void>;
}

/** Every built-in handler, in the SQLite router's order: life cycle, tracking, registry results. */
export async function applyEvent(event: EventFacts, ctx: EffectsContext): Promise<void> {
  if (event.kind === 'event' && event.evento !== null && isKnownEvento(event.evento)) {
    await applyLifecycle(event, ctx);
    await applyRegistry(trackFromEventEffects(event, ctx.now.getTime(), ctx.schedule), ctx);
  } else if (event.kind !== 'event' && event.requestId !== null) {
    const rows = await ctx.sql.query<AverbacaoState>(
      'SELECT status, correlation_id, nu_proposta FROM averbacoes WHERE request_id = $1 FOR UPDATE',
      [event.requestId],
    );
    await applyRegistry(registryResultEffects(event, rows[0] ?? null, ctx.now.getTime(), ctx.schedule), ctx);
  }
}

async function applyLifecycle(event: EventFacts, ctx: EffectsContext): Promise<void> {
  const input = lifecycleInput(event);
  if (!input.move) {
    if (input.reason === 'no_nu_proposta')
      ctx.logger.warn(
        { event_id: event.id, evento: event.evento },
        'life-cycle event without nu_proposta: nothing to move',
      );
    return;
  }
  const { sql, now } = ctx;
  const nu = String(input.nu);
  const at = now.toISOString();
  const current = await sql.query<{ status: ProposalStatus }>(
    'SELECT status FROM proposals WHERE nu_proposta = $1 FOR UPDATE',
    [nu],
  );
  const t = transition(current[0]?.status ?? null, input.evento);
  const d = input.data;
  const fields = [nu, d.uuid, d.nu_cpf, d.nu_cnpj_conveniada, d.vl_emprestimo, d.no_conveniada];
  if (t.from === null) {
    // The proposal row first: the transition references it.
    await sql.query(
      `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage,
         status, last_evento, first_event_id, last_event_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $11)`,
      [...fields, t.stage, t.to, t.evento, event.id, at],
    );
  }
  const recorded = await sql.query(
    `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (event_id) DO NOTHING RETURNING id`,
    [nu, event.id, t.evento, t.from, t.to, t.applied, t.reason, at],
  );
  if (recorded.length === 0 || t.from === null) return;
  // Data fields: the newest non-null value wins, whether or not the event moved the status.
  await sql.query(
    `UPDATE proposals SET uuid = coalesce($2, uuid), nu_cpf = coalesce($3, nu_cpf),
       nu_cnpj_conveniada = coalesce($4, nu_cnpj_conveniada), vl_emprestimo = coalesce($5, vl_emprestimo),
       no_conveniada = coalesce($6, no_conveniada), updated_at = $7
     WHERE nu_proposta = $1`,
    [...fields, at],
  );
  if (t.applied)
    await sql.query(
      `UPDATE proposals SET stage = $2, status = $3, last_evento = $4, last_event_id = $5, updated_at = $6
       WHERE nu_proposta = $1`,
      [nu, t.stage, t.to, t.evento, event.id, at],
    );
}

/**
 * Starts tracking a registration, its first poll scheduled in the same transaction; one already
 * tracked only gets its missing fields filled. Returns whether it was new.
 */
export async function track(
  sql: Sql,
  e: Extract<RegistryEffect, { type: 'track' }>,
  now: string,
  schedulePoll: EffectsContext['schedulePoll'],
): Promise<boolean> {
  const nu = e.nuProposta === null ? null : String(e.nuProposta);
  const created = await sql.query(
    `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, tracked_via, next_poll_at,
       created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
     ON CONFLICT (request_id) DO NOTHING RETURNING request_id`,
    [e.requestId, e.correlationId, nu, e.status, e.via, e.nextPollAt, now],
  );
  if (created.length === 0) {
    await fill(sql, e.requestId, e.correlationId, nu, now);
    return false;
  }
  if (e.nextPollAt !== null) await schedulePoll(sql, e.requestId, new Date(e.nextPollAt));
  return true;
}

async function applyRegistry(effects: readonly RegistryEffect[], ctx: EffectsContext): Promise<void> {
  const { sql } = ctx;
  const now = ctx.now.toISOString();
  for (const e of effects) {
    switch (e.type) {
      case 'track':
        await track(sql, e, now, ctx.schedulePoll);
        break;
      case 'fill':
        await fill(
          sql,
          e.requestId,
          e.correlationId,
          e.nuProposta === null ? null : String(e.nuProposta),
          now,
        );
        break;
      case 'set_status':
        await sql.query('UPDATE averbacoes SET status = $1, updated_at = $2 WHERE request_id = $3', [
          e.status,
          now,
          e.requestId,
        ]);
        break;
      case 'set_final':
        await sql.query(
          `UPDATE averbacoes SET status = $1, result_source = $2, result_body = $3, result_event_id = $4,
             completed_at = $5, next_poll_at = NULL, updated_at = $5 WHERE request_id = $6`,
          [e.status, e.source, e.body, e.eventId, now, e.requestId],
        );
        break;
      case 'log':
        ctx.logger[e.level](e.fields, e.message);
        break;
    }
  }
}

/** Known already: fill what was missing, never overwrite. */
async function fill(
  sql: Sql,
  requestId: string,
  correlationId: string | null,
  nu: string | null,
  now: string,
) {
  await sql.query(
    `UPDATE averbacoes SET correlation_id = coalesce(correlation_id, $1), nu_proposta = coalesce(nu_proposta, $2),
       updated_at = $3 WHERE request_id = $4`,
    [correlationId, nu, now, requestId],
  );
}
