import { isObject } from '../../domain/json';
import type { JsonLeaf } from '../../domain/console';

/**
 * The events page's partial-JSON match: `{"dados":{"no_conveniada":"ACME"}}` matches the events
 * whose body has `"ACME"` at `dados.no_conveniada`, whatever else it holds. Each leaf (a string,
 * number, boolean or null under a path of object keys) becomes one equality on an SQLite JSON path.
 * Bounded: at most {@link MAX_LEAVES} leaves, {@link MAX_DEPTH} levels, {@link MAX_JSON_CHARS}
 * characters. Pure.
 */

export const MAX_JSON_CHARS = 2000;
export const MAX_LEAVES = 8;
export const MAX_DEPTH = 8;

/**
 * Leaves' paths are SQLite JSON paths with every key quoted (`$."dados"."no_conveniada"`), and the
 * same keys as a list for PostgreSQL (`['dados', 'no_conveniada']`).
 */
export type JsonFilterResult = { ok: true; leaves: JsonLeaf[] } | { ok: false; message: string };

const fail = (message: string): JsonFilterResult => ({ ok: false, message });

/** Reads the `json` filter; the message of a refusal says what to write instead. */
export function parseJsonFilter(text: string): JsonFilterResult {
  if (text.length > MAX_JSON_CHARS) return fail(`json: at most ${MAX_JSON_CHARS} characters`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return fail('json: not valid JSON (write an object such as {"dados":{"no_conveniada":"ACME"}})');
  }
  if (!isObject(value) || Object.keys(value).length === 0)
    return fail('json: expected a non-empty object such as {"dados":{"no_conveniada":"ACME"}}');
  const leaves: JsonLeaf[] = [];
  const problem = collect(value, '$', 1, leaves);
  if (problem !== null) return fail(problem);
  if (leaves.length > MAX_LEAVES) return fail(`json: at most ${MAX_LEAVES} values to match`);
  return { ok: true, leaves };
}

/** Adds the leaves under `obj` to `out`; returns what is wrong, or null. */
function collect(
  obj: Record<string, unknown>,
  path: string,
  depth: number,
  out: JsonLeaf[],
  keys: readonly string[] = [],
): string | null {
  if (depth > MAX_DEPTH) return `json: at most ${MAX_DEPTH} levels deep`;
  for (const [key, value] of Object.entries(obj)) {
    // SQLite's JSON path has no escape inside a quoted key.
    // eslint-disable-next-line no-control-regex -- control characters in a key cannot be matched either
    if (key === '' || /["\\\u0000-\u001f]/.test(key))
      return `json: the key ${JSON.stringify(key)} cannot be matched`;
    const here = `${path}."${key}"`;
    const hereKeys = [...keys, key];
    if (Array.isArray(value))
      return `json: arrays cannot be matched (at ${JSON.stringify(key)}): give keys down to one value`;
    if (isObject(value)) {
      if (Object.keys(value).length === 0) return `json: empty object at ${JSON.stringify(key)}`;
      const problem = collect(value, here, depth + 1, out, hereKeys);
      if (problem !== null) return problem;
    } else if (typeof value === 'number' && !Number.isFinite(value)) {
      return `json: the number at ${JSON.stringify(key)} is out of range`;
    } else {
      out.push({ path: here, keys: hereKeys, value: value as string | number | boolean | null });
    }
    if (out.length > MAX_LEAVES) return `json: at most ${MAX_LEAVES} values to match`;
  }
  return null;
}
