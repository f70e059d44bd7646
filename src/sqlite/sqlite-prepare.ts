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

export function handlerSqlOn(db: Db): HandlerSql {
  // A partner has a handful of statement texts; the bound only stops a runaway.
  const statement = preparedCache(256, (text): Statement => db.prepare(text));
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

/** `prepare(text)`, kept per distinct text; past `limit` texts the cache starts again (a runaway). */
export function preparedCache<S>(limit: number, prepare: (text: string) => S): (text: string) => S {
  const prepared = new Map<string, S>();
  return (text) => {
    let s = prepared.get(text);
    if (s === undefined) {
      if (prepared.size >= limit) prepared.clear();
      s = prepare(text);
      prepared.set(text, s);
    }
    return s;
  };
}

/**
 * `[a, b]` as `{ 1: a, 2: b }`, each value as SQLite can bind it: how a statement written with
 * PostgreSQL's `$1` runs on SQLite as a partner wrote it (its text is never rewritten).
 */
function numberedParams(params: readonly unknown[]): Record<string, unknown> {
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
 * One of our own `$n` statements (domain/sql/, core/) prepared on SQLite: each placeholder becomes
 * SQLite's plain `?`, bound by position with the value its number names (a `$n` used twice is bound
 * twice, a value no placeholder names is not bound, fewer values than the highest `$n` is an
 * error), so the text reads as SQLite's own statements do (the statement-plan check,
 * test/integration/query-plans, matches some by their `?`). Never
 * applied to a partner's SQL: a `$1` inside a string literal would be rewritten too. `raw`: each
 * row an array of its values, in column order (no object built per row: for a wide row read once
 * per event).
 */
export function prepareShared<R = unknown>(db: Db, text: string, options: { raw?: boolean } = {}) {
  const slots = [...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]) - 1);
  const inOrder = slots.every((n, i) => n === i);
  const statement = db.prepare<unknown[], R>(text.replace(/\$\d+/g, '?'));
  if (options.raw === true) statement.raw(true);
  const named = slots.length === 0 ? 0 : Math.max(...slots) + 1;
  const bind = (params: readonly unknown[]): unknown[] => {
    if (params.length < named)
      throw new RangeError(`a statement with $${named} was given ${params.length} values`);
    return inOrder && params.length === slots.length
      ? params.map(bindable)
      : slots.map((n) => bindable(params[n]));
  };
  return {
    /** Whether it answers rows (a SELECT, or a write with RETURNING). */
    reader: statement.reader,
    all: (params: readonly unknown[]): R[] => statement.all(...bind(params)),
    get: (params: readonly unknown[]): R | undefined => statement.get(...bind(params)),
    /** How many rows it changed. */
    run: (params: readonly unknown[]): number => statement.run(...bind(params)).changes,
  };
}
