/**
 * The log's reads for the commands, the admin API and the console, one text for both stores:
 * core/store-reads.ts and core/console-reads.ts run these through StoreSql (and the SQLite
 * repositories of sqlite/store.ts, for the tests and the demo), with PostgreSQL's `$n` placeholders
 * (see registry-poll-statements.ts for how SQLite runs them). Each store binds its own
 * representation of a value (`nu_proposta` an integer or text in SQLite, text in PostgreSQL; a flag
 * 0/1 or a boolean), and PostgreSQL's driver turns what it reads into the SQLite log's shapes
 * (postgres/pg-statements.ts STORE_TYPES). The column lists are the SQLite tables' own, in their order.
 */

/** A statement and its values, in the order of its `$1`, `$2`, …. */
export interface SharedQuery {
  text: string;
  params: unknown[];
}

/**
 * A WHERE clause built condition by condition, `?` in each standing for its values in order,
 * numbered from `$1`.
 */
export class Conditions {
  readonly parts: string[] = [];
  readonly params: unknown[] = [];

  /** `condition` when `when` holds (default: always). */
  add(condition: string, values: readonly unknown[] = [], when = true): this {
    if (!when) return this;
    let text = condition;
    for (const value of values) {
      this.params.push(value);
      text = text.replace('?', `$${this.params.length}`);
    }
    this.parts.push(text);
    return this;
  }

  /** `condition` with its one value when the value is given (undefined or '' is none). */
  given(condition: string, value: unknown): this {
    return this.add(condition, [value], value !== undefined && value !== '');
  }

  get where(): string {
    return this.parts.length > 0 ? `WHERE ${this.parts.join(' AND ')}` : '';
  }

  /** `select` with these conditions, in `orderBy` order, at most `limit` rows. */
  limited(select: string, orderBy: string, limit: number): SharedQuery {
    return {
      text: `${select} ${this.where} ORDER BY ${orderBy} LIMIT $${this.params.length + 1}`,
      params: [...this.params, limit],
    };
  }
}

/**
 * `($3, $4, $5)`: one placeholder per value, numbered from `$first`, the list `IN` takes in both
 * dialects (PostgreSQL's arrays have no SQLite twin). Empty: `(NULL)`, which matches nothing, where
 * PostgreSQL refuses `IN ()`.
 */
export function inList(count: number, first: number): string {
  if (count === 0) return '(NULL)';
  return `(${Array.from({ length: count }, (_, i) => `$${first + i}`).join(', ')})`;
}

/** The events listing's filter, as the admin API and the commands give it. */
export interface EventFilter {
  status?: string | undefined;
  evento?: string | undefined;
  nuProposta?: number | string | undefined;
  kind?: string | undefined;
  /** Rows with an id below this one (paging backwards from the newest). */
  beforeId?: number | undefined;
  limit?: number | undefined;
}

/** What the `events` listings show of an event (no body). */
export const EVENT_COLUMNS = `id, dedup_key, webhook_id, kind, evento, nu_proposta, request_id, registry_status, tentativa,
  received_at, body_bytes, status, attempts, next_attempt_at, last_error, processed_at, duplicates, last_duplicate_at`;

/**
 * `events`: newest first by id (the order events were stored), those below `beforeId` when given
 * (paging backwards). Conditions in this order, so that SQLite's plans read as the statement-plan
 * check (test/integration/query-plans) expects.
 */
export function eventsQuery(f: EventFilter & { limit: number }): SharedQuery {
  return new Conditions()
    .given('status = ?', f.status)
    .given('evento = ?', f.evento)
    .given('kind = ?', f.kind)
    .given('nu_proposta = ?', f.nuProposta)
    .given('id < ?', f.beforeId)
    .limited(`SELECT ${EVENT_COLUMNS} FROM events`, 'id DESC', f.limit);
}

/** One proposal's row ($1 nu_proposta). */
export const PROPOSAL = `SELECT nu_proposta, uuid, nu_cpf, nu_cnpj_conveniada, vl_emprestimo, no_conveniada, stage,
  status, last_evento, first_event_id, last_event_id, created_at, updated_at
FROM proposals WHERE nu_proposta = $1`;

/** Every event of a proposal ($1 nu_proposta), processed or not, with its transition when it has one. */
export const TIMELINE = `SELECT e.id AS event_id, e.received_at, e.evento, e.status AS event_status, e.attempts,
  e.duplicates, t.from_status, t.to_status, t.applied, t.reason, e.last_error
FROM events e LEFT JOIN proposal_transitions t ON t.event_id = e.id
WHERE e.nu_proposta = $1
ORDER BY e.id`;

export const AVERBACAO_COLUMNS = `request_id, correlation_id, nu_proposta, status, result_source, tracked_via, poll_attempts,
  next_poll_at, last_poll_at, last_poll_outcome, stale, result_body, result_event_id, created_at, updated_at,
  completed_at`;

/** One tracked registration ($1 request_id). */
export const AVERBACAO = `SELECT ${AVERBACAO_COLUMNS} FROM averbacoes WHERE request_id = $1`;

/** The averbações listing's filter, as the admin API and the commands give it. */
export interface AverbacaoFilter {
  status?: string | undefined;
  stale?: boolean | undefined;
  nuProposta?: number | string | undefined;
  limit?: number | undefined;
}

/** `averbacoes`: tracked registrations, the most recently created first. */
export function averbacoesQuery(f: AverbacaoFilter & { limit: number }): SharedQuery {
  return new Conditions()
    .given('status = ?', f.status)
    .given('stale = ?', f.stale)
    .given('nu_proposta = ?', f.nuProposta)
    .limited(`SELECT ${AVERBACAO_COLUMNS} FROM averbacoes`, 'created_at DESC', f.limit);
}
