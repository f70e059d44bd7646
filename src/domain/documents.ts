import { cnpj, cpf } from 'cpf-cnpj-validator';

/**
 * Brazilian taxpayer numbers: CPF (people) and CNPJ (companies), including the alphanumeric CNPJ
 * the Receita Federal issues from July 2026 (Nota Técnica Conjunta COCAD/SUARA/RFB nº 49/2024):
 * 12 characters in [0-9A-Z] followed by two numeric check digits. The check digits are computed by
 * `cpf-cnpj-validator` (which knows the alphanumeric form, and also refuses the well-known fake
 * numbers such as 123.456.789-09); this module only fixes the accepted shapes.
 *
 * Pure and total: anything that is not a string of the right shape is simply invalid.
 */

const PUNCTUATION = /[.\-/\s]/g;

/** A CNPJ without punctuation: 12 of [0-9A-Z], then two numeric check digits. */
export const CNPJ_SHAPE = /^[0-9A-Z]{12}\d{2}$/;

/** The 11 digits of a CPF written with or without punctuation, or null when it has another shape. */
export function cpfDigits(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const s = value.replace(PUNCTUATION, '');
  return /^\d{11}$/.test(s) ? s : null;
}

/**
 * True for a CPF whose check digits match, with or without punctuation (`529.982.247-25`).
 * Repeated digits (`111.111.111-11`) and known fake numbers are invalid.
 */
export function isValidCpf(value: unknown): boolean {
  const s = cpfDigits(value);
  return s !== null && cpf.isValid(s);
}

/**
 * The 14 characters of a CNPJ, numeric or alphanumeric, with or without punctuation, letters
 * upper-cased; null when it has another shape (the check digits are always numeric).
 */
export function cnpjChars(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const s = value.replace(PUNCTUATION, '').toUpperCase();
  return CNPJ_SHAPE.test(s) ? s : null;
}

/**
 * True for a CNPJ whose check digits match: numeric (`11.222.333/0001-81`) or alphanumeric
 * (`12.ABC.345/01DE-35`), with or without punctuation, letters in either case. A CNPJ of one repeated
 * digit (`00.000.000/0000-00`) passes the arithmetic but is never issued: invalid.
 */
export function isValidCnpj(value: unknown): boolean {
  const s = cnpjChars(value);
  return s !== null && cnpj.isValid(s);
}
