/** URLs of the service: the ones a partner configures, and the endpoints' ones built under `{base_url}`. */

export type QueryValue =
  string | number | boolean | null | undefined | readonly (string | number | boolean)[];
export type Query = Readonly<Record<string, QueryValue>>;

/** `value` as an http(s) URL, or null (not a string, not a URL, another scheme). */
export function parseHttpUrl(value: unknown): URL | null {
  if (typeof value !== 'string') return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  return url.protocol === 'http:' || url.protocol === 'https:' ? url : null;
}

/** Like {@link parseHttpUrl} for an option: throws TypeError naming the option when it is unusable. */
export function httpUrlOption(value: string, name: string): URL {
  const url = parseHttpUrl(value);
  if (url === null) throw new TypeError(`${name}: expected an http(s) URL`);
  return url;
}

/**
 * `path` (already encoded) under `base`, keeping the base's path prefix
 * (`https://host/consig` + `/request/1` → `https://host/consig/request/1`). Query values that are
 * null or undefined are left out; an array becomes one parameter per item.
 */
export function urlUnder(base: URL, path: string, query?: Query): URL {
  const url = new URL(base.origin);
  url.pathname = base.pathname.replace(/\/+$/, '') + path;
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === null || value === undefined) continue;
    const values: readonly (string | number | boolean)[] = Array.isArray(value) ? value : [value];
    for (const v of values) url.searchParams.append(key, String(v));
  }
  return url;
}
