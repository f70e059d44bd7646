import type { Statement } from 'better-sqlite3';
import type { HandlerSql } from '../domain/event-router';
import type { Db } from './database';

/**
 * A partner handler's `sql` on SQLite (domain/event-router.ts `HandlerSql`): the statement written
 * for PostgreSQL, `$1`, `$2`, … included, runs as it is. SQLite reads `$1` as a named parameter
 * called "1" and better-sqlite3 binds it from an object's key "1" (it refuses SQLite's `?NNN` with
 * positional values), so the text is never rewritten and a `$1` inside a string literal stays text.
 * Executes synchronously on `db`, inside whatever transaction the caller opened, and answers an
 * already-resolved promise.
 */

/** Distinct statement texts kept prepared; a partner has a handful, this only bounds a runaway. */
const CACHE_LIMIT = 256;

export function handlerSqlOn(db: Db): HandlerSql {
  const prepared = new Map<string, Statement>();
  const statement = (text: string): Statement => {
    let s = prepared.get(text);
    if (s === undefined) {
      if (prepared.size >= CACHE_LIMIT) prepared.clear();
      s = db.prepare(text);
      prepared.set(text, s);
    }
    return s;
  };
  return {
    query: <R>(text: string, params: readonly unknown[] = []) => {
      try {
        const s = statement(text);
        const args = params.length === 0 ? [] : [numberedParams(params)];
        const rows = s.reader ? (s.all(...args) as R[]) : (s.run(...args), []);
        return Promise.resolve({ rows });
      } catch (err) {
        return Promise.reject(err as Error);
      }
    },
  };
}

/**
 * `[a, b]` as `{ 1: a, 2: b }`, each value as SQLite can bind it: how a statement written with
 * PostgreSQL's `$1` runs on SQLite (partner handlers here, and the statements both stores share in
 * domain/sql/, after {@link sqliteNumbered}).
 */
export function numberedParams(params: readonly unknown[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  params.forEach((value, i) => {
    out[String(i + 1)] = bindable(value);
  });
  return out;
}

function bindable(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return value.toISOString();
  return value;
}

/**
 * One of our own statements written for PostgreSQL (`$1`, `$2`, …: domain/sql/) as SQLite's numbered
 * `?1`, `?2`, …, bound the same way ({@link numberedParams}). SQLite runs `$1` as it is (see above);
 * `?1` is what SQLite's own tools read, as the statement-plan check (test/integration/query-plans)
 * does. Never applied to a partner's SQL: a `$1` inside a string literal would be rewritten too.
 */
export function sqliteNumbered(text: string): string {
  return text.replace(/\$(\d+)/g, '?$1');
}

/**
 * One of our own `$n` statements (domain/sql/) as SQLite prepares it, and how its values bind. When
 * the placeholders come in order, each once (`$1 … $2 … $3`), they become SQLite's plain `?`, bound
 * by position: the text then reads as SQLite's own statements do (the statement-plan check matches
 * some by their `?`). Otherwise numbered ({@link sqliteNumbered}, {@link numberedParams}).
 */
export function sqliteShared(text: string): { sql: string; bind(params: readonly unknown[]): unknown[] } {
  const numbers = [...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]));
  if (numbers.every((n, i) => n === i + 1))
    return { sql: text.replace(/\$\d+/g, '?'), bind: (params) => params.map(bindable) };
  return {
    sql: sqliteNumbered(text),
    bind: (params) => (params.length === 0 ? [] : [numberedParams(params)]),
  };
}

/** The rows of a statement shared with PostgreSQL (domain/sql/) and its values, on SQLite. */
export function sqliteRows<R>(db: Db, q: { text: string; params: readonly unknown[] }): R[] {
  const s = sqliteShared(q.text);
  return db.prepare<unknown[], R>(s.sql).all(...s.bind(q.params));
}
