import {
  type AverbacaoState,
  type EventFacts,
  lifecycleInput,
  lifecycleSkipLog,
  type RegistryEffect,
  registryResultEffects,
  trackFromEventEffects,
} from '../domain/event-effects';
import type { BuiltInStage } from '../domain/handler-order';
import { type ProposalStatus, transition } from '../domain/lifecycle';
import type { PollScheduleOptions } from '../domain/registry';
import type { Sql, Statement } from './sql';

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
  /**
   * Proposal statuses the caller already holds, by nu_proposta (null: no row), each row locked
   * FOR UPDATE in this transaction (kick.ts loads a batch's at once). Read instead of the row, and
   * kept up to date with each event's effects. Only valid while nothing of it is rolled back: kick.ts
   * drops it with the savepoint it was filled under. @default none (each event loads its proposal)
   */
  statuses?: Map<string, ProposalStatus | null>;
}

const statement = (name: string, text: string): Statement => ({ name: `consig_effects_${name}`, text });

/** The statements of an event's effects: prepared, as they run once per event (sql.ts `prepared`). */
const SQL = {
  averbacaoForUpdate: statement(
    'averbacao_for_update',
    'SELECT status, correlation_id, nu_proposta FROM averbacoes WHERE request_id = $1 FOR UPDATE',
  ),
  proposalForUpdate: statement(
    'proposal_for_update',
    'SELECT status FROM proposals WHERE nu_proposta = $1 FOR UPDATE',
  ),
  // A proposal seen for the first time: its row, then its first transition (which references it;
  // the foreign key is checked at the end of the statement, when both rows are there).
  create: statement(
    'create_proposal',
    `WITH proposal AS (
       INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage,
         status, last_evento, first_event_id, last_event_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $11))
     INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
     VALUES ($1, $10, $9, $12, $8, $13, $14, $11)
     ON CONFLICT (event_id) DO NOTHING`,
  ),
  // A known proposal: the transition, and only if it was not recorded before (a replay), the
  // proposal's data fields (the newest non-null value wins, whether or not the event moved the
  // status) and, when applied, its status. One statement, one new row version.
  move: statement(
    'move_proposal',
    `WITH recorded AS (
       INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
       ON CONFLICT (event_id) DO NOTHING RETURNING id)
     UPDATE proposals SET uuid = coalesce($9, uuid), nu_cpf = coalesce($10, nu_cpf),
       nu_cnpj_conveniada = coalesce($11, nu_cnpj_conveniada), vl_emprestimo = coalesce($12, vl_emprestimo),
       no_conveniada = coalesce($13, no_conveniada), updated_at = $8,
       stage = CASE WHEN $6 THEN $14 ELSE stage END, status = CASE WHEN $6 THEN $5 ELSE status END,
       last_evento = CASE WHEN $6 THEN $3 ELSE last_evento END,
       last_event_id = CASE WHEN $6 THEN $2 ELSE last_event_id END
     WHERE nu_proposta = $1 AND EXISTS (SELECT FROM recorded)
     RETURNING true AS recorded`,
  ),
  track: statement(
    'track',
    `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, tracked_via, next_poll_at,
       created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
     ON CONFLICT (request_id) DO NOTHING RETURNING request_id`,
  ),
  fill: statement(
    'fill',
    `UPDATE averbacoes SET correlation_id = coalesce(correlation_id, $1), nu_proposta = coalesce(nu_proposta, $2),
       updated_at = $3 WHERE request_id = $4`,
  ),
  setStatus: statement(
    'set_status',
    'UPDATE averbacoes SET status = $1, updated_at = $2 WHERE request_id = $3',
  ),
  setFinal: statement(
    'set_final',
    `UPDATE averbacoes SET status = $1, result_source = $2, result_body = $3, result_event_id = $4,
       completed_at = $5, next_poll_at = NULL, updated_at = $5 WHERE request_id = $6`,
  ),
} as const;

/**
 * Locks the proposals `nus` name (FOR UPDATE, in nu_proposta order) and returns their statuses,
 * null for a proposal with no row yet: an {@link EffectsContext.statuses} for a batch of events.
 */
export async function lockProposals(
  sql: Sql,
  nus: readonly string[],
): Promise<Map<string, ProposalStatus | null>> {
  const statuses = new Map<string, ProposalStatus | null>(nus.map((nu) => [nu, null]));
  if (nus.length === 0) return statuses;
  // Plain text, planned at each run: a batch runs it once, and a generic plan of `= ANY` made while
  // the table was small would be a sequential scan (kick.ts, the note on its statements).
  const rows = await sql.query<{ nu_proposta: string; status: ProposalStatus }>(
    'SELECT nu_proposta, status FROM proposals WHERE nu_proposta = ANY($1::text[]) ORDER BY nu_proposta FOR UPDATE',
    [nus],
  );
  for (const r of rows) statuses.set(r.nu_proposta, r.status);
  return statuses;
}

/** The proposal an event moves (nu_proposta as PostgreSQL holds it), or null for one that moves none. */
export function proposalOf(event: EventFacts): string | null {
  const input = lifecycleInput(event);
  return input.move ? String(input.nu) : null;
}

/** A built-in stage of domain/handler-order.ts on PostgreSQL (the SQLite ones: src/handlers/). */
export async function applyStage(stage: BuiltInStage, event: EventFacts, ctx: EffectsContext): Promise<void> {
  switch (stage) {
    case 'lifecycle':
      return applyLifecycle(event, ctx);
    case 'registry_tracking':
      return applyRegistry(trackFromEventEffects(event, ctx.now.getTime(), ctx.schedule), ctx);
    case 'registry_results': {
      if (event.requestId === null) return;
      const rows = await ctx.sql.prepared<AverbacaoState>(SQL.averbacaoForUpdate, [event.requestId]);
      return applyRegistry(
        registryResultEffects(event, rows[0] ?? null, ctx.now.getTime(), ctx.schedule),
        ctx,
      );
    }
  }
}

async function applyLifecycle(event: EventFacts, ctx: EffectsContext): Promise<void> {
  const input = lifecycleInput(event);
  if (!input.move) {
    const skip = lifecycleSkipLog(event, input);
    if (skip !== null) ctx.logger.warn(skip.fields, skip.message);
    return;
  }
  const { sql, now, statuses } = ctx;
  const nu = String(input.nu);
  const at = now.toISOString();
  const current = statuses?.has(nu)
    ? (statuses.get(nu) as ProposalStatus | null)
    : ((await sql.prepared<{ status: ProposalStatus }>(SQL.proposalForUpdate, [nu]))[0]?.status ?? null);
  const t = transition(current, input.evento);
  const d = input.data;
  const fields = [d.uuid, d.nu_cpf, d.nu_cnpj_conveniada, d.vl_emprestimo, d.no_conveniada];
  if (t.from === null) {
    await sql.prepared(SQL.create, [
      nu,
      ...fields,
      t.stage,
      t.to,
      t.evento,
      event.id,
      at,
      t.from,
      t.applied,
      t.reason,
    ]);
    statuses?.set(nu, t.to);
    return;
  }
  const recorded = await sql.prepared(SQL.move, [
    nu,
    event.id,
    t.evento,
    t.from,
    t.to,
    t.applied,
    t.reason,
    at,
    ...fields,
    t.stage,
  ]);
  if (recorded.length > 0 && t.applied) statuses?.set(nu, t.to);
  else statuses?.set(nu, t.from);
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
  const created = await sql.prepared(SQL.track, [
    e.requestId,
    e.correlationId,
    nu,
    e.status,
    e.via,
    e.nextPollAt,
    now,
  ]);
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
        await sql.prepared(SQL.setStatus, [e.status, now, e.requestId]);
        break;
      case 'set_final':
        await sql.prepared(SQL.setFinal, [e.status, e.source, e.body, e.eventId, now, e.requestId]);
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
  await sql.prepared(SQL.fill, [correlationId, nu, now, requestId]);
}
