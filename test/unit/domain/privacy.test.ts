import { maskCpf } from '../../../src/domain/privacy';

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
