import type { JsonLeaf, ProposalKey } from '../console';
import { INTEGER_TEXT, logNuProposta } from '../log-rows';
import { RETENTION_BATCH } from '../retention';

/**
 * What a store's SQL does its own way, as one value per store (issue 33; the pattern of pg-boss's
 * `Dialect`: a backend is one object of primitives, and the code that runs on it, src/core/, is
 * written once and asks the object, never which store it is on). {@link sqliteDialect} and
 * {@link postgresDialect} are the two; {@link StoreQuery.dialect} carries one. A third store supplies
 * every member, or the type checker refuses it.
 *
 * Each member is a primitive (a piece of statement text, a value as the store keeps it) or a
 * capability the store has or lacks, named for what it is, not for the store; no code compares a
 * dialect or its {@link Dialect.name}.
 */
export interface Dialect {
  /** For logs and test names only: nothing branches on it. */
  readonly name: 'sqlite' | 'postgres';

  /**
   * A placeholder (`$3`) read as an instant where the store cannot infer it (PostgreSQL outside a
   * comparison with a timestamptz column: arithmetic, a SELECT list, COALESCE); SQLite keeps
   * instants as ISO-8601 text and compares them as text.
   */
  instant(placeholder: string): string;
  /**
   * `column` is one of a list of ids bound as one value ({@link idList}): PostgreSQL's array,
   * SQLite's JSON array (it has no array type); either way one statement whatever the count.
   */
  inIds(column: string, placeholder: string): string;
  /** The value {@link inIds} binds for `ids`. */
  idList(ids: readonly number[]): unknown;
  /** A list of names bound as one value, as a table `n(name, ord)` in the order given. */
  readonly names: { table(placeholder: string): string; param(names: readonly string[]): unknown };
  /**
   * A batch of rows in a statement written once. PostgreSQL takes the whole batch as one array per
   * column (`unnest`: one statement per batch); SQLite runs the statement once per row, its values
   * bound in order (a prepared statement run again costs about a microsecond there, its
   * `UPDATE … FROM` about forty).
   */
  batch(columns: readonly BatchColumn[]): Batch;
  /** The parameters of each run of a {@link batch} statement: one run (PostgreSQL), one per row (SQLite). */
  batchParams<T>(rows: readonly T[], values: (row: T) => unknown[]): unknown[][];
  /** Text as the store can keep it: PostgreSQL's text holds no NUL (they are dropped). */
  text(value: string | null): string | null;
  /** A body (an event's) as the store keeps it: SQLite's TEXT, PostgreSQL's bytea. */
  body(text: string): unknown;

  /**
   * `column` in SQLite's order of text (by bytes): SQLite's default; PostgreSQL's default collation
   * (the locale's) orders otherwise, and SQLite has no collation named "C".
   */
  bytewise(column: string): string;
  /** `column` as an expression no index serves (SQLite's `+`: keeps another index driving). */
  unindexed(column: string): string;
  /** The UTC hour of an instant column, as text (`2026-11-21T13`). */
  utcHour(column: string): string;
  /**
   * One leaf of the console's JSON match on an event's body (`e.body`), `?` standing for each of
   * `values` in order. A body that is not JSON text matches no leaf instead of failing the query.
   */
  jsonLeaf(leaf: JsonLeaf): { condition: string; values: unknown[] };
  /**
   * The keys that order proposals by `nu_proposta` as SQLite's column does (integers by value
   * before text by bytes), and a keyset bound `(updated_at, keys…)` on them, numbered from `$first`.
   */
  readonly proposalOrder: {
    readonly keys: readonly string[];
    bound(key: ProposalKey, first: number): { sql: string; params: unknown[] };
  };

  /** `nu_proposta` as the store keeps it (a value to bind). */
  storedNu(nu: number | string): number | string;
  /** A row's `nu_proposta` as the SQLite log holds it (an integer as a number), from the store's. */
  logNu(nu: number | string | null): number | string | null;
  /** How values come out of the store's driver without the log's types (the turn's connection). */
  readonly raw: RawValues;

  /** A row lock for the rows a SELECT reads (`' FOR …'`), or nothing where a write holds them all. */
  rowLock(clause: RowLock): string;
  /**
   * The statements that take `key` for the rest of the transaction, waiting up to `wait` (then
   * failing as busy); none where a write transaction is alone already.
   */
  transactionLock(key: bigint, wait: string): readonly { text: string; params: readonly unknown[] }[];
  /** The column that orders averbações as they were tracked (the console's keyset). */
  readonly trackingOrder: string;

  /**
   * Whether ids follow arrival (`events`, `deliveries`): then a time range is an id range, and a
   * retention walk ends at the first row received after its cutoff. Not where rows are written in
   * another order than they arrived (PostgreSQL: the order in which relay batches commit).
   */
  readonly idsFollowArrival: boolean;
  /**
   * Whether a WITH may hold a statement that writes, its foreign keys checked at the statement's end
   * (one statement, one round trip, for a transition and its proposal).
   */
  readonly writingWith: boolean;
  /** Whether replicas relay their spools to this store (`relay_spools`). */
  readonly relaysSpools: boolean;
  /** Rows a retention batch looks at (domain/retention.ts). */
  readonly retentionBatch: { readonly bodies: number; readonly messages: number; readonly proposals: number };
}

/** The row locks src/core/ takes. */
export type RowLock = 'UPDATE' | 'UPDATE OF d' | 'UPDATE SKIP LOCKED' | 'NO KEY UPDATE SKIP LOCKED';

/** A column of a {@link Dialect.batch}: its name and its PostgreSQL type (the array `unnest` reads). */
export type BatchColumn = readonly [name: string, pgType: string, ...rest: unknown[]];

/** A batch of rows in a statement: each column's value, and where the rows come from. */
export interface Batch {
  /** Column `name`'s value for the row. */
  col(name: string): string;
  /** The rows' table after the values (`FROM …`), or nothing where the statement runs once per row. */
  from: string;
}

/** A value as the driver hands it over, read into the shapes the messages take (SQLite's own). */
export interface RawValues {
  /** `nu_proposta` (not null): an integer when it is one. */
  nu(value: unknown): number | string;
  /** An instant (not null): ISO-8601 text. */
  instant(value: unknown): string;
  /** A flag: 0/1. */
  flag(value: unknown): 0 | 1;
  /** An amount: a number. */
  amount(value: unknown): number | null;
}

const integerText = new RegExp(INTEGER_TEXT);

export const sqliteDialect: Dialect = {
  name: 'sqlite',
  instant: (placeholder) => placeholder,
  inIds: (column, placeholder) => `${column} IN (SELECT value FROM json_each(${placeholder}))`,
  idList: (ids) => JSON.stringify(ids),
  names: {
    table: (p) => `(SELECT value AS name, key AS ord FROM json_each(${p})) AS n`,
    param: (names) => JSON.stringify(names),
  },
  batch: (columns) => {
    const at = new Map(columns.map(([name], i) => [name, `$${i + 1}`]));
    return { col: (name) => at.get(name)!, from: '' };
  },
  batchParams: (rows, values) => rows.map(values),
  text: (value) => value,
  body: (text) => text,
  bytewise: (column) => column,
  unindexed: (column) => `+${column}`,
  utcHour: (column) => `substr(${column}, 1, 13)`,
  // json_extract throws on a BLOB (a quarantined delivery's body) or invalid JSON, and gives null
  // and booleans as SQL values (json_type tells them).
  jsonLeaf: (leaf) => {
    const json = `CASE WHEN typeof(e.body) = 'text' AND json_valid(e.body) THEN`;
    return leaf.value === null || typeof leaf.value === 'boolean'
      ? { condition: `${json} json_type(e.body, ?) END = ?`, values: [leaf.path, String(leaf.value)] }
      : { condition: `${json} json_extract(e.body, ?) END = ?`, values: [leaf.path, leaf.value] };
  },
  proposalOrder: {
    keys: ['nu_proposta'],
    bound: (key, first) => ({ sql: `($${first}, $${first + 1})`, params: [key.updated_at, key.nu_proposta] }),
  },
  // INTEGER affinity: a number stays a number (its lists sort integers before text).
  storedNu: (nu) => nu,
  logNu: (nu) => nu,
  raw: {
    nu: (v) => v as number | string,
    instant: (v) => v as string,
    flag: (v) => (v === 1 ? 1 : 0),
    amount: (v) => v as number | null,
  },
  // A write transaction holds the file's one write lock.
  rowLock: () => '',
  transactionLock: () => [],
  trackingOrder: 'rowid',
  idsFollowArrival: true,
  writingWith: false,
  relaysSpools: false,
  retentionBatch: RETENTION_BATCH.sqlite,
};

export const postgresDialect: Dialect = {
  name: 'postgres',
  instant: (placeholder) => `${placeholder}::timestamptz`,
  inIds: (column, placeholder) => `${column} = ANY(${placeholder}::bigint[])`,
  idList: (ids) => [...ids],
  names: {
    table: (p) => `unnest(${p}::text[]) WITH ORDINALITY AS n(name, ord)`,
    param: (names) => [...names],
  },
  batch: (columns) => ({
    col: (name) => `u.${name}`,
    from: `FROM unnest(${columns.map(([, type], i) => `$${i + 1}::${type}[]`).join(', ')})
        AS u(${columns.map(([name]) => name).join(', ')})`,
  }),
  batchParams: (rows, values) => {
    if (rows.length === 0) return [];
    const columns: unknown[][] = [];
    for (const row of rows) values(row).forEach((v, i) => (columns[i] ??= []).push(v));
    return [columns];
  },
  text: (value) => (value === null ? null : value.replaceAll('\u0000', '')),
  body: (text) => Buffer.from(text, 'utf8'),
  bytewise: (column) => `${column} COLLATE "C"`,
  // No `+` on text, and no need of one.
  unindexed: (column) => column,
  utcHour: (column) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24')`,
  // jsonb at the path of keys (`console_body_json`, migrations-pg/0004: null for a body that is
  // not UTF-8 JSON).
  jsonLeaf: (leaf) => ({
    condition: 'console_body_json(e.body) #> ?::text[] = ?::jsonb',
    values: [[...leaf.keys], JSON.stringify(leaf.value)],
  }),
  // Text, sorted on keys that give SQLite's order: text or not, an integer's length, the bytes.
  proposalOrder: {
    keys: [
      `(nu_proposta !~ '${INTEGER_TEXT}')`,
      `(CASE WHEN nu_proposta ~ '${INTEGER_TEXT}' THEN length(nu_proposta) ELSE 0 END)`,
      'nu_proposta COLLATE "C"',
    ],
    bound: (key, first) => {
      const nu = String(key.nu_proposta);
      const text = !integerText.test(nu);
      const [a, b, c, d] = [first, first + 1, first + 2, first + 3];
      return {
        sql: `($${a}::timestamptz, $${b}::boolean, $${c}::int, $${d}::text)`,
        params: [key.updated_at, text, text ? 0 : nu.length, nu],
      };
    },
  },
  // Text: an integer in its canonical decimal.
  storedNu: (nu) => String(nu),
  logNu: (nu) => (typeof nu === 'string' ? logNuProposta(nu) : nu),
  // node-postgres's default types: text, a Date, numeric as text, a boolean.
  raw: {
    nu: (v) => canonicalNu(String(v)),
    instant: (v) => (v instanceof Date ? v : new Date(v as string)).toISOString(),
    flag: (v) => (v === true || v === 1 ? 1 : 0),
    amount: (v) => (v === null ? null : Number(v)),
  },
  rowLock: (clause) => ` FOR ${clause}`,
  transactionLock: (key, wait) => [
    { text: `SET LOCAL lock_timeout = '${wait}'`, params: [] },
    { text: 'SELECT pg_advisory_xact_lock($1)', params: [key.toString()] },
  ],
  // No rowid: a sequence column (migrations-pg).
  trackingOrder: 'seq',
  // `events.id` is the order in which relay batches committed: a spool relayed after an outage (or
  // a SQLite history moved to cluster mode) puts old `received_at` behind new ids.
  idsFollowArrival: false,
  writingWith: true,
  relaysSpools: true,
  retentionBatch: RETENTION_BATCH.postgres,
};

/** `build`'s value for each dialect, built once (statements a store prepares once, by identity). */
export function perDialect<T>(build: (dialect: Dialect) => T): (dialect: Dialect) => T {
  const built = new WeakMap<Dialect, T>();
  return (dialect) => {
    let value = built.get(dialect);
    if (value === undefined) {
      value = build(dialect);
      built.set(dialect, value);
    }
    return value;
  };
}

/** nu_proposta is text in PostgreSQL; the domain sees numbers as numbers, as SQLite hands them over. */
export function canonicalNu(nu: string): number | string {
  return /^-?\d{1,15}$/.test(nu) && String(Number(nu)) === nu ? Number(nu) : nu;
}
