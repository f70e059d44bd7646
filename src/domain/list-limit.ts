/**
 * How many rows a listing of the log returns (`events`, `deliveries`, `averbacoes`, whichever store
 * holds it): `limit` when given, within 1–10 000.
 * @default 50
 */
export function clampLimit(limit: number | undefined, fallback = 50): number {
  return Math.max(1, Math.min(limit ?? fallback, 10000));
}
