/**
 * Durations as people write them in settings and filters: a whole number and one unit, `m`
 * (minutes), `h` (hours) or `d` (days) — `90m`, `36h`, `5d`, the grammar of `STUCK_AFTER`. Pure.
 */

const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION = /^(\d{1,7})([mhd])$/i;

/** `90m`, `36h`, `5d` → milliseconds; null for anything else (a bare number has no unit: refused). */
export function parseDuration(text: string): number | null {
  const m = DURATION.exec(text.trim());
  if (!m?.[1] || !m[2]) return null;
  const ms = Number(m[1]) * UNIT_MS[m[2].toLowerCase() as keyof typeof UNIT_MS];
  return ms > 0 ? ms : null;
}

/** Milliseconds in the largest unit that writes them exactly (`36h`, `2d`, `90m`), rounded to minutes. */
export function formatDuration(ms: number): string {
  if (ms > 0 && ms % UNIT_MS.d === 0) return `${ms / UNIT_MS.d}d`;
  if (ms > 0 && ms % UNIT_MS.h === 0) return `${ms / UNIT_MS.h}h`;
  return `${Math.round(ms / UNIT_MS.m)}m`;
}

/** `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h` (negative ages count as 0). */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 48) return min % 60 === 0 ? `${h} h` : `${h} h ${min % 60} min`;
  const d = Math.floor(h / 24);
  return h % 24 === 0 ? `${d} d` : `${d} d ${h % 24} h`;
}
