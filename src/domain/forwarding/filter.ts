import { isObject, own } from '../json';

/**
 * A destination's payload filter (contract §8): a small declarative JSON language, checked once when
 * the configuration is read and then matched against every forwarded message. It is data, never
 * code: there is no expression to evaluate, no regex, no function.
 *
 * ```json
 * { "data.to": { "$in": ["averbada", "averbacao_negada"] },
 *   "$or": [{ "data.proposal.vl_emprestimo": { "$gte": 10000 } }, { "data.applied": false }] }
 * ```
 *
 * - A filter is an object. `$and` / `$or` take arrays of one or more filters; every other key is a
 *   dotted path into the message (`data.proposal.nu_proposta`; a numeric segment indexes an array:
 *   `items.0.id`). Several keys in one filter must all match.
 * - A path's value is a condition (an object whose every key is an operator; several must all hold)
 *   or a string, number, boolean or null, meaning `$eq`. An object or array to compare with is
 *   written `{"$eq": …}`, so a misspelt operator (`"eq"`) is an error, not a silent equality test.
 * - Operators: `$eq`, `$neq` (JSON equality; `$neq` holds on a missing path), `$in`, `$nin` (a list of
 *   strings, numbers, booleans or null; `$nin` holds on a missing path), `$gt`, `$gte`, `$lt`, `$lte`
 *   (a number or a string; only a value of the same type compares, strings by code unit so ISO
 *   timestamps order in time; anything else is false), `$exists` (boolean; null exists).
 * - A missing path is neither null nor equal to anything.
 * - Bounds ({@link FILTER_LIMITS}) keep a hostile or mistaken configuration from costing more than a
 *   few hundred steps per message.
 */

/** The bounds `compileFilter` enforces. */
export const FILTER_LIMITS = {
  /** Levels of `$and` / `$or` inside one another. */
  maxDepth: 8,
  /** Filters, paths, operators and the values inside a `$eq` / `$neq` object or array, all counted. */
  maxNodes: 200,
  maxPathLength: 256,
  maxPathSegments: 16,
  /** Items of one `$in` / `$nin` list (a list counts as one node). */
  maxListItems: 1000,
} as const;

export const FILTER_OPERATORS = [
  '$eq',
  '$neq',
  '$in',
  '$nin',
  '$gt',
  '$gte',
  '$lt',
  '$lte',
  '$exists',
] as const;

export type JsonScalar = string | number | boolean | null;
export type JsonValue = JsonScalar | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** One compiled operator of a condition. */
export type FilterTest =
  | { readonly op: '$eq' | '$neq'; readonly value: JsonValue }
  | { readonly op: '$in' | '$nin'; readonly values: ReadonlySet<JsonScalar> }
  | { readonly op: '$gt' | '$gte' | '$lt' | '$lte'; readonly value: number | string }
  | { readonly op: '$exists'; readonly value: boolean };

/**
 * A compiled filter: already validated, so matching does no checking. Build one with
 * {@link compileFilter}; a filter object with several keys becomes an `and` of them.
 */
export type Filter =
  | { readonly kind: 'and' | 'or'; readonly filters: readonly Filter[] }
  | { readonly kind: 'path'; readonly path: readonly string[]; readonly tests: readonly FilterTest[] };

/**
 * On failure, `error` is the whole one-line message; `path` (the bad node) and `detail` are its two
 * parts, for a caller that reports them separately.
 */
export type CompileFilterResult =
  { ok: true; filter: Filter } | { ok: false; error: string; path: string; detail: string };

/**
 * Checks a filter given as parsed JSON and compiles it. `where` is where the filter sits in the
 * configuration (`destinations[0].filter`); an error starts with the exact path of the bad node
 * under it, e.g. `destinations[0].filter.$and[1]["data.to"].$in: expected an array`.
 */
export function compileFilter(value: unknown, where: string): CompileFilterResult {
  try {
    return { ok: true, filter: compileObject(value, where, 0, { nodes: 0 }) };
  } catch (err) {
    if (err instanceof FilterSyntaxError) {
      return { ok: false, error: `${err.at}: ${err.message}`, path: err.at, detail: err.message };
    }
    throw err;
  }
}

/** Whether `message` (a parsed JSON message) passes `filter`. */
export function matchesFilter(filter: Filter, message: unknown): boolean {
  switch (filter.kind) {
    case 'and':
      return filter.filters.every((f) => matchesFilter(f, message));
    case 'or':
      return filter.filters.some((f) => matchesFilter(f, message));
    case 'path': {
      const value = lookup(message, filter.path);
      return filter.tests.every((test) => passes(test, value));
    }
  }
}

// ---- compiling -----------------------------------------------------------------------------------

/** Thrown inside the compiler only, and turned into `{ ok: false }` by `compileFilter`. */
class FilterSyntaxError extends Error {
  constructor(
    readonly at: string,
    detail: string,
  ) {
    super(detail);
  }
}

interface Budget {
  nodes: number;
}

const IDENTIFIER = /^\$?[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** Segments that would walk into the prototype chain, were a lookup ever to use `obj[seg]`. */
const FORBIDDEN_SEGMENTS = new Set(['__proto__', 'constructor', 'prototype']);
const ALLOWED = FILTER_OPERATORS.join(', ');

/** `.key` for a plain name, `["data.to"]` for anything else (quoted, one line, cut when long). */
function keyAt(at: string, key: string): string {
  if (IDENTIFIER.test(key)) return `${at}.${key}`;
  return `${at}[${JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)}]`;
}

function countNode(budget: Budget, at: string): void {
  budget.nodes += 1;
  if (budget.nodes > FILTER_LIMITS.maxNodes) {
    throw new FilterSyntaxError(
      at,
      `filter has more than ${FILTER_LIMITS.maxNodes} nodes (filters, paths, operators, values inside $eq/$neq)`,
    );
  }
}

function compileObject(value: unknown, at: string, depth: number, budget: Budget): Filter {
  if (!isObject(value)) throw new FilterSyntaxError(at, 'expected a filter object');
  countNode(budget, at);
  const keys = Object.keys(value);
  if (keys.length === 0) {
    throw new FilterSyntaxError(at, 'empty filter: give at least one path, $and or $or');
  }
  const parts = keys.map((key) => compileEntry(key, own(value, key), keyAt(at, key), depth, budget));
  return parts.length === 1 ? (parts[0] as Filter) : { kind: 'and', filters: parts };
}

function compileEntry(key: string, value: unknown, at: string, depth: number, budget: Budget): Filter {
  if (key === '$and' || key === '$or') return compileList(key, value, at, depth + 1, budget);
  if (key.startsWith('$')) {
    throw new FilterSyntaxError(
      at,
      `unknown operator at filter level (allowed here: $and, $or; ${ALLOWED} go inside a path's condition)`,
    );
  }
  countNode(budget, at);
  return { kind: 'path', path: parsePath(key, at), tests: compileCondition(value, at, budget) };
}

function compileList(key: '$and' | '$or', value: unknown, at: string, depth: number, budget: Budget): Filter {
  if (depth > FILTER_LIMITS.maxDepth) {
    throw new FilterSyntaxError(at, `$and/$or nested more than ${FILTER_LIMITS.maxDepth} deep`);
  }
  if (!Array.isArray(value) || value.length === 0) {
    throw new FilterSyntaxError(at, 'expected an array of one or more filters');
  }
  const filters = value.map((item, i) => compileObject(item, `${at}[${i}]`, depth, budget));
  return { kind: key === '$and' ? 'and' : 'or', filters };
}

function parsePath(key: string, at: string): string[] {
  if (key === '') throw new FilterSyntaxError(at, 'empty path');
  if (key.length > FILTER_LIMITS.maxPathLength) {
    throw new FilterSyntaxError(at, `path longer than ${FILTER_LIMITS.maxPathLength} characters`);
  }
  const segments = key.split('.');
  if (segments.length > FILTER_LIMITS.maxPathSegments) {
    throw new FilterSyntaxError(at, `path has more than ${FILTER_LIMITS.maxPathSegments} segments`);
  }
  for (const segment of segments) {
    if (segment === '') throw new FilterSyntaxError(at, 'empty segment in path');
    if (FORBIDDEN_SEGMENTS.has(segment)) {
      throw new FilterSyntaxError(at, `path segment "${segment}" is not allowed`);
    }
  }
  return segments;
}

function compileCondition(value: unknown, at: string, budget: Budget): FilterTest[] {
  if (isScalar(value)) return [{ op: '$eq', value }];
  if (!isObject(value)) {
    throw new FilterSyntaxError(
      at,
      'expected a condition object or a string, number, boolean or null (compare with an array using $eq or $in)',
    );
  }
  const ops = Object.keys(value);
  if (ops.length === 0) throw new FilterSyntaxError(at, `empty condition: give at least one of ${ALLOWED}`);
  return ops.map((op) => compileOperator(op, own(value, op), keyAt(at, op), budget));
}

function compileOperator(op: string, operand: unknown, at: string, budget: Budget): FilterTest {
  countNode(budget, at);
  switch (op) {
    case '$eq':
    case '$neq':
      return { op, value: jsonLiteral(operand, at, budget) };
    case '$in':
    case '$nin':
      return { op, values: scalarList(operand, at) };
    case '$gt':
    case '$gte':
    case '$lt':
    case '$lte':
      if (typeof operand === 'string' || isFiniteNumber(operand)) return { op, value: operand };
      throw new FilterSyntaxError(at, 'expected a number or a string');
    case '$exists':
      if (typeof operand === 'boolean') return { op, value: operand };
      throw new FilterSyntaxError(at, 'expected true or false');
    default:
      throw new FilterSyntaxError(
        at,
        op.startsWith('$')
          ? `unknown operator (allowed: ${ALLOWED})`
          : `expected an operator (${ALLOWED}); to compare with an object, write {"$eq": {…}}`,
      );
  }
}

/** A copy of a JSON value, every value inside it counted as a node. */
function jsonLiteral(value: unknown, at: string, budget: Budget): JsonValue {
  if (isScalar(value)) return value;
  if (Array.isArray(value)) {
    return value.map((item: unknown, i) => {
      countNode(budget, `${at}[${i}]`);
      return jsonLiteral(item, `${at}[${i}]`, budget);
    });
  }
  if (!isObject(value)) throw new FilterSyntaxError(at, 'expected a JSON value');
  // Object.fromEntries defines each key as an own property, so a `__proto__` key stays data.
  return Object.fromEntries(
    Object.keys(value).map((key) => {
      const keyPath = keyAt(at, key);
      countNode(budget, keyPath);
      return [key, jsonLiteral(own(value, key), keyPath, budget)];
    }),
  );
}

function scalarList(value: unknown, at: string): ReadonlySet<JsonScalar> {
  if (!Array.isArray(value)) throw new FilterSyntaxError(at, 'expected an array');
  if (value.length === 0) throw new FilterSyntaxError(at, 'expected at least one item');
  if (value.length > FILTER_LIMITS.maxListItems) {
    throw new FilterSyntaxError(at, `more than ${FILTER_LIMITS.maxListItems} items`);
  }
  value.forEach((item: unknown, i) => {
    if (!isScalar(item))
      throw new FilterSyntaxError(`${at}[${i}]`, 'expected a string, number, boolean or null');
  });
  return new Set(value as JsonScalar[]);
}

function isFiniteNumber(value: unknown): value is number {
  return Number.isFinite(value); // false for anything not a number: it does not convert
}

function isScalar(value: unknown): value is JsonScalar {
  return value === null || typeof value === 'string' || typeof value === 'boolean' || isFiniteNumber(value);
}

// ---- matching ------------------------------------------------------------------------------------

/** The value at `path`, through own properties and array indexes only; undefined when missing. */
function lookup(root: unknown, path: readonly string[]): unknown {
  let current = root;
  for (const segment of path) {
    if (Array.isArray(current)) {
      // Only an element the array has: its own properties are its indexes and `length`, which is a
      // missing path, not a number (and past the end is missing, whatever Array.prototype holds).
      current =
        segment === 'length'
          ? undefined
          : (Object.getOwnPropertyDescriptor(current, segment)?.value as unknown);
    } else {
      current = own(current, segment);
    }
  }
  return current;
}

function passes(test: FilterTest, value: unknown): boolean {
  switch (test.op) {
    case '$eq':
      return jsonEqual(value, test.value);
    case '$neq':
      return !jsonEqual(value, test.value);
    case '$in':
      return isScalar(value) && test.values.has(value);
    case '$nin':
      return !(isScalar(value) && test.values.has(value));
    case '$exists':
      return (value !== undefined) === test.value;
    default:
      return compares(test.op, value, test.value);
  }
}

function compares(op: '$gt' | '$gte' | '$lt' | '$lte', value: unknown, operand: number | string): boolean {
  // Only the same type compares: 10 and "9" have no order a filter author could rely on.
  if (typeof value !== typeof operand) return false;
  const v = value as number | string;
  switch (op) {
    case '$gt':
      return v > operand;
    case '$gte':
      return v >= operand;
    case '$lt':
      return v < operand;
    case '$lte':
      return v <= operand;
  }
}

/** JSON equality: same scalar, or arrays / objects with equal items (object key order ignored). */
function jsonEqual(actual: unknown, expected: JsonValue): boolean {
  if (expected === null || typeof expected !== 'object') return actual === expected;
  if (isJsonArray(expected)) {
    return (
      Array.isArray(actual) &&
      actual.length === expected.length &&
      expected.every((item, i) => jsonEqual(actual[i], item))
    );
  }
  if (!isObject(actual)) return false;
  const keys = Object.keys(expected);
  return (
    keys.length === Object.keys(actual).length &&
    keys.every((key) => Object.hasOwn(actual, key) && jsonEqual(actual[key], expected[key] as JsonValue))
  );
}

function isJsonArray(value: JsonValue): value is readonly JsonValue[] {
  return Array.isArray(value);
}
