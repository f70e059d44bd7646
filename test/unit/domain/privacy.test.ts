import { maskCpf, maskCpfsInBytes, maskCpfsInJsonText } from '../../../src/domain/privacy';

describe('maskCpf', () => {
  it.each([
    ['12345678909', '***.456.789-**'],
    ['123.456.789-09', '***.456.789-**'],
    [12345678909, '***.456.789-**'],
    ['123', '***'],
    [null, ''],
  ])('%p → %p', (input, expected) => {
    expect(maskCpf(input)).toBe(expected);
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
    ['cpf=12345678909; not json', 'cpf="***.456.789-**"; not json'],
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
});
