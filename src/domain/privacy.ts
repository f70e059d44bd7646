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
