/**
 * CPF is personal data under the LGPD: logs may show only the middle digits, the way Brazilian
 * services print it on receipts (`***.456.789-**`).
 */
export function maskCpf(value: unknown): string {
  if (value === null || value === undefined) return '';
  const digits = String(value).replace(/\D/g, '');
  if (digits.length !== 11) return '***';
  return `***.${digits.slice(3, 6)}.${digits.slice(6, 9)}-**`;
}

/** For secrets, tokens and signatures: say whether one is there, never what it is. */
export function redactSecret(value: unknown): string {
  return value === undefined || value === null || value === '' ? '' : '[redacted]';
}
