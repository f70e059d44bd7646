import {
  canonicalNuProposta,
  dadosOf,
  normalizeAmount,
  normalizeCnpj,
  normalizeCpf,
  normalizeDados,
} from '../../../src/domain/normalize';

describe('normalizeCpf', () => {
  it.each([
    ['12345678909', '12345678909'],
    ['123.456.789-09', '12345678909'],
    [1234567890, '01234567890'], // a number lost its leading zero: padded back
    ['1234567890', '01234567890'],
    [0, '00000000000'],
    ['abc', null],
    ['123456789012', null],
    [123456789012, null],
    [99_999_999_999, '99999999999'], // the largest number of 11 digits
    [100_000_000_000, null],
    [-1, null],
    [1.5, null],
    [null, null],
    [{}, null],
  ])('%p → %p', (input, expected) => {
    expect(normalizeCpf(input)).toBe(expected);
  });
});

describe('normalizeCnpj', () => {
  it.each([
    ['11.222.333/0001-81', '11222333000181'],
    ['11222333000181', '11222333000181'],
    [11222333000181, '11222333000181'],
    [191000100, '00000191000100'],
    [0, '00000000000000'],
    [-1, null],
    [1.5, null],
    [123456789012345, null], // 15 digits
    ['12.ABC.345/01DE-35', '12ABC34501DE35'], // the alphanumeric CNPJ
    ['12abc34501de35', '12ABC34501DE35'],
    ['12ABC34501DEXX', null], // check digits stay numeric
    ['123', null],
    [null, null],
  ])('%p → %p', (input, expected) => {
    expect(normalizeCnpj(input)).toBe(expected);
  });
});

describe('normalizeAmount', () => {
  it.each([
    [15000.5, 15000.5],
    ['15000.50', 15000.5],
    [' 15000.50 ', 15000.5],
    ['-3', -3],
    ['12a', null],
    ['1.000,00', null],
    [Number.NaN, null],
    [Number.POSITIVE_INFINITY, null],
    [null, null],
  ])('%p → %p', (input, expected) => {
    expect(normalizeAmount(input)).toBe(expected);
  });
});

describe('canonicalNuProposta', () => {
  // Only a run of 1 to 15 digits is a number: text that Number() would also read ('1e3', '0x10') stays
  // text, and so do 16 digits (one rule with the delivery's key: delivery.test.ts).
  it.each([
    [4242, 4242],
    ['4242', 4242],
    [' 4242 ', 4242],
    ['ABC-9', 'ABC-9'],
    [' ABC-9 ', 'ABC-9'],
    ['123456789012345', 123456789012345],
    ['1234567890123456', '1234567890123456'],
    [2 ** 60, String(2 ** 60)],
    [12.5, '12.5'],
    [true, null],
    ['1e3', '1e3'],
    ['0x10', '0x10'],
    ['12.5', '12.5'],
    ['', null],
    [null, null],
  ])('%p → %p', (input, expected) => {
    expect(canonicalNuProposta(input)).toBe(expected);
  });
});

describe('normalizeDados', () => {
  it('reads the interface §2.5 fields and ignores the rest', () => {
    expect(
      normalizeDados({
        nu_proposta: '42',
        nu_cpf: 12345678909,
        st_proposta: 'aprovada',
        vl_emprestimo: '1000',
        no_conveniada: 'ACME',
        campo_novo: { x: 1 },
      }),
    ).toEqual({
      nu_proposta: 42,
      uuid: null,
      nu_cpf: '12345678909',
      nu_cnpj_conveniada: null,
      vl_emprestimo: 1000,
      qt_parcela: null,
      no_conveniada: 'ACME',
      st_proposta: 'aprovada',
      requestId: null,
    });
  });

  it('reads every field by its own name, numbers sent as digits included', () => {
    expect(
      normalizeDados({
        nu_proposta: 'ABC-9',
        uuid: 'u-1',
        nu_cpf: '123.456.789-09',
        nu_cnpj_conveniada: '11.222.333/0001-81',
        vl_emprestimo: 1000.5,
        qt_parcela: ' 24 ',
        no_conveniada: 'ACME',
        st_proposta: 'em_analise',
        requestId: 'req-9',
      }),
    ).toEqual({
      nu_proposta: 'ABC-9',
      uuid: 'u-1',
      nu_cpf: '12345678909',
      nu_cnpj_conveniada: '11222333000181',
      vl_emprestimo: 1000.5,
      qt_parcela: 24,
      no_conveniada: 'ACME',
      st_proposta: 'em_analise',
      requestId: 'req-9',
    });
  });

  it.each<[unknown, number | null]>([
    [24, 24],
    ['24', 24],
    [' 24 ', 24],
    ['2a', null],
    ['a2', null],
    ['-2', null],
    ['1e3', null],
    ['0x10', null],
    [2.5, null],
  ])('qt_parcela %p → %p', (qt, expected) => {
    expect(normalizeDados({ qt_parcela: qt }).qt_parcela).toBe(expected);
  });

  it.each([[undefined], [null], ['x'], [[1, 2]], [{ __proto__: { nu_cpf: '12345678909' } }]])(
    'is total on %p',
    (input) => {
      expect(normalizeDados(input).nu_cpf).toBeNull();
    },
  );
});

describe('dadosOf', () => {
  it('never throws', () => {
    expect(dadosOf('{"dados":{"a":1}}')).toEqual({ a: 1 });
    expect(dadosOf('not json')).toBeUndefined();
    expect(dadosOf(Buffer.from([0xff]))).toBeUndefined();
    expect(dadosOf(null)).toBeUndefined();
  });
});
