import { logNuProposta } from '../domain/log-rows';
import type { Dialect } from '../domain/sql/log-sql';

/**
 * What the console's statements (src/core/console-*.ts) need to know of the dialect, each in one
 * place; every other text is the same in both stores.
 */

/**
 * `column` in SQLite's order of text (by bytes): SQLite's default; PostgreSQL's default collation
 * (the locale's) orders otherwise, and SQLite has no collation named "C".
 */
export function bytewise(dialect: Dialect, column: string): string {
  return dialect === 'postgres' ? `${column} COLLATE "C"` : column;
}

/**
 * `nu_proposta` as the store keeps it: SQLite an integer or text (INTEGER affinity), PostgreSQL
 * text (an integer in its canonical decimal).
 */
export function nuParam(dialect: Dialect, nu: number | string): number | string {
  return dialect === 'postgres' ? String(nu) : nu;
}

/** A row's `nu_proposta` as the SQLite log holds it (PostgreSQL's text read back as SQLite's). */
export function logNu<T extends { nu_proposta: number | string | null }>(dialect: Dialect, row: T): T {
  if (dialect === 'sqlite' || typeof row.nu_proposta !== 'string') return row;
  return { ...row, nu_proposta: logNuProposta(row.nu_proposta) };
}

/**
 * A WHERE clause built condition by condition, `?` in each standing for its values in order,
 * numbered from `$1` (domain/sql/log-reads.ts `whereGiven`, for conditions of several values).
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

  /** `$n` of the next value (a LIMIT after the conditions). */
  next(): string {
    return `$${this.params.length + 1}`;
  }
}
