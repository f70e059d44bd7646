// Brazil has had no daylight saving time since 2019: Brasília time is UTC−03:00 all year.
const BRT_OFFSET_MS = 3 * 60 * 60 * 1000;

/** ISO 8601 in Brasília time with its offset, as the service writes it: `2026-11-21T10:00:00.000-03:00`. */
export function isoBrasilia(date: Date): string {
  return new Date(date.getTime() - BRT_OFFSET_MS).toISOString().replace('Z', '-03:00');
}
