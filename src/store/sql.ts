/** Builds `WHERE a = ? AND b = ?` from the conditions whose value is given. */
export function whereClause(conditions: readonly [string, string | number | undefined][]): {
  sql: string;
  params: (string | number)[];
} {
  const parts: string[] = [];
  const params: (string | number)[] = [];
  for (const [sql, value] of conditions) {
    if (value === undefined || value === '') continue;
    parts.push(sql);
    params.push(value);
  }
  return { sql: parts.length ? `WHERE ${parts.join(' AND ')}` : '', params };
}

export { clampLimit } from '../domain/list-limit';
