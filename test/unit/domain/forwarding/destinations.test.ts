import { join } from 'node:path';

import { ConfigError, ConsigError } from '../../../../src/domain/errors';
import {
  type Destination,
  DestinationConfigError,
  destinationFromEnv,
  MESSAGE_TYPES,
  parseDestinationsFile,
  resolveDestinations,
} from '../../../../src/domain/forwarding/destinations';
import { compileFilter, type Filter, matchesFilter } from '../../../../src/domain/forwarding/filter';
import * as Destinations from '../../../../src/domain/forwarding/destinations';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its tables and patterns too
// (fresh-module.ts).
loadAgainInEachTest(Destinations, join(__dirname, '../../../../src/domain/forwarding/destinations'));

const SOURCE = 'DESTINATIONS_FILE /etc/x.json';
/** A Standard Webhooks secret: `whsec_` + base64 of 24 bytes. */
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const FILTER = { 'data.to': { $in: ['averbada', 'averbacao_negada'] } };

type Json = Record<string, unknown>;

/** One minimal destination and one with every field set. Each test breaks one thing. */
const minimal: Json = { name: 'los', url: 'https://los.example/hooks', secrets: [SECRET] };
const full: Json = {
  name: 'bi_2',
  url: 'http://bi.internal:8080/in?src=consig',
  secret: 'a plain string secret',
  types: ['proposal.changed', 'averbacao.*'],
  eventos: ['averbacao.*', 'pagamento.falha'],
  filter: FILTER,
  timeout_ms: 5000,
  retry: { schedule_ms: [1000, 5000, 30000] },
  rate_limit_per_second: 50,
  full_cpf: true,
  paused: true,
};

const DEFAULTS = {
  types: ['*'],
  eventos: ['*'],
  filter: null,
  timeoutMs: 10_000,
  retry: { kind: 'exponential', baseMs: 1000, maxMs: 3_600_000, maxAttempts: 12 },
  rateLimitPerSecond: null,
  fullCpf: false,
  paused: false,
};

function compiled(filter: unknown): Filter {
  const result = compileFilter(filter, 'test');
  if (!result.ok) throw new Error(result.error);
  return result.filter;
}

/** The file text with destination `index` changed by `patch` (a key set to undefined is removed). */
function fileWith(index: number, patch: Json): string {
  const destinations = [minimal, full].map((d, i) => (i === index ? { ...d, ...patch } : d));
  return JSON.stringify({ destinations });
}

function parseError(text: string, source = SOURCE): DestinationConfigError {
  try {
    parseDestinationsFile(text, source);
  } catch (err) {
    expect(err).toBeInstanceOf(DestinationConfigError);
    return err as DestinationConfigError;
  }
  throw new Error('expected a DestinationConfigError');
}

describe('parseDestinationsFile', () => {
  it('reads a minimal and a complete destination', () => {
    expect(parseDestinationsFile(fileWith(-1, {}), SOURCE)).toEqual<Destination[]>([
      { ...DEFAULTS, name: 'los', url: 'https://los.example/hooks', secrets: [SECRET] } as Destination,
      {
        name: 'bi_2',
        url: 'http://bi.internal:8080/in?src=consig',
        secrets: ['a plain string secret'],
        types: ['proposal.changed', 'averbacao.*'],
        eventos: ['averbacao.*', 'pagamento.falha'],
        filter: compiled(FILTER),
        timeoutMs: 5000,
        retry: { kind: 'schedule', scheduleMs: [1000, 5000, 30000] },
        rateLimitPerSecond: 50,
        fullCpf: true,
        paused: true,
      },
    ]);
  });

  it('compiles the filter for matching', () => {
    const [, bi] = parseDestinationsFile(fileWith(-1, {}), SOURCE);
    expect(matchesFilter(bi?.filter as Filter, { data: { to: 'averbada' } })).toBe(true);
    expect(matchesFilter(bi?.filter as Filter, { data: { to: 'aprovada' } })).toBe(false);
  });

  it('freezes what it returns', () => {
    const [los, bi] = parseDestinationsFile(fileWith(-1, {}), SOURCE) as [Destination, Destination];
    for (const value of [los, los.secrets, los.types, los.eventos, los.retry, bi.retry]) {
      expect(Object.isFrozen(value)).toBe(true);
    }
    if (bi.retry.kind !== 'schedule') throw new Error('expected a schedule');
    expect(Object.isFrozen(bi.retry.scheduleMs)).toBe(true);
  });

  it.each<[string, Json, Partial<Destination>]>([
    ['a 64-character name', { name: `a${'-'.repeat(62)}z` }, { name: `a${'-'.repeat(62)}z` }],
    ['a one-digit name', { name: '7' }, { name: '7' }],
    ['a URL as new URL writes it', { url: 'HTTPS://LOS.example' }, { url: 'https://los.example/' }],
    ['one secret', { secrets: undefined, secret: 'x' }, { secrets: ['x'] }],
    ['ten secrets', { secrets: Array(10).fill(SECRET) }, { secrets: Array(10).fill(SECRET) }],
    ['a padded whsec_ secret', { secrets: ['whsec_YQ=='] }, { secrets: ['whsec_YQ=='] }],
    ['a whsec_ secret padded with one =', { secrets: ['whsec_YWI='] }, { secrets: ['whsec_YWI='] }],
    [
      'an unpadded whsec_ secret',
      { secrets: ['whsec_YWJj', 'whsec_YQ'] },
      { secrets: ['whsec_YWJj', 'whsec_YQ'] },
    ],
    ['a type glob', { types: ['*.changed'] }, { types: ['*.changed'] }],
    ['100 type globs', { types: Array(100).fill('*') }, { types: Array(100).fill('*') }],
    ['a 256-character evento glob', { eventos: ['a'.repeat(256)] }, { eventos: ['a'.repeat(256)] }],
    [
      'any evento glob',
      { eventos: ['proposta.*', 'not.in.the.catalogue'] },
      { eventos: ['proposta.*', 'not.in.the.catalogue'] },
    ],
    ['filter null', { filter: null }, { filter: null }],
    ['timeout at its minimum', { timeout_ms: 100 }, { timeoutMs: 100 }],
    ['timeout at its maximum', { timeout_ms: 60_000 }, { timeoutMs: 60_000 }],
    [
      'retry with only max_attempts',
      { retry: { max_attempts: 5 } },
      { retry: { kind: 'exponential', baseMs: 1000, maxMs: 3_600_000, maxAttempts: 5 } },
    ],
    [
      'retry whose base is above the default cap',
      { retry: { base_ms: 7_200_000 } },
      { retry: { kind: 'exponential', baseMs: 7_200_000, maxMs: 7_200_000, maxAttempts: 12 } },
    ],
    [
      'retry with every exponential field',
      { retry: { base_ms: 500, max_ms: 500, max_attempts: 100 } },
      { retry: { kind: 'exponential', baseMs: 500, maxMs: 500, maxAttempts: 100 } },
    ],
    [
      'a schedule of 100 zero delays',
      { retry: { schedule_ms: Array(100).fill(0) } },
      { retry: { kind: 'schedule', scheduleMs: Array(100).fill(0) } },
    ],
    ['retry {} (the defaults)', { retry: {} }, { retry: DEFAULTS.retry as Destination['retry'] }],
    ['the lowest rate limit', { rate_limit_per_second: 0.1 }, { rateLimitPerSecond: 0.1 }],
    ['the highest rate limit', { rate_limit_per_second: 10_000 }, { rateLimitPerSecond: 10_000 }],
    ['rate limit null', { rate_limit_per_second: null }, { rateLimitPerSecond: null }],
  ])('accepts %s', (_label, patch, expected) => {
    const [los] = parseDestinationsFile(fileWith(0, patch), SOURCE);
    expect(los).toMatchObject(expected);
  });

  it('names every message type in MESSAGE_TYPES', () => {
    expect(MESSAGE_TYPES).toEqual([
      'event.received',
      'proposal.changed',
      'averbacao.result',
      'subject.erased',
    ]);
  });

  const DESTINATION_KEYS =
    'name, url, secret, secrets, types, eventos, filter, timeout_ms, retry, rate_limit_per_second, full_cpf, paused';
  const NAME_RULE = 'expected 1 to 64 of a-z, 0-9, "_" and "-", starting with a letter or digit';
  const URL_RULE = 'expected an http:// or https:// URL without credentials';

  it.each<[string, string, string]>([
    // the file as a whole
    ['not JSON', '{"destinations": [', ': not valid JSON: Unexpected end of JSON input'],
    ['a number', '42', ': expected a JSON object, got 42'],
    ['an array', `[${JSON.stringify(minimal)}]`, ': expected a JSON object, got an array of 1 item'],
    ['null', 'null', ': expected a JSON object, got null'],
    ['no destinations', '{}', ': destinations: expected a non-empty array, got nothing'],
    [
      'empty destinations',
      '{"destinations": []}',
      ': destinations: expected a non-empty array, got an empty array',
    ],
    [
      'destinations an object',
      '{"destinations": {}}',
      ': destinations: expected a non-empty array, got an object',
    ],
    [
      'a misspelt top-level key',
      JSON.stringify({ destinations: [minimal], destination: [] }),
      ': unknown key "destination" (allowed: destinations)',
    ],
    [
      'a destination not an object',
      JSON.stringify({ destinations: [minimal, 'bi'] }),
      ': destinations[1]: expected an object, got "bi"',
    ],
    // keys
    [
      'a misspelt key',
      fileWith(1, { time_out_ms: 5000 }),
      `: destinations[1]: unknown key "time_out_ms" (allowed: ${DESTINATION_KEYS})`,
    ],
    [
      'two unknown keys',
      fileWith(0, { Name: 'x', 'full-cpf': true }),
      `: destinations[0]: unknown keys "Name", "full-cpf" (allowed: ${DESTINATION_KEYS})`,
    ],
    // name
    ['no name', fileWith(0, { name: undefined }), `: destinations[0].name: ${NAME_RULE}, got nothing`],
    ['an upper-case name', fileWith(0, { name: 'LOS' }), `: destinations[0].name: ${NAME_RULE}, got "LOS"`],
    [
      'a name starting with -',
      fileWith(0, { name: '-los' }),
      `: destinations[0].name: ${NAME_RULE}, got "-los"`,
    ],
    [
      'a name with a dot',
      fileWith(0, { name: 'los.prod' }),
      `: destinations[0].name: ${NAME_RULE}, got "los.prod"`,
    ],
    [
      'a 65-character name',
      fileWith(0, { name: 'a'.repeat(65) }),
      `: destinations[0].name: ${NAME_RULE}, got "${'a'.repeat(65)}"`,
    ],
    ['a numeric name', fileWith(0, { name: 7 }), `: destinations[0].name: ${NAME_RULE}, got 7`],
    ['a boolean name', fileWith(0, { name: true }), `: destinations[0].name: ${NAME_RULE}, got true`],
    ['a name used twice', fileWith(1, { name: 'los' }), ': destinations[1].name: "los" is used twice'],
    // url
    ['an ftp URL', fileWith(1, { url: 'ftp://x' }), `: destinations[1].url: ${URL_RULE}, got "ftp://x"`],
    ['a relative URL', fileWith(0, { url: '/hooks' }), `: destinations[0].url: ${URL_RULE}, got "/hooks"`],
    [
      'a bad port',
      fileWith(0, { url: 'https://los.example:99999/' }),
      `: destinations[0].url: ${URL_RULE}, got "https://los.example:99999/"`,
    ],
    ['no url', fileWith(0, { url: undefined }), `: destinations[0].url: ${URL_RULE}, got nothing`],
    [
      'a javascript: URL',
      fileWith(0, { url: 'javascript:alert(1)' }),
      `: destinations[0].url: ${URL_RULE}, got "javascript:alert(1)"`,
    ],
    [
      'a URL with a password',
      fileWith(0, { url: 'https://los:hunter2@los.example/hooks' }),
      `: destinations[0].url: ${URL_RULE}, got one with a user name or password (not shown)`,
    ],
    [
      'a URL with a password and no user name',
      fileWith(0, { url: 'https://:hunter2@los.example/hooks' }),
      `: destinations[0].url: ${URL_RULE}, got one with a user name or password (not shown)`,
    ],
    [
      'a URL with a user name',
      fileWith(0, { url: 'https://los@los.example/hooks' }),
      `: destinations[0].url: ${URL_RULE}, got one with a user name or password (not shown)`,
    ],
    [
      'a URL with a fragment',
      fileWith(0, { url: 'https://los.example/hooks#x' }),
      ': destinations[0].url: expected a URL without a fragment (#…), got "https://los.example/hooks#x"',
    ],
    [
      'a URL with an empty fragment',
      fileWith(0, { url: 'https://los.example/hooks#' }),
      ': destinations[0].url: expected a URL without a fragment (#…), got "https://los.example/hooks#"',
    ],
    // secrets
    [
      'secret and secrets',
      fileWith(0, { secret: SECRET }),
      ': destinations[0]: give "secret" or "secrets", not both',
    ],
    [
      'no secret',
      fileWith(0, { secrets: undefined }),
      ': destinations[0].secrets: missing (or give one "secret")',
    ],
    [
      'no secrets',
      fileWith(0, { secrets: [] }),
      ': destinations[0].secrets: expected an array of 1 to 10 secrets (or give one "secret")',
    ],
    [
      'eleven secrets',
      fileWith(0, { secrets: Array(11).fill(SECRET) }),
      ': destinations[0].secrets: expected an array of 1 to 10 secrets (or give one "secret")',
    ],
    [
      'secrets a string',
      fileWith(0, { secrets: SECRET }),
      ': destinations[0].secrets: expected an array of 1 to 10 secrets (or give one "secret")',
    ],
    [
      'an empty secret',
      fileWith(1, { secret: '' }),
      ': destinations[1].secret: expected a non-empty string (value not shown)',
    ],
    [
      'a blank secret',
      fileWith(0, { secrets: [SECRET, '   '] }),
      ': destinations[0].secrets[1]: expected a non-empty string (value not shown)',
    ],
    [
      'a number as secret',
      fileWith(0, { secrets: [12345] }),
      ': destinations[0].secrets[0]: expected a non-empty string (value not shown)',
    ],
    [
      'a secret with a trailing newline',
      fileWith(0, { secrets: [`${SECRET}\n`] }),
      ': destinations[0].secrets[0]: starts or ends with white space (value not shown)',
    ],
    ...[
      'whsec_',
      'whsec_not base64',
      'whsec_YQ=',
      'whsec_a',
      'whsec_YQ===',
      'whsec_YQ-_',
      'whsec_AB',
      'whsec_YWJj==',
    ].map((secret): [string, string, string] => [
      `the whsec_ secret ${JSON.stringify(secret)}`,
      fileWith(0, { secrets: [SECRET, secret] }),
      ': destinations[0].secrets[1]: a whsec_ secret must be non-empty base64 after the prefix (value not shown)',
    ]),
    // types and eventos
    [
      'no types',
      fileWith(0, { types: [] }),
      ': destinations[0].types: expected an array of 1 to 100 globs, got an empty array',
    ],
    [
      'types a string',
      fileWith(0, { types: 'proposal.changed' }),
      ': destinations[0].types: expected an array of 1 to 100 globs, got "proposal.changed"',
    ],
    [
      '101 types',
      fileWith(0, { types: Array(101).fill('*') }),
      ': destinations[0].types: expected an array of 1 to 100 globs, got an array of 101 items',
    ],
    [
      'a misspelt type',
      fileWith(1, { types: ['proposal.changed', 'proposal.change'] }),
      ': destinations[1].types[1]: "proposal.change" matches no message type (event.received, proposal.changed, averbacao.result, subject.erased)',
    ],
    [
      'a type glob matching nothing',
      fileWith(0, { types: ['averbacao.*.x'] }),
      ': destinations[0].types[0]: "averbacao.*.x" matches no message type (event.received, proposal.changed, averbacao.result, subject.erased)',
    ],
    [
      'an empty type',
      fileWith(0, { types: [''] }),
      ': destinations[0].types[0]: expected a glob of 1 to 256 characters, got ""',
    ],
    [
      'an evento not a string',
      fileWith(1, { eventos: ['averbacao.*', 5] }),
      ': destinations[1].eventos[1]: expected a glob of 1 to 256 characters, got 5',
    ],
    [
      'types an 80-character string (shown whole)',
      fileWith(0, { types: 'a'.repeat(80) }),
      `: destinations[0].types: expected an array of 1 to 100 globs, got "${'a'.repeat(80)}"`,
    ],
    [
      'a 257-character evento',
      fileWith(0, { eventos: ['a'.repeat(257)] }),
      `: destinations[0].eventos[0]: expected a glob of 1 to 256 characters, got "${'a'.repeat(80)}…"`,
    ],
    // filter
    [
      'a bad filter',
      fileWith(1, { filter: { $and: [{ type: 'x' }, { 'data.to': { $in: 'averbada' } }] } }),
      ': destinations[1].filter.$and[1]["data.to"].$in: expected an array',
    ],
    [
      'a filter with a __proto__ path',
      fileWith(0, { filter: { '__proto__.x': 1 } }),
      ': destinations[0].filter["__proto__.x"]: path segment "__proto__" is not allowed',
    ],
    [
      'a filter not an object',
      fileWith(0, { filter: 'data.to == 1' }),
      ': destinations[0].filter: expected a filter object',
    ],
    // numbers
    [
      'a timeout too short',
      fileWith(0, { timeout_ms: 99 }),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got 99',
    ],
    [
      'a timeout too long',
      fileWith(0, { timeout_ms: 60_001 }),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got 60001',
    ],
    [
      'a fractional timeout',
      fileWith(0, { timeout_ms: 1000.5 }),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got 1000.5',
    ],
    [
      'a timeout as text',
      fileWith(0, { timeout_ms: '1000' }),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got "1000"',
    ],
    [
      'a timeout null',
      fileWith(0, { timeout_ms: null }),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got null',
    ],
    [
      'an infinite timeout (JSON 1e999)',
      fileWith(0, { timeout_ms: 1000 }).replace('1000', '1e999'),
      ': destinations[0].timeout_ms: expected an integer from 100 to 60000, got Infinity',
    ],
    [
      'retry a string',
      fileWith(0, { retry: 'fast' }),
      ': destinations[0].retry: expected an object, got "fast"',
    ],
    [
      'a misspelt retry key',
      fileWith(0, { retry: { base: 1000 } }),
      ': destinations[0].retry: unknown key "base" (allowed: base_ms, max_ms, max_attempts, schedule_ms)',
    ],
    [
      'a zero base',
      fileWith(0, { retry: { base_ms: 0 } }),
      ': destinations[0].retry.base_ms: expected an integer from 1 to 86400000, got 0',
    ],
    [
      'a cap below the base',
      fileWith(0, { retry: { base_ms: 1000, max_ms: 500 } }),
      ': destinations[0].retry.max_ms: expected an integer from 1000 to 86400000, got 500',
    ],
    [
      'zero attempts',
      fileWith(0, { retry: { max_attempts: 0 } }),
      ': destinations[0].retry.max_attempts: expected an integer from 1 to 100, got 0',
    ],
    [
      '101 attempts',
      fileWith(0, { retry: { max_attempts: 101 } }),
      ': destinations[0].retry.max_attempts: expected an integer from 1 to 100, got 101',
    ],
    [
      'a schedule and an exponential field',
      fileWith(1, { retry: { schedule_ms: [1000], max_attempts: 3 } }),
      ': destinations[1].retry: give schedule_ms or base_ms / max_ms / max_attempts, not both',
    ],
    [
      'an empty schedule',
      fileWith(1, { retry: { schedule_ms: [] } }),
      ': destinations[1].retry.schedule_ms: expected an array of 1 to 100 delays in ms, got an empty array',
    ],
    [
      'a schedule of 101 delays',
      fileWith(1, { retry: { schedule_ms: Array(101).fill(1000) } }),
      ': destinations[1].retry.schedule_ms: expected an array of 1 to 100 delays in ms, got an array of 101 items',
    ],
    [
      'a negative delay',
      fileWith(1, { retry: { schedule_ms: [1000, -1] } }),
      ': destinations[1].retry.schedule_ms[1]: expected an integer from 0 to 86400000, got -1',
    ],
    [
      'a delay over a day',
      fileWith(1, { retry: { schedule_ms: [86_400_001] } }),
      ': destinations[1].retry.schedule_ms[0]: expected an integer from 0 to 86400000, got 86400001',
    ],
    [
      'a zero rate limit',
      fileWith(1, { rate_limit_per_second: 0 }),
      ': destinations[1].rate_limit_per_second: expected a number from 0.1 to 10000, got 0',
    ],
    [
      'a rate limit too low',
      fileWith(1, { rate_limit_per_second: 0.05 }),
      ': destinations[1].rate_limit_per_second: expected a number from 0.1 to 10000, got 0.05',
    ],
    [
      'a rate limit too high',
      fileWith(1, { rate_limit_per_second: 10_001 }),
      ': destinations[1].rate_limit_per_second: expected a number from 0.1 to 10000, got 10001',
    ],
    [
      'a rate limit as text',
      fileWith(1, { rate_limit_per_second: '50' }),
      ': destinations[1].rate_limit_per_second: expected a number from 0.1 to 10000, got "50"',
    ],
    // flags
    [
      'full_cpf as text',
      fileWith(1, { full_cpf: 'false' }),
      ': destinations[1].full_cpf: expected true or false, got "false"',
    ],
    [
      'paused as a number',
      fileWith(1, { paused: 1 }),
      ': destinations[1].paused: expected true or false, got 1',
    ],
  ])('refuses %s', (_label, text, expected) => {
    const err = parseError(text);
    expect(err.message).toBe(SOURCE + expected);
    expect(err.message).not.toContain('\n');
  });

  it('names the field apart from the source', () => {
    const err = parseError(fileWith(1, { filter: { 'data.to': { $in: 'x' } } }));
    expect(err.source).toBe(SOURCE);
    expect(err.field).toBe('destinations[1].filter["data.to"].$in');
  });

  it('is a ConfigError whose class survives compilation', () => {
    const err = parseError('[]');
    expect(err).toBeInstanceOf(DestinationConfigError);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err).toBeInstanceOf(ConsigError);
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('DestinationConfigError');
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.field).toBe('');
  });

  // V8 quotes the text around a JSON syntax error; here that text is a secret.
  it.each([
    '{"destinations": [{"name": "los", "secret": whsec_c2VjcmV0LXZhbHVl}]}', // excerpt cut at both ends
    '{"secret": whsec_c2VjcmV0}', // excerpt cut at the start only
    'whsec_c2VjcmV0', // the whole text quoted
  ])('keeps a secret out of a JSON syntax error (%#)', (text) => {
    const err = parseError(text);
    expect(err.message).toBe(`${SOURCE}: not valid JSON: Unexpected token 'w'`);
  });

  it.each([
    ['secrets[1]', { secrets: [SECRET, 'whsec_S3CR3T!!'] }],
    ['secret', { secrets: undefined, secret: ' S3CR3T' }],
    ['url', { url: 'https://los:S3CR3T@los.example/' }],
  ])('never shows a secret (%s)', (_field, patch) => {
    expect(parseError(fileWith(0, patch)).message).not.toContain('S3CR3T');
  });
});

describe('destinationFromEnv', () => {
  it.each([{}, { FORWARD_URL: '', FORWARD_SECRET: '' }])('is null when neither is set (%p)', (env) => {
    expect(destinationFromEnv(env)).toBeNull();
  });

  it('describes one destination with every type, every evento and the defaults', () => {
    expect(destinationFromEnv({ FORWARD_URL: 'https://los.example/hooks', FORWARD_SECRET: SECRET })).toEqual({
      ...DEFAULTS,
      name: 'default',
      url: 'https://los.example/hooks',
      secrets: [SECRET],
    });
  });

  it.each<[string, { FORWARD_URL?: string; FORWARD_SECRET?: string }, string]>([
    [
      'only a URL',
      { FORWARD_URL: 'https://los.example/hooks' },
      'FORWARD_SECRET: required when FORWARD_URL is set',
    ],
    ['only a secret', { FORWARD_SECRET: SECRET }, 'FORWARD_URL: required when FORWARD_SECRET is set'],
    [
      'an ftp URL',
      { FORWARD_URL: 'ftp://x', FORWARD_SECRET: SECRET },
      'FORWARD_URL: expected an http:// or https:// URL without credentials, got "ftp://x"',
    ],
    [
      'a bad whsec_ secret',
      { FORWARD_URL: 'https://los.example/hooks', FORWARD_SECRET: 'whsec_S3CR3T!!' },
      'FORWARD_SECRET: a whsec_ secret must be non-empty base64 after the prefix (value not shown)',
    ],
  ])('refuses %s', (_label, env, expected) => {
    expect(() => destinationFromEnv(env)).toThrow(DestinationConfigError);
    expect(() => destinationFromEnv(env)).toThrow(new Error(expected));
  });
});

describe('resolveDestinations', () => {
  const env = { FORWARD_URL: 'https://los.example/env', FORWARD_SECRET: SECRET };
  const file = JSON.stringify({ destinations: [minimal, full] });
  const names = (list: Destination[]) => list.map((d) => d.name);

  it.each<[string, typeof env | object, string | null, string[]]>([
    ['nothing configured', {}, null, []],
    ['FORWARD_URL only', env, null, ['default']],
    ['the file only', {}, file, ['los', 'bi_2']],
    ['both, FORWARD_URL first', env, file, ['default', 'los', 'bi_2']],
    [
      'a file destination named default without FORWARD_URL',
      {},
      fileWith(0, { name: 'default' }),
      ['default', 'bi_2'],
    ],
  ])('%s', (_label, environment, text, expected) => {
    expect(names(resolveDestinations(environment, text, SOURCE))).toEqual(expected);
  });

  it('refuses a file destination named default beside FORWARD_URL', () => {
    expect(() => resolveDestinations(env, fileWith(1, { name: 'default' }), SOURCE)).toThrow(
      new Error(
        `${SOURCE}: destinations[1].name: "default" is the destination of FORWARD_URL; rename this one or unset FORWARD_URL`,
      ),
    );
  });

  it('reports an invalid file under its own source', () => {
    expect(() => resolveDestinations(env, '{}', 'DESTINATIONS_FILE ./d.json')).toThrow(
      new Error('DESTINATIONS_FILE ./d.json: destinations: expected a non-empty array, got nothing'),
    );
  });
});
