import { cnpjChars } from './documents';
import { nonBlankText, own, parseJsonOrUndefined } from './json';

/**
 * Payload normalisation (interface §2.1, §2.5): the few fields the logic reads, in one canonical form.
 * Everything else stays in the stored raw body and is ignored by the logic (interface §9: new fields appear
 * without notice). Pure and total: unknown shapes give nulls, never exceptions.
 */

export interface ProposalData {
  nu_proposta: number | string | null;
  uuid: string | null;
  /** 11 digits as text: a CPF sent as a number loses its leading zeros, so it is padded back. */
  nu_cpf: string | null;
  /** 14 characters, digits or (new format) upper-case letters in the first 12 positions. */
  nu_cnpj_conveniada: string | null;
  vl_emprestimo: number | null;
  qt_parcela: number | null;
  no_conveniada: string | null;
  st_proposta: string | null;
  requestId: string | null;
}

export function normalizeCpf(value: unknown): string | null {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0 || value > 99_999_999_999) return null;
    return String(value).padStart(11, '0');
  }
  if (typeof value !== 'string') return null;
  const digits = value.replace(/[.\-\s]/g, '');
  if (!/^\d{1,11}$/.test(digits)) return null;
  return digits.padStart(11, '0');
}

export function normalizeCnpj(value: unknown): string | null {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) return null;
    const s = String(value).padStart(14, '0');
    return s.length === 14 ? s : null;
  }
  // The alphanumeric CNPJ (from July 2026): 12 letters or digits, then two check digits.
  return cnpjChars(value);
}

export function normalizeAmount(value: unknown): number | null {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  // Number() ignores the blanks trim() removes (both: WhiteSpace and LineTerminator, ECMA-262).
  if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value.trim())) return Number(value);
  return null;
}

function integer(value: unknown): number | null {
  const n = typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value;
  return typeof n === 'number' && Number.isSafeInteger(n) ? n : null;
}

/**
 * A proposal number in its one form, wherever it is read (a delivery, its `dados`, a registry poll):
 * an integer when it is one (also sent as 1 to 15 digits; a longer run stays text, as a number would
 * lose digits), else its trimmed text; blank or neither is null.
 */
export function canonicalNuProposta(value: unknown): number | string | null {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? value : String(value);
  if (typeof value !== 'string') return null;
  const trimmed = value.trim();
  if (trimmed === '') return null;
  return /^\d{1,15}$/.test(trimmed) ? Number(trimmed) : trimmed;
}

/** Reads `dados` of a delivery (or a creation request/response) into ProposalData. */
export function normalizeDados(dados: unknown): ProposalData {
  return {
    nu_proposta: canonicalNuProposta(own(dados, 'nu_proposta')),
    uuid: nonBlankText(own(dados, 'uuid')),
    nu_cpf: normalizeCpf(own(dados, 'nu_cpf')),
    nu_cnpj_conveniada: normalizeCnpj(own(dados, 'nu_cnpj_conveniada')),
    vl_emprestimo: normalizeAmount(own(dados, 'vl_emprestimo')),
    qt_parcela: integer(own(dados, 'qt_parcela')),
    no_conveniada: nonBlankText(own(dados, 'no_conveniada')),
    st_proposta: nonBlankText(own(dados, 'st_proposta')),
    requestId: nonBlankText(own(dados, 'requestId')),
  };
}

/** Parses a stored body and returns its `dados` (or undefined). Never throws. */
export function dadosOf(body: string | Buffer | null): unknown {
  if (body === null) return undefined;
  return own(parseJsonOrUndefined(typeof body === 'string' ? body : body.toString('utf8')), 'dados');
}
