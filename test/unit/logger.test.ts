import { createLogger } from '../../src/logger';

/**
 * The logger's safety net (src/logger.ts): a CPF under `nu_cpf` or `cpf` is masked, secrets,
 * tokens and signatures censored, whatever the caller passed — the code never logs them in the
 * first place, so only this test shows the net holds (issue 37: privacy pinned by the fast tier).
 */

function logged(fields: Record<string, unknown>): Record<string, unknown> {
  const lines: string[] = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(line) } as never);
  logger.info(fields, 'a line');
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0] as string) as Record<string, unknown>;
}

describe('createLogger', () => {
  it.each<[string, unknown, unknown]>([
    ['nu_cpf', '12345678909', '***.456.789-**'],
    ['nu_cpf', '123.456.789-09', '***.456.789-**'],
    ['cpf', 12345678909, '***.456.789-**'],
    ['cpf', '123456789012', '***'],
    ['secret', 's3cr3t', '[redacted]'],
    ['token', 'tok', '[redacted]'],
    ['authorization', 'Bearer abc', '[redacted]'],
    ['signature', 'sha256=abc', '[redacted]'],
  ])('%s: %p is logged as %p', (key, value, shown) => {
    const line = logged({ [key]: value, nu_proposta: 7 });
    expect(line[key]).toEqual(shown);
    expect(line.nu_proposta).toBe(7);
    expect(JSON.stringify(line)).not.toContain('12345678909');
  });
});
