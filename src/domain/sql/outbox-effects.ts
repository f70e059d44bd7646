import type {
  AverbacaoSnapshot,
  EventEffects,
  ProcessedEvent,
  ProposalSnapshot,
} from '../forwarding/messages';
import type { ProposalStatus } from '../lifecycle';
import type { Dialect, RawValues } from './dialect';

/**
 * The outbox's read-back (contract §8), one statement and one mapping for both stores: what a
 * processed event left behind in its transaction — its transition, the proposal, the proposal's
 * latest averbação, and the registration the event names (the proposal it is tracked for, and the
 * averbação when this event finished it). sqlite/sqlite-outbox.ts runs it on SQLite, synchronously,
 * once per event inside the pipeline's transaction; postgres/pg-outbox.ts runs it on PostgreSQL as a
 * named prepared statement, in the event's savepoint. domain/forwarding/messages.ts `outboxEntries`
 * then decides the messages.
 *
 * Flat columns joined to one row rather than JSON objects: the text is then the same in both
 * dialects (no `json_build_object` against `json_object`), and SQLite builds no JSON to parse again.
 * What differs is only how each driver hands a value over, named once in the dialect (`raw`).
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

const TRANSITION = ['from_status', 'to_status', 'applied', 'reason'] as const;

const PROPOSAL = [
  'nu_proposta',
  'uuid',
  'nu_cpf',
  'nu_cnpj_conveniada',
  'vl_emprestimo',
  'no_conveniada',
  'stage',
  'status',
  'last_evento',
  'created_at',
  'updated_at',
] as const;

/**
 * The row's columns, in order: the transition (`t`), the proposal (`p`), its latest averbação
 * (`pa`), the event's registration (`ra`), and whether this event finished it; each named here
 * only to find its index. The row is read as an array (SQLite's `raw`, node-postgres's `rowMode:
 * 'array'`): on SQLite, read as an object of 34 keys built per event, the one statement cost what
 * the five lookups it replaced did (about 12 µs an event); as an array, about 8.
 */
const COLUMNS = [
  ...TRANSITION.map((c) => [`t.${c}`, `t_${c}`] as const),
  ...PROPOSAL.map((c) => [`p.${c}`, `p_${c}`] as const),
  ...AVERBACAO.map((c) => [`pa.${c}`, `pa_${c}`] as const),
  ...AVERBACAO.map((c) => [`ra.${c}`, `ra_${c}`] as const),
  ['CASE WHEN ra.result_event_id = e.event_id THEN 1 ELSE 0 END', 'finished'] as const,
];

/** A column's index in the row, by its name (`p_uuid`, `ra_stale`). */
const C: Record<string, number> = Object.fromEntries(COLUMNS.map(([, name], i) => [name, i]));

/**
 * $1 the event's id, $2 its registration's request id ({@link effectsParams}). Always one row. The
 * `e` row casts the values once (`bigint` and `text` read alike in both dialects), so that each
 * placeholder appears once, in order: SQLite binds them by position (sqlite/sqlite-prepare.ts
 * `prepareShared`).
 */
export const OUTBOX_EFFECTS = `SELECT ${COLUMNS.map(([expression]) => expression).join(', ')}
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

/** A row of {@link OUTBOX_EFFECTS} as an array, each value as the dialect's driver hands it over. */
export type EffectsRow = readonly unknown[];

/**
 * What `processed` left behind, from its {@link OUTBOX_EFFECTS} row, in the types the pure
 * `outboxEntries` takes (those SQLite stores): numeric proposal numbers as numbers, amounts as
 * numbers, instants as ISO-8601 text, flags as 0/1.
 */
export function effectsFrom(dialect: Dialect, processed: ProcessedEvent, row: EffectsRow): EventEffects {
  const v = dialect.raw;
  // A registry result rarely names its proposal; the tracked registration does, and puts all of
  // that registration's messages in the proposal's line (their order kept with its changes). An
  // event without a registration (a life-cycle event, a result without request_id) reads none
  // back: effectsParams binds it none, so `tracked` is null.
  const tracked = row[RA.nu_proposta];
  const event =
    processed.nu_proposta === null && tracked !== null
      ? { ...processed, nu_proposta: v.nu(tracked) }
      : processed;
  const toStatus = row[T.to_status] as ProposalStatus | null;
  // The proposal is joined on the transition, and its latest averbação on the proposal: without
  // one, the next is null in the row.
  const proposal = proposalFrom(v, row);
  return {
    event,
    transition:
      toStatus === null
        ? null
        : {
            from_status: row[T.from_status] as ProposalStatus | null,
            to_status: toStatus,
            applied: v.flag(row[T.applied]) === 1,
            reason: row[T.reason] as string,
          },
    proposal,
    proposalAverbacao: averbacaoFrom(v, row, PA),
    // Never for a life-cycle event: effectsParams binds it no registration.
    finishedAverbacao: row[FINISHED] === 1 ? averbacaoFrom(v, row, RA) : null,
  };
}

/** The proposal's columns, in ProposalSnapshot's order (its body shows them in this order). */
function proposalFrom(v: RawValues, row: EffectsRow): ProposalSnapshot | null {
  const nu = row[P.nu_proposta];
  if (nu === null) return null;
  return {
    nu_proposta: v.nu(nu),
    uuid: row[P.uuid] as string | null,
    nu_cpf: row[P.nu_cpf] as string | null,
    nu_cnpj_conveniada: row[P.nu_cnpj_conveniada] as string | null,
    vl_emprestimo: v.amount(row[P.vl_emprestimo]),
    no_conveniada: row[P.no_conveniada] as string | null,
    stage: row[P.stage] as string,
    status: row[P.status] as string,
    last_evento: row[P.last_evento] as string | null,
    created_at: v.instant(row[P.created_at]),
    updated_at: v.instant(row[P.updated_at]),
  };
}

/** The indexes of a column family's columns under one alias (computed once, not per row). */
function indexesOf<K extends string>(alias: string, names: readonly K[]): Record<K, number> {
  return Object.fromEntries(names.map((c) => [c, C[`${alias}_${c}`]])) as Record<K, number>;
}
const T = indexesOf('t', TRANSITION);
const P = indexesOf('p', PROPOSAL);
const PA = indexesOf('pa', AVERBACAO);
const RA = indexesOf('ra', AVERBACAO);
const FINISHED = COLUMNS.length - 1;

/** An averbação of the row (null when there is none), in AverbacaoSnapshot's order. */
function averbacaoFrom(
  v: RawValues,
  row: EffectsRow,
  c: Record<(typeof AVERBACAO)[number], number>,
): AverbacaoSnapshot | null {
  const requestId = row[c.request_id] as string | null;
  if (requestId === null) return null;
  const nu = row[c.nu_proposta];
  const completed = row[c.completed_at];
  return {
    request_id: requestId,
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
