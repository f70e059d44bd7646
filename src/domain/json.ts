/**
 * Reading untrusted JSON: the few accessors every layer uses on a parsed payload. Pure and total.
 * A payload's `__proto__` or `constructor` key is data, never a lookup path, so fields are read
 * as own properties only.
 */

export type JsonObject = Record<string, unknown>;

/** A JSON object (not an array, not null). */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `obj[key]` when `obj` is an object that has `key` as its own property; otherwise undefined. */
export function own(obj: unknown, key: string): unknown {
  return isObject(obj) && Object.hasOwn(obj, key) ? obj[key] : undefined;
}

/** A string with something other than white space in it, as it is; otherwise null. */
export function nonBlankString(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value : null;
}

/** Like {@link nonBlankString}, and a finite number as its decimal text (ids sent as numbers). */
export function nonBlankText(value: unknown): string | null {
  if (Number.isFinite(value)) return String(value);
  return nonBlankString(value);
}

/** `JSON.parse` that answers `undefined` instead of throwing. */
export function parseJsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // Not JSON: the answer below.
  }
  return undefined;
}
