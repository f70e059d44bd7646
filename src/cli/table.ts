/** Renders rows as a plain-text table for people; `--json` is for scripts. */
export function renderTable(columns: readonly string[], rows: readonly Record<string, unknown>[]): string {
  if (rows.length === 0) return '(no rows)';
  const cell = (v: unknown): string => {
    if (v === null || v === undefined) return '';
    const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
    // One line per row, whatever the data holds.
    return s.replace(/[\r\n\t]+/g, ' ');
  };
  const cells = rows.map((r) => columns.map((c) => cell(r[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => (row[i] ?? '').length)));
  const line = (values: readonly string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(columns), line(widths.map((w) => '-'.repeat(w))), ...cells.map(line)].join('\n');
}
