import { ConfigError } from '../errors';
import { isObject, own, type JsonObject } from '../json';
import { compileFilter, type Filter } from './filter';
import { globMatches } from './glob';
import type { RetryPolicy } from './retry';
import { secretKey } from './standard-webhooks';

/**
 * Where forwarded messages go (contract §8): `FORWARD_URL` + `FORWARD_SECRET` for one destination,
 * `DESTINATIONS_FILE` for several. Pure: the caller reads the file and the environment and passes
 * their text in. Anything invalid stops startup with one line naming the file (or variable) and the
 * exact field; a key the parser does not know is an error too, so a typo is never silently ignored.
 */

/** The message types a destination can subscribe to (contract §8, body of each forwarded request). */
/**
 * `subject.erased` comes from no event: an erasure (issue 45) tells it to every destination that was
 * sent the person's data, whatever its `types` (src/core/subject-erase.ts).
 */
export const MESSAGE_TYPES = [
  'event.received',
  'proposal.changed',
  'averbacao.result',
  'subject.erased',
] as const;
export type MessageType = (typeof MESSAGE_TYPES)[number];

export interface Destination {
  /** `/^[a-z0-9][a-z0-9_-]{0,63}$/`, unique; `default` is the one from `FORWARD_URL`. */
  name: string;
  /** http(s), without user name, password or fragment; as `new URL(…).href` writes it. */
  url: string;
  /** Signing secrets, the first signs; several during a rotation (Standard Webhooks). */
  secrets: readonly string[];
  /** Globs over {@link MESSAGE_TYPES}. @default ['*'] */
  types: readonly string[];
  /** Globs over a message's `evento`. @default ['*'] */
  eventos: readonly string[];
  /** @default null (every message of the types and eventos above) */
  filter: Filter | null;
  /** @default 10000 */
  timeoutMs: number;
  /** @default exponential, 1000 ms doubling up to 3600000 ms, 12 attempts */
  retry: RetryPolicy;
  /** @default null (no limit) */
  rateLimitPerSecond: number | null;
  /** Send `nu_cpf` in full; otherwise masked (`***.456.789-**`, LGPD). @default false */
  fullCpf: boolean;
  /** @default false */
  paused: boolean;
}

/** The variables `destinationFromEnv` reads; `process.env` fits. */
export interface ForwardEnv {
  FORWARD_URL?: string;
  FORWARD_SECRET?: string;
}

/**
 * The forwarding configuration is invalid. The message is one line: `<source>: <field>: <detail>`,
 * e.g. `DESTINATIONS_FILE /etc/x.json: destinations[1].url: expected …`. It never holds a secret.
 * A {@link ConfigError} (code `CONFIG_INVALID`), so the commands already print it as one line.
 */
export class DestinationConfigError extends ConfigError {
  /** The file (`DESTINATIONS_FILE /etc/x.json`) or variable (`FORWARD_URL`) at fault. */
  readonly source: string;
  /** The path of the bad field (`destinations[1].url`); empty when the whole source is at fault. */
  readonly field: string;

  constructor(source: string, field: string, detail: string) {
    super(source, field === '' ? detail : `${field}: ${detail}`);
    this.source = source;
    this.field = field;
  }
}

/** What a destination gets for a field it leaves out (and all the `FORWARD_URL` one has). */
export const DESTINATION_DEFAULTS = {
  types: ['*'],
  eventos: ['*'],
  timeoutMs: 10_000,
  retry: { kind: 'exponential', baseMs: 1000, maxMs: 3_600_000, maxAttempts: 12 },
} as const satisfies Partial<Destination>;

/** Parses a `DESTINATIONS_FILE`; `source` names it in errors (`DESTINATIONS_FILE /etc/x.json`). */
export function parseDestinationsFile(text: string, source: string): Destination[] {
  return withSource(source, () => {
    const list = destinationList(parseJson(text));
    const seen = new Set<string>();
    return list.map((raw, i) => {
      const destination = parseDestination(raw, `destinations[${i}]`);
      if (seen.has(destination.name)) {
        throw new FieldError(`destinations[${i}].name`, `"${destination.name}" is used twice`);
      }
      seen.add(destination.name);
      return destination;
    });
  });
}

/**
 * The destination `FORWARD_URL` + `FORWARD_SECRET` describe (named `default`, every type and evento,
 * the defaults above), or null when neither is set. An empty value counts as unset.
 */
export function destinationFromEnv(env: ForwardEnv): Destination | null {
  const url = env.FORWARD_URL || undefined;
  const secret = env.FORWARD_SECRET || undefined;
  if (url === undefined && secret === undefined) return null;
  if (url === undefined) {
    throw new DestinationConfigError('FORWARD_URL', '', 'required when FORWARD_SECRET is set');
  }
  if (secret === undefined) {
    throw new DestinationConfigError('FORWARD_SECRET', '', 'required when FORWARD_URL is set');
  }
  const checkedUrl = withSource('FORWARD_URL', () => httpUrl(url, ''));
  withSource('FORWARD_SECRET', () => checkSecret(secret, ''));
  return freeze({ ...defaults('default', checkedUrl), secrets: [secret] });
}

/**
 * Every destination: the one from `FORWARD_URL` first (if set), then the file's (if `fileText` is not
 * null). The file may not also name one `default` while `FORWARD_URL` is set.
 */
export function resolveDestinations(
  env: ForwardEnv,
  fileText: string | null,
  fileSource: string,
): Destination[] {
  const fromEnv = destinationFromEnv(env);
  const fromFile = fileText === null ? [] : parseDestinationsFile(fileText, fileSource);
  if (fromEnv === null) return fromFile;
  const clash = fromFile.findIndex((d) => d.name === fromEnv.name);
  if (clash !== -1) {
    throw new DestinationConfigError(
      fileSource,
      `destinations[${clash}].name`,
      '"default" is the destination of FORWARD_URL; rename this one or unset FORWARD_URL',
    );
  }
  return [fromEnv, ...fromFile];
}

// ---- one destination -----------------------------------------------------------------------------

/** A bad field, thrown inside this module and given its source by `withSource`. */
class FieldError extends Error {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(detail);
  }
}

function withSource<T>(source: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof FieldError) throw new DestinationConfigError(source, err.field, err.message);
    throw err;
  }
}

const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const DESTINATION_KEYS = [
  'name',
  'url',
  'secret',
  'secrets',
  'types',
  'eventos',
  'filter',
  'timeout_ms',
  'retry',
  'rate_limit_per_second',
  'full_cpf',
  'paused',
];
const MAX_SECRETS = 10;
const MAX_GLOBS = 100;
const MAX_GLOB_LENGTH = 256;
const DAY_MS = 86_400_000;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new FieldError('', `not valid JSON: ${jsonErrorText(err)}`);
  }
}

/**
 * The parser's message on one line, without the excerpt of the text V8 quotes in some messages
 * (`Unexpected token 'w', ..."secret": whsec_c2Vj"... is not valid JSON`): that excerpt may hold a
 * secret. Everything from `, "` or `, ..."` on is that excerpt. What is kept may name one unexpected
 * character, a line break among them (`Unexpected token '\n'`), which becomes a blank; V8 quotes that
 * one character, so there is never a run of blanks to fold.
 */
function jsonErrorText(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const excerpt = message.search(/, (\.\.\.)?"/);
  return (excerpt === -1 ? message : message.slice(0, excerpt)).replace(/\s/g, ' ');
}

function destinationList(root: unknown): unknown[] {
  if (!isObject(root)) throw new FieldError('', `expected a JSON object, got ${describe(root)}`);
  rejectUnknownKeys(root, ['destinations'], '');
  const list = own(root, 'destinations');
  if (!Array.isArray(list) || list.length === 0) {
    throw new FieldError('destinations', `expected a non-empty array, got ${describe(list)}`);
  }
  return list;
}

function parseDestination(raw: unknown, at: string): Destination {
  if (!isObject(raw)) throw new FieldError(at, `expected an object, got ${describe(raw)}`);
  rejectUnknownKeys(raw, DESTINATION_KEYS, at);
  return freeze({
    name: destinationName(own(raw, 'name'), `${at}.name`),
    url: httpUrl(own(raw, 'url'), `${at}.url`),
    secrets: secrets(raw, at),
    types: globs(own(raw, 'types'), `${at}.types`, DESTINATION_DEFAULTS.types, true),
    eventos: globs(own(raw, 'eventos'), `${at}.eventos`, DESTINATION_DEFAULTS.eventos, false),
    filter: filter(own(raw, 'filter'), `${at}.filter`),
    timeoutMs: integer(
      own(raw, 'timeout_ms'),
      `${at}.timeout_ms`,
      100,
      60_000,
      DESTINATION_DEFAULTS.timeoutMs,
    ),
    retry: retryPolicy(own(raw, 'retry'), `${at}.retry`),
    rateLimitPerSecond: rateLimit(own(raw, 'rate_limit_per_second'), `${at}.rate_limit_per_second`),
    fullCpf: flag(own(raw, 'full_cpf'), `${at}.full_cpf`),
    paused: flag(own(raw, 'paused'), `${at}.paused`),
  });
}

/** Every field at its default: every message type and evento, no filter, exponential retry. */
function defaults(name: string, url: string): Omit<Destination, 'secrets'> {
  return {
    name,
    url,
    types: DESTINATION_DEFAULTS.types,
    eventos: DESTINATION_DEFAULTS.eventos,
    filter: null,
    timeoutMs: DESTINATION_DEFAULTS.timeoutMs,
    retry: { ...DESTINATION_DEFAULTS.retry },
    rateLimitPerSecond: null,
    fullCpf: false,
    paused: false,
  };
}

/** Destinations are configuration: nothing downstream may change one (shared defaults included). */
function freeze(destination: Destination): Destination {
  Object.freeze(destination.secrets);
  Object.freeze(destination.types);
  Object.freeze(destination.eventos);
  if (destination.retry.kind === 'schedule') Object.freeze(destination.retry.scheduleMs);
  Object.freeze(destination.retry);
  return Object.freeze(destination);
}

function rejectUnknownKeys(obj: JsonObject, allowed: readonly string[], at: string): void {
  const unknown = Object.keys(obj).filter((key) => !allowed.includes(key));
  if (unknown.length === 0) return;
  const names = unknown.map(describe).join(', ');
  throw new FieldError(
    at,
    `unknown ${unknown.length === 1 ? 'key' : 'keys'} ${names} (allowed: ${allowed.join(', ')})`,
  );
}

// ---- fields --------------------------------------------------------------------------------------

function destinationName(value: unknown, at: string): string {
  if (typeof value === 'string' && NAME_PATTERN.test(value)) return value;
  throw new FieldError(
    at,
    `expected 1 to 64 of a-z, 0-9, "_" and "-", starting with a letter or digit, got ${describe(value)}`,
  );
}

function httpUrl(value: unknown, at: string): string {
  const expected = 'expected an http:// or https:// URL without credentials';
  const url = typeof value === 'string' ? parseUrl(value) : null;
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new FieldError(at, `${expected}, got ${describe(value)}`);
  }
  // Credentials are not echoed: the password is a secret.
  if (url.username !== '' || url.password !== '') {
    throw new FieldError(at, `${expected}, got one with a user name or password (not shown)`);
  }
  // Any "#" starts a fragment: the parsed hash is empty for a bare one ("…/hooks#"), the text is not.
  if ((value as string).includes('#')) {
    throw new FieldError(at, `expected a URL without a fragment (#…), got ${describe(value)}`);
  }
  return url.href;
}

function parseUrl(text: string): URL | null {
  try {
    return new URL(text);
  } catch {
    return null;
  }
}

function secrets(raw: JsonObject, at: string): string[] {
  const one = own(raw, 'secret');
  const many = own(raw, 'secrets');
  if (one !== undefined && many !== undefined)
    throw new FieldError(at, 'give "secret" or "secrets", not both');
  if (one !== undefined) return [checkSecret(one, `${at}.secret`)];
  if (!Array.isArray(many) || many.length === 0 || many.length > MAX_SECRETS) {
    const detail = many === undefined ? 'missing' : `expected an array of 1 to ${MAX_SECRETS} secrets`;
    throw new FieldError(`${at}.secrets`, `${detail} (or give one "secret")`);
  }
  return many.map((secret: unknown, i) => checkSecret(secret, `${at}.secrets[${i}]`));
}

/**
 * A secret is any non-blank string without white space around it (a pasted newline would sign with
 * the wrong key and fail only at the receiving end). `whsec_…` is Standard Webhooks' form: the key is
 * the base64 after the prefix, so it must decode. Messages name the field only, never the value.
 */
function checkSecret(value: unknown, at: string): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new FieldError(at, 'expected a non-empty string (value not shown)');
  }
  if (value !== value.trim()) {
    throw new FieldError(at, 'starts or ends with white space (value not shown)');
  }
  // Only a whsec_ secret can fail here: any other non-empty string is keyed by its bytes.
  if (!canSign(value)) {
    throw new FieldError(at, 'a whsec_ secret must be non-empty base64 after the prefix (value not shown)');
  }
  return value;
}

/** Whether the signer takes the secret: one rule, {@link secretKey}'s, at startup and at each send. */
function canSign(secret: string): boolean {
  try {
    secretKey(secret);
    return true;
  } catch {
    return false;
  }
}

/** A list of globs; `types` globs must each match a known message type, or they never would. */
function globs(
  value: unknown,
  at: string,
  fallback: readonly string[],
  messageTypes: boolean,
): readonly string[] {
  if (value === undefined) return fallback;
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_GLOBS) {
    throw new FieldError(at, `expected an array of 1 to ${MAX_GLOBS} globs, got ${describe(value)}`);
  }
  return value.map((glob: unknown, i) => {
    if (typeof glob !== 'string' || glob === '' || glob.length > MAX_GLOB_LENGTH) {
      throw new FieldError(
        `${at}[${i}]`,
        `expected a glob of 1 to ${MAX_GLOB_LENGTH} characters, got ${describe(glob)}`,
      );
    }
    if (messageTypes && !MESSAGE_TYPES.some((type) => globMatches(glob, type))) {
      throw new FieldError(
        `${at}[${i}]`,
        `${describe(glob)} matches no message type (${MESSAGE_TYPES.join(', ')})`,
      );
    }
    return glob;
  });
}

function filter(value: unknown, at: string): Filter | null {
  if (value === undefined || value === null) return null;
  const compiled = compileFilter(value, at);
  if (compiled.ok) return compiled.filter;
  throw new FieldError(compiled.path, compiled.detail);
}

function retryPolicy(value: unknown, at: string): RetryPolicy {
  if (value === undefined) return { ...DESTINATION_DEFAULTS.retry };
  if (!isObject(value)) throw new FieldError(at, `expected an object, got ${describe(value)}`);
  rejectUnknownKeys(value, ['base_ms', 'max_ms', 'max_attempts', 'schedule_ms'], at);
  if (own(value, 'schedule_ms') === undefined) return exponentialPolicy(value, at);
  if (Object.keys(value).length > 1) {
    throw new FieldError(at, 'give schedule_ms or base_ms / max_ms / max_attempts, not both');
  }
  const schedule = own(value, 'schedule_ms');
  if (!Array.isArray(schedule) || schedule.length === 0 || schedule.length > 100) {
    throw new FieldError(
      `${at}.schedule_ms`,
      `expected an array of 1 to 100 delays in ms, got ${describe(schedule)}`,
    );
  }
  const scheduleMs = schedule.map((ms: unknown, i) => integer(ms, `${at}.schedule_ms[${i}]`, 0, DAY_MS));
  return { kind: 'schedule', scheduleMs };
}

function exponentialPolicy(value: JsonObject, at: string): RetryPolicy {
  const d = DESTINATION_DEFAULTS.retry;
  const baseMs = integer(own(value, 'base_ms'), `${at}.base_ms`, 1, DAY_MS, d.baseMs);
  // A cap below the base would silently make every delay the cap: refused when given, and the
  // default cap rises to a larger base.
  const maxMs = integer(own(value, 'max_ms'), `${at}.max_ms`, baseMs, DAY_MS, Math.max(d.maxMs, baseMs));
  const maxAttempts = integer(own(value, 'max_attempts'), `${at}.max_attempts`, 1, 100, d.maxAttempts);
  return { kind: 'exponential', baseMs, maxMs, maxAttempts };
}

function integer(value: unknown, at: string, min: number, max: number, fallback?: number): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value;
  throw new FieldError(at, `expected an integer from ${min} to ${max}, got ${describe(value)}`);
}

function rateLimit(value: unknown, at: string): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0.1 && value <= 10_000) return value;
  throw new FieldError(at, `expected a number from 0.1 to 10000, got ${describe(value)}`);
}

function flag(value: unknown, at: string): boolean {
  if (value === undefined) return false;
  if (typeof value === 'boolean') return value;
  throw new FieldError(at, `expected true or false, got ${describe(value)}`);
}

/** A short, one-line description of a configuration value for an error message (never a secret). */
function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  if (Array.isArray(value)) {
    return value.length === 0
      ? 'an empty array'
      : `an array of ${value.length} ${value.length === 1 ? 'item' : 'items'}`;
  }
  return 'an object';
}
