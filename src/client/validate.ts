import { cnpjChars, cpfDigits, isValidCnpj, isValidCpf } from '../domain/documents';
import { isObject, nonBlankString } from '../domain/json';
import { type FieldIssue, InvalidRequestError } from './errors';
import { parseHttpUrl } from './urls';

/**
 * Local checks before anything is sent (interface §2.1, §8), so that a typo costs no request and no
 * business error. Values are never repeated in the messages (a CPF is personal data).
 */

/** interface §2.1 dados_bancarios: which sub-fields are required is not shown; see `validateProposal`. */
export interface DadosBancarios {
  pix?: string;
  banco?: string;
  agencia?: string;
  conta?: string;
  [extra: string]: unknown;
}

/** Body of `POST /api/v1/propostas` (interface §2.1). Extra fields are sent as given. */
export interface ProposalRequest {
  nu_cpf: string;
  nu_cnpj_conveniada: string;
  vl_emprestimo: number;
  qt_parcela: number;
  dados_bancarios: DadosBancarios;
  [extra: string]: unknown;
}

/**
 * Checks a proposal and returns the body to send: CPF as 11 digits, CNPJ as 14 characters without
 * punctuation (letters upper-cased), everything else unchanged. Throws InvalidRequestError listing
 * every bad field.
 */
export function validateProposal(input: unknown): ProposalRequest {
  if (!isObject(input))
    throw new InvalidRequestError('proposal', [{ field: 'body', problem: 'expected an object' }]);
  const issues: FieldIssue[] = [];

  const cpf = cpfDigits(input.nu_cpf);
  if (cpf === null) issues.push({ field: 'nu_cpf', problem: 'expected 11 digits (punctuation allowed)' });
  else if (!isValidCpf(cpf)) issues.push({ field: 'nu_cpf', problem: 'check digits do not match' });

  const cnpj = cnpjChars(input.nu_cnpj_conveniada);
  if (cnpj === null) {
    issues.push({
      field: 'nu_cnpj_conveniada',
      problem: 'expected 14 characters: 12 digits or letters, then 2 digits (punctuation allowed)',
    });
  } else if (!isValidCnpj(cnpj)) {
    issues.push({ field: 'nu_cnpj_conveniada', problem: 'check digits do not match' });
  }

  const amount = input.vl_emprestimo;
  if (typeof amount !== 'number' || !Number.isFinite(amount) || amount <= 0) {
    issues.push({ field: 'vl_emprestimo', problem: 'expected a positive number' });
  }

  const parcelas = input.qt_parcela;
  if (typeof parcelas !== 'number' || !Number.isInteger(parcelas) || parcelas < 6 || parcelas > 96) {
    issues.push({ field: 'qt_parcela', problem: 'expected an integer from 6 to 96' });
  }

  // interface §2.1 does not say which sub-fields are required; a payout needs a pix key or a full account.
  const bank = input.dados_bancarios;
  if (!isObject(bank)) {
    issues.push({ field: 'dados_bancarios', problem: 'expected an object' });
  } else if (!hasPayoutTarget(bank)) {
    issues.push({ field: 'dados_bancarios', problem: 'expected pix, or banco, agencia and conta' });
  }

  if (issues.length > 0 || cpf === null || cnpj === null) throw new InvalidRequestError('proposal', issues);
  return { ...input, nu_cpf: cpf, nu_cnpj_conveniada: cnpj } as ProposalRequest;
}

function hasPayoutTarget(bank: Record<string, unknown>): boolean {
  const account = [bank.banco, bank.agencia, bank.conta];
  return nonBlankString(bank.pix) !== null || account.every((field) => nonBlankString(field) !== null);
}

/** interface §2.4. */
export interface WebhookRegistration {
  url: string;
  eventos: readonly string[];
  secret: string;
}

export function validateWebhookRegistration(input: unknown): WebhookRegistration {
  if (!isObject(input))
    throw new InvalidRequestError('webhook', [{ field: 'body', problem: 'expected an object' }]);
  const issues: FieldIssue[] = [];
  if (parseHttpUrl(input.url) === null) issues.push({ field: 'url', problem: 'expected an http(s) URL' });
  const eventos = input.eventos;
  if (!Array.isArray(eventos) || eventos.length === 0 || !eventos.every((e) => nonBlankString(e) !== null)) {
    issues.push({ field: 'eventos', problem: 'expected a non-empty list of event names' });
  }
  if (nonBlankString(input.secret) === null)
    issues.push({ field: 'secret', problem: 'expected a non-empty string' });
  if (issues.length > 0) throw new InvalidRequestError('webhook', issues);
  return input as unknown as WebhookRegistration;
}

/** A requestId is a path segment: `.` and `..` would be resolved away by the URL parser. */
export function validateRequestId(requestId: unknown): string {
  const id = nonBlankString(requestId);
  if (id === null || id === '.' || id === '..') {
    throw new InvalidRequestError('request status query', [
      { field: 'requestId', problem: 'expected a non-empty identifier' },
    ]);
  }
  return id;
}
