import {
  type AverbacaoState,
  type EventFacts,
  lifecycleInput,
  lifecycleSkipLog,
  registrationOf,
  type RegistryEffect,
  registryResultEffects,
  trackFromEventEffects,
} from '../domain/event-effects';
import type { HandlerLogger } from '../domain/event-router';
import type { BuiltInStage } from '../domain/handler-order';
import { type ProposalStatus, transition } from '../domain/lifecycle';
import type { PollScheduleOptions } from '../domain/registry';
import { type Dialect, perDialect } from '../domain/sql/dialect';

/**
 * The built-in handlers' effects on the log (the life cycle, registry tracking and results),
 * applied once for both stores: which statements run, in what order, with what values, given the
 * decisions of domain/event-effects.ts and domain/lifecycle.ts. Each effect is a program, a
 * generator that yields its statements and is given back each one's rows; a store only runs them,
 * with the event step's drivers and ops (event-step.ts): inside the event step, or alone (a
 * registration tracked by an operator). Idempotent: a transition already recorded for the event (UNIQUE event_id) changes
 * nothing, a registration already tracked is only filled in.
 */

/**
 * A statement with a name of its own (the effects', the event step's, the turn lock's): `$n`
 * placeholders; PostgreSQL prepares it under `name` once per connection, SQLite once per connection
 * by identity. A statement, not a runner: PgSql `prepared` and the step's ops run it. One name, one
 * text: each is a module constant.
 */
export interface NamedStatement {
  readonly name: string;
  readonly text: string;
  /** Each row an array of its values, in column order (SQLite's `raw`, node-postgres's `rowMode`). */
  readonly rowMode?: 'array';
}

/**
 * What a program asks of its store: a statement and its values, or a registration's first poll to
 * queue in the same transaction (cluster mode's pg-boss job; SQLite mode polls from the row's
 * `next_poll_at`, written with it).
 */
export type EffectStep =
  | { readonly statement: NamedStatement; readonly params: readonly unknown[] }
  | { readonly firstPoll: { readonly requestId: string; readonly at: Date } };

/** A program: yields its steps, is given each statement's rows back, returns `R`. */
export type EffectProgram<R = void> = Generator<EffectStep, R, readonly unknown[]>;

/** What the effects log: a handler's logger's info and warn (domain/event-router.ts). */
export type EffectsLogger = Pick<HandlerLogger, 'info' | 'warn'>;

export interface EffectsEnv {
  readonly dialect: Dialect;
  readonly now: Date;
  readonly logger: EffectsLogger;
  readonly schedule: PollScheduleOptions;
  /**
   * Proposal statuses the caller already holds, by {@link proposalKey} (null: no row), each row
   * locked in this transaction (runtime/cluster/turn.ts locks a batch's at once). Read instead of the row,
   * and kept up to date with each event's effects. Only valid while nothing of it is rolled back.
   * @default none (each event reads its proposal)
   */
  readonly statuses?: Map<string, ProposalStatus | null>;
  /**
   * Of the proposals in {@link statuses}, those whose personal data was erased
   * (`proposals.personal_erased_at`, issue 45). Read with them.
   * @default none
   */
  readonly erased?: ReadonlySet<string>;
}

const statement = (name: string, text: string): NamedStatement => ({ name: `consig_effects_${name}`, text });

/**
 * The reads that lock their row (PostgreSQL; SQLite's one writer already holds the file), built once
 * per dialect: a store prepares each statement once, by identity.
 */
const LOCKING = perDialect((dialect) => ({
  proposalStatus: statement(
    'proposal_status',
    `SELECT status, personal_erased_at FROM proposals WHERE nu_proposta = $1${dialect.rowLock('UPDATE')}`,
  ),
  averbacaoState: statement(
    'averbacao_state',
    `SELECT status, correlation_id, nu_proposta FROM averbacoes WHERE request_id = $1${dialect.rowLock('UPDATE')}`,
  ),
}));

/*
 * The proposal's statements share one list of values ({@link transitionValues}): $1 nu_proposta,
 * $2 event id, $3 evento, $4 from, $5 to, $6 applied, $7 reason, $8 at, $9–$13 the event's data
 * fields, $14 stage.
 */
const RECORD = `INSERT INTO proposal_transitions (nu_proposta, event_id, evento, from_status, to_status, applied, reason, at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (event_id) DO NOTHING RETURNING id`;
const CREATE = `INSERT INTO proposals (nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada,
    stage, status, last_evento, first_event_id, last_event_id, created_at, updated_at)
  VALUES ($1, $9, $10, $11, $12, $13, $14, $5, $3, $2, $2, $8, $8)`;
// The data fields: the newest non-null value wins, whether or not the event moved the status; the
// personal ones never come back to a proposal whose personal data was erased (issue 45), and a CPF
// that changes leaves the proposal to the subject index again (core/subject-index.ts).
const MOVE = `UPDATE proposals SET uuid = coalesce($9, uuid),
    nu_cpf = CASE WHEN personal_erased_at IS NULL THEN coalesce($10, nu_cpf) END,
    subject_hash = CASE WHEN personal_erased_at IS NULL AND coalesce($10 <> nu_cpf, $10 IS NOT NULL) THEN NULL
      ELSE subject_hash END,
    nu_cnpj_conveniada = CASE WHEN personal_erased_at IS NULL THEN coalesce($11, nu_cnpj_conveniada) END,
    vl_emprestimo = coalesce($12, vl_emprestimo),
    no_conveniada = CASE WHEN personal_erased_at IS NULL THEN coalesce($13, no_conveniada) END, updated_at = $8,
    stage = CASE WHEN $6 THEN $14 ELSE stage END, status = CASE WHEN $6 THEN $5 ELSE status END,
    last_evento = CASE WHEN $6 THEN $3 ELSE last_evento END,
    last_event_id = CASE WHEN $6 THEN $2 ELSE last_event_id END
  WHERE nu_proposta = $1`;

const SQL = {
  /**
   * The transition, then the proposal: as statements of their own, the proposal's only if the
   * transition was not recorded before (a replay). Where a WITH may write ({@link Dialect.writingWith}:
   * PostgreSQL) one statement each, one round trip and one new row version (the foreign key to
   * `proposals` is checked at the statement's end).
   */
  record: statement('record', RECORD),
  create: statement('create', CREATE),
  move: statement('move', MOVE),
  pgCreate: statement('pg_create', `WITH proposal AS (${CREATE}) ${RECORD}`),
  pgMove: statement(
    'pg_move',
    `WITH recorded AS (${RECORD}) ${MOVE} AND EXISTS (SELECT FROM recorded) RETURNING true AS recorded`,
  ),
  track: statement(
    'track',
    `INSERT INTO averbacoes (request_id, correlation_id, nu_proposta, status, tracked_via, next_poll_at,
       created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (request_id) DO NOTHING RETURNING request_id`,
  ),
  // Known already: fill what was missing, never overwrite.
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

const run = (s: NamedStatement, params: readonly unknown[]): EffectStep => ({ statement: s, params });

/** nu_proposta as the store keeps it ({@link Dialect.storedNu}). */
function nuValue(dialect: Dialect, nu: number | string | null): number | string | null {
  return nu === null ? null : dialect.storedNu(nu);
}

/** The proposal an event moves, as {@link EffectsEnv.statuses} keys it, or null for none. */
export function proposalKey(event: EventFacts): string | null {
  const input = lifecycleInput(event);
  return input.move ? String(input.nu) : null;
}

/**
 * A built-in stage of domain/handler-order.ts. The life cycle's returns whether the event's proposal
 * had its personal data erased (the event step then erases it from the event too).
 */
export function* stageEffects(
  stage: BuiltInStage,
  event: EventFacts,
  env: EffectsEnv,
): EffectProgram<boolean | undefined> {
  const nowMs = env.now.getTime();
  switch (stage) {
    case 'lifecycle':
      return yield* lifecycleEffects(event, env);
    case 'registry_tracking':
      yield* registryEffects(trackFromEventEffects(event, nowMs, env.schedule), env);
      return undefined;
    case 'registry_results': {
      const requestId = registrationOf('registry_results', event);
      if (requestId === null) return undefined;
      const [current] = yield run(LOCKING(env.dialect).averbacaoState, [requestId]);
      const state = (current as AverbacaoState | undefined) ?? null;
      yield* registryEffects(registryResultEffects(event, state, nowMs, env.schedule), env);
      return undefined;
    }
  }
}

/** The proposal's status, locked, and whether its personal data was erased. */
function* proposalState(
  key: string,
  nu: number | string | null,
  env: EffectsEnv,
): EffectProgram<{ status: ProposalStatus | null; erased: boolean }> {
  const { statuses } = env;
  if (statuses?.has(key))
    return { status: statuses.get(key) as ProposalStatus | null, erased: env.erased?.has(key) ?? false };
  const [row] = (yield run(LOCKING(env.dialect).proposalStatus, [nu])) as {
    status: ProposalStatus;
    personal_erased_at: unknown;
  }[];
  return { status: row?.status ?? null, erased: row !== undefined && row.personal_erased_at !== null };
}

function* lifecycleEffects(event: EventFacts, env: EffectsEnv): EffectProgram<boolean> {
  const input = lifecycleInput(event);
  if (!input.move) {
    const skip = lifecycleSkipLog(event, input);
    if (skip !== null) env.logger.warn(skip.fields, skip.message);
    return false;
  }
  const { dialect, statuses } = env;
  const key = String(input.nu);
  const nu = nuValue(dialect, input.nu);
  const { status: current, erased } = yield* proposalState(key, nu, env);
  const t = transition(current, input.evento);
  const d = input.data;
  const values = [nu, event.id, t.evento, t.from, t.to, t.applied, t.reason, env.now.toISOString()];
  const all = [...values, d.uuid, d.nu_cpf, d.nu_cnpj_conveniada, d.vl_emprestimo, d.no_conveniada, t.stage];
  let recorded: boolean;
  if (dialect.writingWith) {
    recorded = (yield run(t.from === null ? SQL.pgCreate : SQL.pgMove, all)).length > 0;
  } else {
    recorded = (yield run(SQL.record, values)).length > 0;
    if (recorded) yield run(t.from === null ? SQL.create : SQL.move, all);
  }
  statuses?.set(key, recorded && t.applied ? t.to : t.from);
  return erased;
}

/**
 * Starts tracking a registration, its first poll queued in the same transaction; one already
 * tracked only gets its missing fields filled. Returns whether it was new.
 */
export function* startTracking(
  e: Extract<RegistryEffect, { type: 'track' }>,
  dialect: Dialect,
  now: string,
): EffectProgram<boolean> {
  const nu = nuValue(dialect, e.nuProposta);
  const values = [e.requestId, e.correlationId, nu, e.status, e.via, e.nextPollAt, now];
  if ((yield run(SQL.track, values)).length === 0) {
    yield run(SQL.fill, [e.correlationId, nu, now, e.requestId]);
    return false;
  }
  if (e.nextPollAt !== null) yield { firstPoll: { requestId: e.requestId, at: new Date(e.nextPollAt) } };
  return true;
}

function* registryEffects(effects: readonly RegistryEffect[], env: EffectsEnv): EffectProgram {
  const now = env.now.toISOString();
  for (const e of effects) {
    switch (e.type) {
      case 'track':
        yield* startTracking(e, env.dialect, now);
        break;
      case 'fill':
        yield run(SQL.fill, [e.correlationId, nuValue(env.dialect, e.nuProposta), now, e.requestId]);
        break;
      case 'set_status':
        yield run(SQL.setStatus, [e.status, now, e.requestId]);
        break;
      case 'set_final':
        yield run(SQL.setFinal, [e.status, e.source, e.body, e.eventId, now, e.requestId]);
        break;
      case 'log':
        env.logger[e.level](e.fields, e.message);
        break;
    }
  }
}
