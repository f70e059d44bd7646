/**
 * CPF is personal data under the LGPD: logs, answers and messages may show only the middle digits,
 * the way Brazilian services print it on receipts (`***.456.789-**`).
 */
export function maskCpf(value: unknown): string {
  if (value === null || value === undefined) return '';
  const digits = String(value).replace(/\D/g, '');
  if (digits.length !== 11) return '***';
  return `***.${digits.slice(3, 6)}.${digits.slice(6, 9)}-**`;
}

/** Every CPF written in a free text (11 digits, or `000.000.000-00`), masked as {@link maskCpf} does. */
export function maskCpfsInText(text: string): string {
  return text.replace(/(?<!\d)(?:\d{3}\.\d{3}\.\d{3}-\d{2}|\d{11})(?!\d)/g, (match) => maskCpf(match));
}

/** A copy of a record with its `nu_cpf` masked, for answers and listings shown to people. */
export function withMaskedCpf<T extends { nu_cpf: unknown }>(
  record: T,
): Omit<T, 'nu_cpf'> & { nu_cpf: string } {
  return { ...record, nu_cpf: maskCpf(record.nu_cpf) };
}

/**
 * Every CPF in a JSON text masked, the text otherwise as it was: inside a string as
 * {@link maskCpfsInText} does, and an 11-digit number (a CPF sent as a number) replaced by the
 * masked string, so that the text stays JSON. Also safe on text that is not JSON (more is masked,
 * never less).
 */
export function maskCpfsInJsonText(text: string): string {
  return text.replace(/("(?:[^"\\]|\\.)*")|(?<![\w.])\d{11}(?![\w.])/g, (match, quoted?: string) =>
    quoted !== undefined ? maskCpfsInText(match) : JSON.stringify(maskCpf(match)),
  );
}

/** The same on bytes that are not UTF-8 (read one byte per character, so every other byte stays). */
export function maskCpfsInBytes(bytes: Buffer): Buffer {
  return Buffer.from(maskCpfsInText(bytes.toString('latin1')), 'latin1');
}

/** An averbação as shown to people: the registry's answer (`result_body`) with any CPF in it masked. */
export function withMaskedResultBody<T extends { result_body: string | null }>(row: T): T {
  return { ...row, result_body: row.result_body === null ? null : maskCpfsInJsonText(row.result_body) };
}
