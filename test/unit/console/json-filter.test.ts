import { parseJsonFilter } from '../../../src/http/console/json-filter';

describe('parseJsonFilter', () => {
  it.each([
    [
      '{"dados":{"no_conveniada":"ACME"}}',
      [{ path: '$."dados"."no_conveniada"', keys: ['dados', 'no_conveniada'], value: 'ACME' }],
    ],
    [
      '{"evento":"proposta.criada","dados":{"vl":15000.5,"ok":true,"x":null}}',
      [
        { path: '$."evento"', keys: ['evento'], value: 'proposta.criada' },
        { path: '$."dados"."vl"', keys: ['dados', 'vl'], value: 15000.5 },
        { path: '$."dados"."ok"', keys: ['dados', 'ok'], value: true },
        { path: '$."dados"."x"', keys: ['dados', 'x'], value: null },
      ],
    ],
    ['{"a.b":{"$c":1}}', [{ path: '$."a.b"."$c"', keys: ['a.b', '$c'], value: 1 }]],
  ])('%s → leaves', (text, leaves) => {
    expect(parseJsonFilter(text)).toEqual({ ok: true, leaves });
  });

  it.each([
    ['{bad', 'not valid JSON'],
    ['[1]', 'expected a non-empty object'],
    ['{}', 'expected a non-empty object'],
    ['"x"', 'expected a non-empty object'],
    ['{"a":[1]}', 'arrays cannot be matched'],
    ['{"a":{}}', 'empty object'],
    ['{"a\\"b":1}', 'cannot be matched'],
    ['{"":1}', 'cannot be matched'],
    ['{"a":1e999}', 'out of range'],
    [`{"a":${'{"a":'.repeat(9)}1${'}'.repeat(9)}}`, 'levels deep'],
    [
      JSON.stringify(Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`k${i}`, i]))),
      'at most 8 values',
    ],
    [`{"a":"${'x'.repeat(2100)}"}`, 'at most 2000 characters'],
  ])('%s is refused (%s)', (text, message) => {
    const result = parseJsonFilter(text);
    expect(result.ok).toBe(false);
    expect(result.ok ? '' : result.message).toContain(message);
  });
});
