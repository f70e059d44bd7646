import type { Dialect } from '../domain/sql/dialect';

/** A row's `nu_proposta` as the SQLite log holds it ({@link Dialect.logNu}). */
export function logNu<T extends { nu_proposta: number | string | null }>(dialect: Dialect, row: T): T {
  const nu = dialect.logNu(row.nu_proposta);
  return nu === row.nu_proposta ? row : { ...row, nu_proposta: nu };
}

/**
 * A WHERE clause built condition by condition, `?` in each standing for its values in order,
 * numbered from `$1` (domain/sql/read-statements.ts `whereGiven`, for conditions of several values).
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
