import { isObject, nonBlankString, nonBlankText, own, parseJsonOrUndefined } from '../../../src/domain/json';

// The accessors every layer uses on an untrusted payload, row by row (issue 37: nonBlankText's
// number test survived the mutation run, nothing fed it a non-finite number or a non-string).
describe('nonBlankString and nonBlankText', () => {
  it.each<[string, unknown, string | null, string | null]>([
    ['a string', 'abc', 'abc', 'abc'],
    ['a string with spaces around, kept as is', ' abc ', ' abc ', ' abc '],
    ['white space only', ' \t\n', null, null],
    ['empty', '', null, null],
    ['a whole number', 123, null, '123'],
    ['a fraction', 1.5, null, '1.5'],
    ['zero', 0, null, '0'],
    ['NaN', Number.NaN, null, null],
    ['Infinity', Number.POSITIVE_INFINITY, null, null],
    ['null', null, null, null],
    ['undefined', undefined, null, null],
    ['true', true, null, null],
    ['an object', { a: 1 }, null, null],
    ['an array', ['a'], null, null],
  ])('%s', (_name, value, asString, asText) => {
    expect(nonBlankString(value)).toBe(asString);
    expect(nonBlankText(value)).toBe(asText);
  });
});

describe('isObject and own', () => {
  it.each<[string, unknown, boolean]>([
    ['an object', { a: 1 }, true],
    ['an empty object', {}, true],
    ['an array', [1], false],
    ['null', null, false],
    ['a string', 'a', false],
  ])('isObject: %s', (_name, value, expected) => {
    expect(isObject(value)).toBe(expected);
  });

  it('reads own properties only: __proto__ and inherited names are data or absent', () => {
    const parsed = JSON.parse('{"__proto__": {"x": 1}, "a": 2}') as unknown;
    expect(own(parsed, 'a')).toBe(2);
    expect(own(parsed, '__proto__')).toEqual({ x: 1 });
    expect(own(parsed, 'x')).toBeUndefined();
    expect(own({}, 'toString')).toBeUndefined();
    expect(own(['a'], '0')).toBeUndefined();
    expect(own(null, 'a')).toBeUndefined();
  });
});

describe('parseJsonOrUndefined', () => {
  it.each<[string, unknown]>([
    ['{"a":1}', { a: 1 }],
    ['null', null],
    ['"x"', 'x'],
    ['{', undefined],
    ['', undefined],
  ])('%j', (text, expected) => {
    expect(parseJsonOrUndefined(text)).toEqual(expected);
  });
});
