import { join } from 'node:path';

import fc from 'fast-check';
import * as FilterModule from '../../../../src/domain/forwarding/filter';
import { type Filter } from '../../../../src/domain/forwarding/filter';
import { loadAgainInEachTest } from '../fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(FilterModule, join(__dirname, '../../../../src/domain/forwarding/filter'));
const { compileFilter, matchesFilter } = FilterModule;
const { FILTER_LIMITS } = FilterModule;

const WHERE = 'destinations[0].filter';

/** A forwarded `proposal.changed` message (contract §8), with a null field and an array added. */
const message = {
  type: 'proposal.changed',
  id: 'msg_1',
  created_at: '2026-11-23T10:00:00.000Z',
  data: {
    nu_proposta: 123,
    from: 'aprovada',
    to: 'averbacao_solicitada',
    stage: 'averbacao',
    evento: 'averbacao.solicitada',
    applied: true,
    proposal: { vl_emprestimo: 15000.5, nu_cpf: '***.456.789-**', no_conveniada: null },
    parcelas: [
      { n: 1, vl: 500 },
      { n: 2, vl: 500 },
    ],
  },
};

function compiled(value: unknown): Filter {
  const result = compileFilter(value, WHERE);
  if (!result.ok) throw new Error(result.error);
  return result.filter;
}

function compileError(value: unknown): string {
  const result = compileFilter(value, WHERE);
  if (result.ok) throw new Error('expected a compile error');
  return result.error;
}

/** `levels` of `{"$and": [...]}` around one condition. */
function nested(levels: number): unknown {
  let filter: unknown = { type: 'proposal.changed' };
  for (let i = 0; i < levels; i++) filter = { $and: [filter] };
  return filter;
}

/** A filter with `count` path keys. */
function manyPaths(count: number): Record<string, string> {
  return Object.fromEntries(Array.from({ length: count }, (_, i) => [`data.k${i}`, 'x']));
}

describe('matchesFilter', () => {
  it.each<[string, unknown, boolean]>([
    // implicit $eq
    ['a string literal', { type: 'proposal.changed' }, true],
    ['a different string', { type: 'event.received' }, false],
    ['a dotted path', { 'data.to': 'averbacao_solicitada' }, true],
    ['a number', { 'data.nu_proposta': 123 }, true],
    ['a number is not its text', { 'data.nu_proposta': '123' }, false],
    ['a boolean', { 'data.applied': true }, true],
    ['null equals null', { 'data.proposal.no_conveniada': null }, true],
    ['a missing path is not null', { 'data.proposal.nu_beneficio': null }, false],
    ['a three-level path', { 'data.proposal.nu_cpf': '***.456.789-**' }, true],
    // $eq / $neq
    [
      '$eq with an object (key order ignored)',
      { 'data.proposal': { $eq: { nu_cpf: '***.456.789-**', no_conveniada: null, vl_emprestimo: 15000.5 } } },
      true,
    ],
    ['$eq with an object missing a key', { 'data.proposal': { $eq: { vl_emprestimo: 15000.5 } } }, false],
    ['$eq with an array', { 'data.parcelas.0': { $eq: { n: 1, vl: 500 } } }, true],
    ['$eq with a shorter array', { 'data.parcelas': { $eq: [{ n: 1, vl: 500 }] } }, false],
    [
      '$eq with the whole array',
      {
        'data.parcelas': {
          $eq: [
            { n: 1, vl: 500 },
            { n: 2, vl: 500 },
          ],
        },
      },
      true,
    ],
    [
      '$eq with an array of the same length, one item differing',
      {
        'data.parcelas': {
          $eq: [
            { n: 1, vl: 500 },
            { n: 2, vl: 501 },
          ],
        },
      },
      false,
    ],
    ['$eq with an array against an object', { 'data.proposal': { $eq: [] } }, false],
    ['$eq with an object against a string', { 'data.to': { $eq: { a: 1 } } }, false],
    ['$eq with an object against null', { 'data.proposal.no_conveniada': { $eq: {} } }, false],
    ['$neq with an object against a string', { 'data.to': { $neq: { a: 1 } } }, true],
    ['$eq with an object, one value differing', { 'data.parcelas.1': { $eq: { n: 2, vl: 501 } } }, false],
    ['$eq with an object, another key', { 'data.parcelas.1': { $eq: { n: 2, vx: 500 } } }, false],
    ['$eq on a missing path', { 'data.nope': { $eq: 'x' } }, false],
    ['$neq with another value', { 'data.to': { $neq: 'aprovada' } }, true],
    ['$neq with the same value', { 'data.to': { $neq: 'averbacao_solicitada' } }, false],
    ['$neq on a missing path', { 'data.nope': { $neq: 'x' } }, true],
    // $in / $nin
    ['$in containing it', { 'data.to': { $in: ['averbada', 'averbacao_solicitada'] } }, true],
    ['$in not containing it', { 'data.to': { $in: ['averbada', 'averbacao_negada'] } }, false],
    ['$in compares types', { 'data.nu_proposta': { $in: ['123'] } }, false],
    ['$in on a missing path', { 'data.nope': { $in: ['x', null] } }, false],
    ['$in with an object value', { 'data.proposal': { $in: ['x'] } }, false],
    ['$nin not containing it', { 'data.stage': { $nin: ['proposta', 'pagamento'] } }, true],
    ['$nin containing it', { 'data.stage': { $nin: ['averbacao'] } }, false],
    ['$nin on a missing path', { 'data.nope': { $nin: ['x'] } }, true],
    // $gt / $gte / $lt / $lte
    ['$gt on numbers', { 'data.proposal.vl_emprestimo': { $gt: 15000 } }, true],
    ['$gte on equal numbers', { 'data.proposal.vl_emprestimo': { $gte: 15000.5 } }, true],
    ['$lt on equal numbers', { 'data.proposal.vl_emprestimo': { $lt: 15000.5 } }, false],
    ['$lte on equal numbers', { 'data.proposal.vl_emprestimo': { $lte: 15000.5 } }, true],
    // Each comparison on both sides of the value, and at it.
    ['$gt on equal numbers', { 'data.proposal.vl_emprestimo': { $gt: 15000.5 } }, false],
    ['$gt on a greater operand', { 'data.proposal.vl_emprestimo': { $gt: 15001 } }, false],
    ['$gte on a greater operand', { 'data.proposal.vl_emprestimo': { $gte: 15001 } }, false],
    ['$gte on a smaller operand', { 'data.proposal.vl_emprestimo': { $gte: 15000 } }, true],
    ['$lt on a greater operand', { 'data.proposal.vl_emprestimo': { $lt: 15001 } }, true],
    ['$lt on a smaller operand', { 'data.proposal.vl_emprestimo': { $lt: 15000 } }, false],
    ['$lte on a smaller operand', { 'data.proposal.vl_emprestimo': { $lte: 15000 } }, false],
    ['ISO timestamps $gte', { created_at: { $gte: '2026-11-23T00:00:00.000Z' } }, true],
    ['ISO timestamps $lt', { created_at: { $lt: '2026-11-23T10:00:00.000Z' } }, false],
    ['a number against a string operand', { 'data.nu_proposta': { $gt: '100' } }, false],
    ['a string against a number operand', { created_at: { $gt: 5 } }, false],
    ['a boolean against a number operand', { 'data.applied': { $gte: 0 } }, false],
    ['a missing path against $lt', { 'data.nope': { $lt: 10 } }, false],
    ['a missing path against $gte', { 'data.nope': { $gte: '' } }, false],
    // $exists
    ['$exists on a present path', { 'data.evento': { $exists: true } }, true],
    ['$exists on null', { 'data.proposal.no_conveniada': { $exists: true } }, true],
    ['$exists: false on a missing path', { 'data.nope': { $exists: false } }, true],
    ['$exists: false on a present path', { 'data.evento': { $exists: false } }, false],
    // array indexes and own properties
    ['a numeric segment indexes an array', { 'data.parcelas.1.n': 2 }, true],
    ['an index past the end', { 'data.parcelas.2.n': { $exists: false } }, true],
    ['a non-canonical index', { 'data.parcelas.01.n': { $exists: false } }, true],
    ['an array has no length path', { 'data.parcelas.length': { $exists: false } }, true],
    ['a string has no length path', { 'type.length': { $exists: false } }, true],
    ['inherited methods are not paths', { 'data.hasOwnProperty': { $exists: false } }, true],
    ['nor on a number', { 'data.nu_proposta.toFixed': { $exists: false } }, true],
    // combining
    ['several keys are AND (all hold)', { type: 'proposal.changed', 'data.applied': true }, true],
    ['several keys are AND (one fails)', { type: 'proposal.changed', 'data.applied': false }, false],
    ['several operators are AND (all hold)', { 'data.nu_proposta': { $gt: 100, $lt: 200 } }, true],
    ['several operators are AND (one fails)', { 'data.nu_proposta': { $gt: 100, $lt: 120 } }, false],
    ['$or with one match', { $or: [{ 'data.to': 'averbada' }, { 'data.stage': 'averbacao' }] }, true],
    ['$or with no match', { $or: [{ 'data.to': 'averbada' }, { 'data.stage': 'pagamento' }] }, false],
    ['$and with one failing', { $and: [{ type: 'proposal.changed' }, { 'data.applied': false }] }, false],
    [
      '$or inside $and beside a path',
      {
        type: 'proposal.changed',
        $and: [
          { 'data.evento': { $in: ['averbacao.solicitada', 'averbacao.aprovada'] } },
          { $or: [{ 'data.proposal.vl_emprestimo': { $gte: 10000 } }, { 'data.applied': false }] },
        ],
      },
      true,
    ],
  ])('%s', (_label, filter, expected) => {
    expect(matchesFilter(compiled(filter), message)).toBe(expected);
  });

  it('reads a JSON `__proto__` key of an $eq literal as data', () => {
    const filter = compiled(JSON.parse('{"data.meta": {"$eq": {"__proto__": {"admin": true}}}}'));
    expect(matchesFilter(filter, JSON.parse('{"data": {"meta": {"__proto__": {"admin": true}}}}'))).toBe(
      true,
    );
    expect(matchesFilter(filter, { data: { meta: {} } })).toBe(false);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
  });

  it.each([null, 'proposal.changed', 42, [], [message]])(
    'a message that is not an object (%p) has no paths',
    (m) => {
      expect(matchesFilter(compiled({ type: { $exists: false } }), m)).toBe(true);
      expect(matchesFilter(compiled({ type: 'proposal.changed' }), m)).toBe(false);
    },
  );

  it('never throws, whatever the message', () => {
    const filters = [
      { 'data.to': { $in: ['a', 1, null], $neq: { a: [1] } } },
      { $or: [{ 'items.0.id': { $gte: 'a' } }, { 'a.b.c': { $exists: true } }] },
    ].map(compiled);
    fc.assert(
      fc.property(fc.jsonValue(), (m) => {
        for (const filter of filters) expect(typeof matchesFilter(filter, m)).toBe('boolean');
      }),
    );
  });
});

describe('compileFilter', () => {
  it('compiles to tagged nodes, so matching does no checking', () => {
    expect(compiled({ type: 'proposal.changed', 'data.nu_proposta': { $gte: 100 } })).toEqual({
      kind: 'and',
      filters: [
        { kind: 'path', path: ['type'], tests: [{ op: '$eq', value: 'proposal.changed' }] },
        { kind: 'path', path: ['data', 'nu_proposta'], tests: [{ op: '$gte', value: 100 }] },
      ],
    });
  });

  it('compiles a single path to that path alone', () => {
    expect(compiled({ type: 'proposal.changed' })).toEqual({
      kind: 'path',
      path: ['type'],
      tests: [{ op: '$eq', value: 'proposal.changed' }],
    });
  });

  it('reports the bad node apart from the detail too', () => {
    expect(compileFilter({ 'data.to': { $in: 'x' } }, WHERE)).toEqual({
      ok: false,
      error: `${WHERE}["data.to"].$in: expected an array`,
      path: `${WHERE}["data.to"].$in`,
      detail: 'expected an array',
    });
  });

  const ALLOWED = '$eq, $neq, $in, $nin, $gt, $gte, $lt, $lte, $exists';
  it.each<[string, unknown, string]>([
    ['not an object', 'type == "x"', ': expected a filter object'],
    ['an array', [{ type: 'x' }], ': expected a filter object'],
    ['an empty filter', {}, ': empty filter: give at least one path, $and or $or'],
    [
      '$in given a string, deep inside',
      { $and: [{ type: 'proposal.changed' }, { 'data.to': { $in: 'averbada' } }] },
      '.$and[1]["data.to"].$in: expected an array',
    ],
    ['$and empty', { $and: [] }, '.$and: expected an array of one or more filters'],
    ['$or not an array', { $or: { type: 'x' } }, '.$or: expected an array of one or more filters'],
    ['$and holding a string', { $and: ['type'] }, '.$and[0]: expected a filter object'],
    [
      '$and holding an empty filter',
      { $or: [{ type: 'x' }, {}] },
      '.$or[1]: empty filter: give at least one path, $and or $or',
    ],
    [
      'an operator at filter level',
      { $not: { type: 'x' } },
      `.$not: unknown operator at filter level (allowed here: $and, $or; ${ALLOWED} go inside a path's condition)`,
    ],
    [
      'an unknown operator',
      { 'data.to': { $regex: '^a' } },
      `["data.to"].$regex: unknown operator (allowed: ${ALLOWED})`,
    ],
    [
      'an operator without $',
      { 'data.proposal': { nu_cpf: '***.456.789-**' } },
      `["data.proposal"].nu_cpf: expected an operator (${ALLOWED}); to compare with an object, write {"$eq": {…}}`,
    ],
    [
      'an array literal',
      { 'data.to': ['averbada', 'negada'] },
      '["data.to"]: expected a condition object or a string, number, boolean or null (compare with an array using $eq or $in)',
    ],
    [
      'an empty condition',
      { 'data.to': {} },
      `["data.to"]: empty condition: give at least one of ${ALLOWED}`,
    ],
    [
      '$gt given a boolean',
      { 'data.nu_proposta': { $gt: true } },
      '["data.nu_proposta"].$gt: expected a number or a string',
    ],
    ['$lte given null', { created_at: { $lte: null } }, '.created_at.$lte: expected a number or a string'],
    [
      '$exists given a string',
      { 'data.x': { $exists: 'yes' } },
      '["data.x"].$exists: expected true or false',
    ],
    [
      '$in holding an object',
      { 'data.to': { $in: ['a', { b: 1 }] } },
      '["data.to"].$in[1]: expected a string, number, boolean or null',
    ],
    ['$nin empty', { 'data.to': { $nin: [] } }, '["data.to"].$nin: expected at least one item'],
    ['an empty path', { '': 'x' }, '[""]: empty path'],
    ['an empty segment', { 'data..to': 'x' }, '["data..to"]: empty segment in path'],
    ['a trailing dot', { 'data.': 'x' }, '["data."]: empty segment in path'],
    ['a leading dot', { '.data': 'x' }, '[".data"]: empty segment in path'],
    [
      'a __proto__ segment',
      JSON.parse('{"__proto__.polluted": 1}'),
      '["__proto__.polluted"]: path segment "__proto__" is not allowed',
    ],
    [
      'a __proto__ path',
      JSON.parse('{"__proto__": {"$exists": true}}'),
      '.__proto__: path segment "__proto__" is not allowed',
    ],
    [
      'a constructor segment',
      { 'data.constructor.name': 'Object' },
      '["data.constructor.name"]: path segment "constructor" is not allowed',
    ],
    ['a prototype segment', { 'a.prototype': 1 }, '["a.prototype"]: path segment "prototype" is not allowed'],
    [
      'an infinite number (JSON 1e999)',
      JSON.parse('{"data.nu_proposta": {"$eq": 1e999}}'),
      '["data.nu_proposta"].$eq: expected a JSON value',
    ],
    // A key that is not a plain name is quoted, cut after 64 characters.
    [
      'a 64-character dotted key, quoted whole',
      { [`data.${'k'.repeat(59)}`]: { $in: 'x' } },
      `["data.${'k'.repeat(59)}"].$in: expected an array`,
    ],
    [
      'a 65-character dotted key, cut',
      { [`data.${'k'.repeat(60)}`]: { $in: 'x' } },
      `["data.${'k'.repeat(59)}…"].$in: expected an array`,
    ],
    [
      'a line break in a key stays on one line',
      { 'data\nto': { $x: 1 } },
      '["data\\nto"].$x: unknown operator (allowed: ' + ALLOWED + ')',
    ],
  ])('%s', (_label, filter, expected) => {
    expect(compileError(filter)).toBe(WHERE + expected);
  });

  describe('bounds against a hostile configuration', () => {
    const { maxDepth, maxNodes, maxPathLength, maxPathSegments, maxListItems } = FILTER_LIMITS;
    const bigLiteral = Array.from({ length: 300 }, (_, i) => i);

    it.each<[string, unknown, string | null]>([
      [`${maxDepth} levels of $and`, nested(maxDepth), null],
      [
        `${maxDepth + 1} levels of $and`,
        nested(maxDepth + 1),
        `${'.$and[0]'.repeat(maxDepth)}.$and: $and/$or nested more than 8 deep`,
      ],
      [
        '10000 levels of $and',
        nested(10_000),
        `${'.$and[0]'.repeat(maxDepth)}.$and: $and/$or nested more than 8 deep`,
      ],
      [`${maxNodes - 1} paths (${maxNodes} nodes)`, manyPaths(maxNodes - 1), null],
      [
        `${maxNodes} paths`,
        manyPaths(maxNodes),
        `["data.k${maxNodes - 1}"]: filter has more than 200 nodes (filters, paths, operators, values inside $eq/$neq)`,
      ],
      [
        '300 filters in $or',
        { $or: bigLiteral.map((i) => ({ [`data.k${i}`]: i })) },
        '.$or[99]["data.k99"]: filter has more than 200 nodes (filters, paths, operators, values inside $eq/$neq)',
      ],
      [
        'a 300-item $eq array',
        { 'data.x': { $eq: bigLiteral } },
        '["data.x"].$eq[197]: filter has more than 200 nodes (filters, paths, operators, values inside $eq/$neq)',
      ],
      [
        'a $eq literal nested 10000 deep',
        { 'data.x': { $eq: JSON.parse('['.repeat(10_000) + ']'.repeat(10_000)) } },
        `["data.x"].$eq${'[0]'.repeat(198)}: filter has more than 200 nodes (filters, paths, operators, values inside $eq/$neq)`,
      ],
      [`a path of ${maxPathLength} characters`, { ['a'.repeat(maxPathLength)]: 1 }, null],
      [
        `a path of ${maxPathLength + 1} characters`,
        { ['a'.repeat(maxPathLength + 1)]: 1 },
        `["${'a'.repeat(64)}…"]: path longer than 256 characters`,
      ],
      [`${maxPathSegments} segments`, { [Array(maxPathSegments).fill('a').join('.')]: 1 }, null],
      [
        `${maxPathSegments + 1} segments`,
        {
          [Array(maxPathSegments + 1)
            .fill('a')
            .join('.')]: 1,
        },
        `["${Array(maxPathSegments + 1)
          .fill('a')
          .join('.')}"]: path has more than 16 segments`,
      ],
      [`$in with ${maxListItems} items`, { 'data.to': { $in: Array(maxListItems).fill('x') } }, null],
      [
        `$in with ${maxListItems + 1} items`,
        { 'data.to': { $in: Array(maxListItems + 1).fill('x') } },
        '["data.to"].$in: more than 1000 items',
      ],
      [
        `$nin with 100000 items`,
        { 'data.to': { $nin: Array(100_000).fill('x') } },
        '["data.to"].$nin: more than 1000 items',
      ],
    ])('%s', (_label, filter, expected) => {
      const result = compileFilter(filter, WHERE);
      expect(result.ok ? null : result.error).toBe(expected === null ? null : WHERE + expected);
    });
  });
});
