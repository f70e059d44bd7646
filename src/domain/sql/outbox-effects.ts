import type {
  AverbacaoSnapshot,
  EventEffects,
  ProcessedEvent,
  ProposalSnapshot,
} from '../forwarding/messages';
import type { ProposalStatus } from '../lifecycle';
import type { Dialect } from './log-sql';

/**
 * The outbox's read-back (contract §8), one statement and one mapping for both stores: what a
 * processed event left behind in its transaction — its transition, the proposal, the proposal's
 * latest averbação, and the registration the event names (the proposal it is tracked for, and the
 * averbação when this event finished it). store/forward-outbox.ts runs it on SQLite, synchronously,
 * once per event inside the pipeline's transaction; cluster/pg-outbox.ts runs it on PostgreSQL as a
 * named prepared statement, in the event's savepoint. domain/forwarding/messages.ts `outboxEntries`
 * then decides the messages.
 *
 * Flat columns joined to one row rather than JSON objects: the text is then the same in both
 * dialects (no `json_build_object` against `json_object`), and SQLite builds no JSON to parse again.
 * What differs is only how each driver hands a value over, named once in {@link VALUES}.
 */

/** The averbação columns a message shows, in AverbacaoSnapshot's order. */
const AVERBACAO = [
  'request_id',
  'correlation_id',
  'nu_proposta',
  'status',
  'result_source',
  'stale',
  'result_body',
  'completed_at',
  'updated_at',
] as const;

const averbacaoColumns = (alias: string) => AVERBACAO.map((c) => `${alias}.${c} AS ${alias}_${c}`).join(', ');

/**
 * $1 the event's id, $2 its registration's request id ({@link effectsParams}). Always one row. The
 * `e` row casts the values once (`bigint` and `text` read alike in both dialects), so that each
 * placeholder appears once, in order: SQLite binds them by position (store/handler-sql.ts
 * `prepareShared`). `finished`: 1 when this event gave the registration its result.
 */
export const OUTBOX_EFFECTS = `SELECT t.from_status, t.to_status, t.applied, t.reason,
  p.nu_proposta AS p_nu_proposta, p.uuid AS p_uuid, p.nu_cpf AS p_nu_cpf,
  p.nu_cnpj_conveniada AS p_nu_cnpj_conveniada, p.vl_emprestimo AS p_vl_emprestimo,
  p.no_conveniada AS p_no_conveniada, p.stage AS p_stage, p.status AS p_status,
  p.last_evento AS p_last_evento, p.created_at AS p_created_at, p.updated_at AS p_updated_at,
  ${averbacaoColumns('pa')},
  ${averbacaoColumns('ra')},
  CASE WHEN ra.result_event_id = e.event_id THEN 1 ELSE 0 END AS finished
FROM (SELECT CAST($1 AS bigint) AS event_id, CAST($2 AS text) AS request_id) AS e
LEFT JOIN proposal_transitions t ON t.event_id = e.event_id
LEFT JOIN proposals p ON p.nu_proposta = t.nu_proposta
LEFT JOIN averbacoes pa ON pa.request_id = (SELECT a.request_id FROM averbacoes a
  WHERE a.nu_proposta = p.nu_proposta ORDER BY a.created_at DESC, a.request_id LIMIT 1)
LEFT JOIN averbacoes ra ON ra.request_id = e.request_id`;

/**
 * The values of {@link OUTBOX_EFFECTS}. A life-cycle event's registration is never read back (it
 * finishes none, and names its proposal itself), so it binds none.
 */
export function effectsParams(event: ProcessedEvent): [number, string | null] {
  return [event.id, event.kind === 'event' ? null : event.request_id];
}

/** A row of {@link OUTBOX_EFFECTS}, each value as the dialect's driver hands it over. */
export interface EffectsRow {
  from_status: ProposalStatus | null;
  to_status: ProposalStatus | null;
  applied: unknown;
  reason: string | null;
  p_nu_proposta: unknown;
  p_uuid: string | null;
  p_nu_cpf: string | null;
  p_nu_cnpj_conveniada: string | null;
  p_vl_emprestimo: unknown;
  p_no_conveniada: string | null;
  p_stage: string | null;
  p_status: string | null;
  p_last_evento: string | null;
  p_created_at: unknown;
  p_updated_at: unknown;
  pa_request_id: string | null;
  ra_request_id: string | null;
  ra_nu_proposta: unknown;
  finished: number;
  [averbacaoColumn: string]: unknown;
}

/** How a value comes out of each driver, read into the shapes the messages take (SQLite's own). */
interface Values {
  /** `nu_proposta` (not null): an integer when it is one. */
  nu(value: unknown): number | string;
  /** An instant (not null): ISO-8601 text. */
  instant(value: unknown): string;
  /** A flag: 0/1. */
  flag(value: unknown): 0 | 1;
  /** An amount: a number. */
  amount(value: unknown): number | null;
}

/**
 * The dialects' differences, each in one place. SQLite hands its stored values over as they are
 * (nu_proposta an integer when numeric, instants ISO text, flags 0/1). node-postgres (its default
 * types: the kick's connection) hands nu_proposta as text, timestamptz as a Date, numeric as
 * text, a boolean as a boolean.
 */
const VALUES: Record<Dialect, Values> = {
  sqlite: {
    nu: (v) => v as number | string,
    instant: (v) => v as string,
    flag: (v) => (v === 1 ? 1 : 0),
    amount: (v) => v as number | null,
  },
  postgres: {
    nu: (v) => canonicalNu(String(v)),
    instant: (v) => (v instanceof Date ? v : new Date(v as string)).toISOString(),
    flag: (v) => (v === true || v === 1 ? 1 : 0),
    amount: (v) => (v === null ? null : Number(v)),
  },
};

/** nu_proposta is text in PostgreSQL; the domain sees numbers as numbers, as SQLite hands them over. */
export function canonicalNu(nu: string): number | string {
  return /^-?\d{1,15}$/.test(nu) && String(Number(nu)) === nu ? Number(nu) : nu;
}

/**
 * What `processed` left behind, from its {@link OUTBOX_EFFECTS} row, in the types the pure
 * `outboxEntries` takes (those SQLite stores): numeric proposal numbers as numbers, amounts as
 * numbers, instants as ISO-8601 text, flags as 0/1.
 */
export function effectsFrom(dialect: Dialect, processed: ProcessedEvent, row: EffectsRow): EventEffects {
  const v = VALUES[dialect];
  // A registry result rarely names its proposal; the tracked registration does, and puts all of
  // that registration's messages in the proposal's line (their order kept with its changes).
  const event =
    processed.nu_proposta === null && processed.request_id !== null && processed.kind !== 'event'
      ? { ...processed, nu_proposta: row.ra_nu_proposta === null ? null : v.nu(row.ra_nu_proposta) }
      : processed;
  const proposal = row.to_status === null ? null : proposalFrom(v, row);
  return {
    event,
    transition:
      row.to_status === null
        ? null
        : {
            from_status: row.from_status,
            to_status: row.to_status,
            applied: v.flag(row.applied) === 1,
            reason: row.reason as string,
          },
    proposal,
    proposalAverbacao: proposal === null || row.pa_request_id === null ? null : averbacaoFrom(v, row, PA),
    // Never for a life-cycle event: effectsParams binds it no registration.
    finishedAverbacao: row.finished === 1 ? averbacaoFrom(v, row, RA) : null,
  };
}

/** The proposal's columns, in ProposalSnapshot's order (its body shows them in this order). */
function proposalFrom(v: Values, row: EffectsRow): ProposalSnapshot | null {
  if (row.p_nu_proposta === null) return null;
  return {
    nu_proposta: v.nu(row.p_nu_proposta),
    uuid: row.p_uuid,
    nu_cpf: row.p_nu_cpf,
    nu_cnpj_conveniada: row.p_nu_cnpj_conveniada,
    vl_emprestimo: v.amount(row.p_vl_emprestimo),
    no_conveniada: row.p_no_conveniada,
    stage: row.p_stage as string,
    status: row.p_status as string,
    last_evento: row.p_last_evento,
    created_at: v.instant(row.p_created_at),
    updated_at: v.instant(row.p_updated_at),
  };
}

/** An averbação's column names in the row, under one alias (computed once, not per row). */
type Columns = Record<(typeof AVERBACAO)[number], string>;
const columnsOf = (alias: string) =>
  Object.fromEntries(AVERBACAO.map((c) => [c, `${alias}_${c}`])) as Columns;
const PA = columnsOf('pa');
const RA = columnsOf('ra');

function averbacaoFrom(v: Values, row: EffectsRow, c: Columns): AverbacaoSnapshot {
  const nu = row[c.nu_proposta];
  const completed = row[c.completed_at];
  return {
    request_id: row[c.request_id] as string,
    correlation_id: row[c.correlation_id] as string | null,
    nu_proposta: nu === null ? null : v.nu(nu),
    status: row[c.status] as string,
    result_source: row[c.result_source] as string | null,
    stale: v.flag(row[c.stale]),
    result_body: row[c.result_body] as string | null,
    completed_at: completed === null ? null : v.instant(completed),
    updated_at: v.instant(row[c.updated_at]),
  };
}
