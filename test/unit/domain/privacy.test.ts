import {
  maskCpf,
  maskCpfsInBytes,
  maskCpfsInJsonText,
  maskCpfsInText,
  withMaskedCpf,
  withMaskedResultBody,
} from '../../../src/domain/privacy';

/**
 * Every masking helper, in the fast tier (issue 37): a CPF (11 digits, plain or `000.000.000-00`)
 * shows only its middle digits; runs of other lengths (10, 12, 14 digits: a phone, a CNPJ, an
 * account) are not CPFs and stay as they are — a mask that took 11 of 12 digits would still show
 * one, and one that masked every run would hide a CNPJ the operator needs.
 */

const CPF = '12345678909';
const MASKED = '***.456.789-**';

describe('maskCpf', () => {
  it.each<[unknown, string]>([
    [CPF, MASKED],
    ['123.456.789-09', MASKED],
    [12345678909, MASKED],
    [' 123 456 789 09 ', MASKED],
    ['98765432100', '***.654.321-**'],
    // Not 11 digits: nothing of it is shown.
    ['123', '***'],
    ['1234567890', '***'],
    ['123456789012', '***'],
    ['12345678000195', '***'],
    ['12.345.678/0001-95', '***'],
    [123456789012, '***'],
    ['', '***'],
    ['abc', '***'],
    [null, ''],
    [undefined, ''],
  ])('%p → %p', (input, expected) => {
    expect(maskCpf(input)).toBe(expected);
  });
});

describe('maskCpfsInText: CPFs inside free text', () => {
  it.each<[string, string]>([
    [`cpf ${CPF}`, `cpf ${MASKED}`],
    [`${CPF} no início`, `${MASKED} no início`],
    ['servidor 123.456.789-09, ok', `servidor ${MASKED}, ok`],
    [`cpf=${CPF}&x`, `cpf=${MASKED}&x`],
    [`dois: ${CPF} e 98765432100.`, `dois: ${MASKED} e ***.654.321-**.`],
    [`GET /console/proposals/${CPF}`, `GET /console/proposals/${MASKED}`],
    [`nu_cpf:${CPF}`, `nu_cpf:${MASKED}`],
    // Runs of other lengths are not CPFs: kept whole, not cut to 11 digits.
    ['telefone 1234567890', 'telefone 1234567890'],
    ['conta 123456789012', 'conta 123456789012'],
    ['cnpj 12345678000195', 'cnpj 12345678000195'],
    ['cnpj 12.345.678/0001-95', 'cnpj 12.345.678/0001-95'],
    ['1234567890123', '1234567890123'],
    ['no digits at all', 'no digits at all'],
    ['', ''],
  ])('%p → %p', (input, expected) => {
    expect(maskCpfsInText(input)).toBe(expected);
  });
});

describe('maskCpfsInJsonText', () => {
  it.each([
    ['{"dados":{"nu_cpf":"12345678909"}}', '{"dados":{"nu_cpf":"***.456.789-**"}}'],
    // A CPF sent as a number becomes the masked string: the text stays JSON.
    ['{"nu_cpf": 12345678909, "n": 123456789012}', '{"nu_cpf": "***.456.789-**", "n": 123456789012}'],
    [
      '{"obs":"cpf 123.456.789-09 \\"x\\" 12345678909"}',
      '{"obs":"cpf ***.456.789-** \\"x\\" ***.456.789-**"}',
    ],
    ['{"v":1.12345678909}', '{"v":1.12345678909}'],
    ['{"v":12345678909.5}', '{"v":12345678909.5}'],
    ['cpf=12345678909; not json', 'cpf="***.456.789-**"; not json'],
    // Runs of 12 and 14 digits, as numbers and inside strings, are not CPFs.
    ['{"conta":123456789012,"cnpj":12345678000195}', '{"conta":123456789012,"cnpj":12345678000195}'],
    ['{"conta":"123456789012","cnpj":"12345678000195"}', '{"conta":"123456789012","cnpj":"12345678000195"}'],
    ['{"obs":"cnpj 12345678000195 e cpf 12345678909"}', '{"obs":"cnpj 12345678000195 e cpf ***.456.789-**"}'],
    ['[12345678909,123456789012]', '["***.456.789-**",123456789012]'],
    ['{"k12345678909":1}', '{"k***.456.789-**":1}'],
  ])('%s → %s', (input, expected) => {
    expect(maskCpfsInJsonText(input)).toBe(expected);
  });

  it('keeps valid JSON valid', () => {
    const text = JSON.stringify({ a: [12345678909, '12345678909', { cpf: 98765432100 }] });
    expect(JSON.parse(maskCpfsInJsonText(text))).toEqual({
      a: ['***.456.789-**', '***.456.789-**', { cpf: '***.654.321-**' }],
    });
  });
});

describe('maskCpfsInBytes', () => {
  it('masks the digits and keeps every other byte', () => {
    const bytes = Buffer.concat([
      Buffer.from([0xff, 0xfe]),
      Buffer.from(' 12345678909 '),
      Buffer.from([0x80]),
    ]);
    expect(maskCpfsInBytes(bytes)).toEqual(
      Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(' ***.456.789-** '), Buffer.from([0x80])]),
    );
  });

  it.each([
    ['123.456.789-09', MASKED],
    ['123456789012', '123456789012'],
    ['12345678000195', '12345678000195'],
  ])('%s in bytes → %s', (digits, expected) => {
    const bytes = Buffer.concat([Buffer.from([0xc3]), Buffer.from(`=${digits};`)]);
    expect(maskCpfsInBytes(bytes)).toEqual(
      Buffer.concat([Buffer.from([0xc3]), Buffer.from(`=${expected};`)]),
    );
  });
});

describe('withMaskedCpf: a record shown to people', () => {
  it.each<[unknown, string]>([
    [CPF, MASKED],
    [12345678909, MASKED],
    ['123.456.789-09', MASKED],
    ['123456789012', '***'],
    [null, ''],
  ])('nu_cpf %p → %p, every other field as it was', (nuCpf, expected) => {
    const record = { nu_proposta: 7, status: 'aprovada', nu_cpf: nuCpf };
    expect(withMaskedCpf(record)).toEqual({ nu_proposta: 7, status: 'aprovada', nu_cpf: expected });
    expect(record.nu_cpf).toBe(nuCpf); // a copy: the record itself is untouched
  });
});

describe('withMaskedResultBody: an averbação as shown to people', () => {
  const row = (result_body: string | null) => ({ request_id: 'req-1', status: 'completed', result_body });

  it.each<[string | null, string | null]>([
    [null, null],
    ['{"servidor":{"cpf":"123.456.789-09"}}', '{"servidor":{"cpf":"***.456.789-**"}}'],
    ['{"servidor":{"cpf":12345678909}}', '{"servidor":{"cpf":"***.456.789-**"}}'],
    ['{"erro":"cpf 12345678909 não encontrado"}', '{"erro":"cpf ***.456.789-** não encontrado"}'],
    ['{"cnpj":"12345678000195","conta":123456789012}', '{"cnpj":"12345678000195","conta":123456789012}'],
    ['texto 12345678909', 'texto "***.456.789-**"'],
  ])('%p → %p', (body, expected) => {
    const original = row(body);
    expect(withMaskedResultBody(original)).toEqual({
      request_id: 'req-1',
      status: 'completed',
      result_body: expected,
    });
    expect(original.result_body).toBe(body);
  });
});
