/**
 * Name globs for forwarding configuration (`"types": ["proposal.*"]`, `"eventos": ["averbacao.*"]`).
 *
 * Only `*` is special: it matches any run of characters, dots and the empty run included. Everything
 * else is literal and case-sensitive, and a glob matches the whole name. No RegExp is built from the
 * pattern: a glob with only `*` needs none, and matching it piece by piece (below) cannot backtrack
 * catastrophically the way a regex for `*a*a*a*a*b` can.
 */

/**
 * Whether `name` matches `pattern` as a whole.
 *
 * The pattern is split at its stars into literal pieces. The first piece must start the name and the
 * last must end it; each piece in between is taken at its leftmost place after the previous one.
 * Leftmost is always safe (a later place only leaves less room for the pieces after it), so no choice
 * is ever revisited: the work is a few `indexOf` scans over the name, never a search over choices.
 */
export function globMatches(pattern: string, name: string): boolean {
  const pieces = pattern.split('*');
  if (pieces.length === 1) return pattern === name;
  const first = pieces[0] as string;
  const last = pieces[pieces.length - 1] as string;
  if (name.length < first.length + last.length) return false;
  if (!name.startsWith(first) || !name.endsWith(last)) return false;
  // The middle pieces must fit between the first piece and the last one, without overlapping them.
  let from = first.length;
  const end = name.length - last.length;
  for (let i = 1; i < pieces.length - 1; i++) {
    const piece = pieces[i] as string; // '' (from `**`) is found at `from` and moves nothing
    const at = name.indexOf(piece, from);
    if (at === -1 || at + piece.length > end) return false;
    from = at + piece.length;
  }
  return true;
}

/** Whether any of `patterns` matches `name` (none given: false). */
export function anyGlobMatches(patterns: readonly string[], name: string): boolean {
  return patterns.some((pattern) => globMatches(pattern, name));
}
