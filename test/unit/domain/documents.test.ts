import { join } from 'node:path';

import fc from 'fast-check';
import { cnpj, cpf } from 'cpf-cnpj-validator';
import * as Documents from '../../../src/domain/documents';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(Documents, join(__dirname, '../../../src/domain/documents'));
const { cnpjChars, cpfDigits, isValidCnpj, isValidCpf } = Documents;

describe('isValidCpf', () => {
  it.each([
    ['529.982.247-25', true],
    ['52998224725', true],
    ['111.444.777-35', true],
    ['390.533.447-05', true],
    ['123.456.789-09', false], // arithmetically valid, but a well-known fake: refused
    [' 529.982.247-25 ', true],
    ['529.982.247-24', false], // second check digit wrong
    ['529.982.247-15', false], // first check digit wrong
    ['52998224726', false],
    ['111.111.111-11', false], // repeated digits pass the arithmetic, never issued
    ['000.000.000-00', false],
    ['99999999999', false],
    ['5299822472', false], // 10 digits: not padded, a missing digit is an error here
    ['529982247250', false],
    ['529.982.247-2A', false],
    ['', false],
    [52998224725, false], // not a string
    [null, false],
    [undefined, false],
  ])('%p → %p', (input, expected) => {
    expect(isValidCpf(input)).toBe(expected);
  });
});

describe('isValidCnpj', () => {
  it.each([
    ['11.222.333/0001-81', true],
    ['11222333000181', true],
    ['11.444.777/0001-61', true],
    ['00.000.000/0001-91', true], // leading zeros
    ['12.ABC.345/01DE-35', true], // the Receita Federal's alphanumeric example
    ['12ABC34501DE35', true],
    ['12abc34501de35', true], // letters in either case
    ['11.222.333/0001-82', false],
    ['11.222.333/0001-91', false],
    ['12.ABC.345/01DE-36', false],
    ['12.ABC.345/01DF-35', false], // one base letter changed
    ['12ABC34501DEXX', false], // check digits are always numeric
    ['12.ABÇ.345/01DE-35', false],
    ['00.000.000/0000-00', false], // repeated digit, never issued
    ['11111111111111', false],
    ['1122233300018', false], // 13 characters
    ['112223330001811', false],
    ['', false],
    [11222333000181, false], // not a string
    [null, false],
  ])('%p → %p', (input, expected) => {
    expect(isValidCnpj(input)).toBe(expected);
  });
});

describe('shapes', () => {
  it('strips punctuation and upper-cases', () => {
    expect(cpfDigits('529.982.247-25')).toBe('52998224725');
    expect(cnpjChars('12.abc.345/01de-35')).toBe('12ABC34501DE35');
    expect(cpfDigits('529.982.247')).toBeNull();
  });

  it.each([
    ['123456789012', null],
    ['12345678909012', null],
    ['x12345678909', null],
    ['12345678909x', null],
    ['1234567890', null],
    [' 123.456.789-09 ', '12345678909'],
  ])('cpfDigits(%p) → %p: 11 digits and nothing else', (input, expected) => {
    expect(cpfDigits(input)).toBe(expected);
    expect(cnpjChars('12ABC34501DEXX')).toBeNull();
    // Exactly 14 characters: one more before or after is not a CNPJ.
    expect(cnpjChars('112ABC34501DE35')).toBeNull();
    expect(cnpjChars('12ABC34501DE351')).toBeNull();
  });
});

describe('properties', () => {
  const seeds = fc.integer({ min: 0, max: 1_000_000 });

  it('a generated CPF is valid, and changing one of its check digits makes it invalid', () => {
    fc.assert(
      fc.property(
        seeds,
        fc.integer({ min: 9, max: 10 }),
        fc.integer({ min: 1, max: 9 }),
        (_seed, pos, delta) => {
          const valid = cpf.generate();
          expect(isValidCpf(valid)).toBe(true);
          const changed =
            valid.slice(0, pos) + String((Number(valid[pos]) + delta) % 10) + valid.slice(pos + 1);
          expect(isValidCpf(changed)).toBe(false);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a generated (alphanumeric) CNPJ is valid in either case; other check digits are not', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 99 }), (delta) => {
        const valid = cnpj.generate();
        expect(isValidCnpj(valid)).toBe(true);
        expect(isValidCnpj(valid.toLowerCase())).toBe(true);
        const dv = Number(valid.slice(12));
        const wrong = String((dv + delta) % 100).padStart(2, '0');
        expect(isValidCnpj(valid.slice(0, 12) + wrong)).toBe(false);
      }),
      { numRuns: 300 },
    );
  });
});
