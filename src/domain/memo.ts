/**
 * A pure function's results kept by key, at most `max` of them: the first `max` keys asked are kept,
 * and a key past those is computed again each time it is asked. For a function of a few keys (the
 * configured secrets) whose computing costs, where a caller given many distinct keys (tests) must
 * not grow memory without end. Pure: no clock, no I/O.
 */
export interface BoundedMemo<V> {
  get(key: string): V;
  /** How many results are kept (never more than `max`). */
  readonly size: number;
}

export function boundedMemo<V extends NonNullable<unknown>>(
  max: number,
  compute: (key: string) => V,
): BoundedMemo<V> {
  const kept = new Map<string, V>();
  return {
    get(key: string): V {
      const hit = kept.get(key);
      if (hit !== undefined) return hit;
      const value = compute(key);
      if (kept.size < max) kept.set(key, value);
      return value;
    },
    get size() {
      return kept.size;
    },
  };
}
