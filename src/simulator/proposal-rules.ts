import { CNPJ_SHAPE, cpfDigits } from '../domain/documents';
import { isObject } from '../domain/json';

/** The proposal creation request of interface §2.1, once its rules hold. */
export interface ProposalInput {
  nu_cpf: string;
  nu_cnpj_conveniada: string;
  vl_emprestimo: number;
  qt_parcela: number;
  dados_bancarios: Record<string, unknown>;
}

export type ProposalValidation =
  | { ok: true; value: ProposalInput }
  | { ok: false; status: 400; error: 'VALIDATION_ERROR'; field: string; message: string }
  | { ok: false; status: 422; error: 'BUSINESS_RULE_VIOLATION'; message: string };

const missing = (value: unknown) => value === undefined || value === null || value === '';

/** The first field of interface §2.1 that breaks its rule: [field, message], or null. */
function firstInvalidField(body: Record<string, unknown>): [string, string] | null {
  const { nu_cpf, nu_cnpj_conveniada, vl_emprestimo, qt_parcela, dados_bancarios } = body;
  if (missing(nu_cpf)) return ['nu_cpf', 'nu_cpf é obrigatório'];
  // interface §2.1: "digits only", so a CPF written with punctuation is refused.
  if (cpfDigits(nu_cpf) !== nu_cpf)
    return ['nu_cpf', 'nu_cpf deve conter exatamente 11 dígitos, sem pontuação'];
  if (missing(nu_cnpj_conveniada)) return ['nu_cnpj_conveniada', 'nu_cnpj_conveniada é obrigatório'];
  if (typeof nu_cnpj_conveniada !== 'string' || !CNPJ_SHAPE.test(nu_cnpj_conveniada))
    return [
      'nu_cnpj_conveniada',
      'nu_cnpj_conveniada deve ter 14 caracteres (dígitos ou o formato alfanumérico), sem pontuação',
    ];
  if (vl_emprestimo === undefined || vl_emprestimo === null)
    return ['vl_emprestimo', 'vl_emprestimo é obrigatório'];
  if (typeof vl_emprestimo !== 'number' || !Number.isFinite(vl_emprestimo) || vl_emprestimo <= 0)
    return ['vl_emprestimo', 'vl_emprestimo deve ser um número maior que zero'];
  if (qt_parcela === undefined || qt_parcela === null) return ['qt_parcela', 'qt_parcela é obrigatório'];
  // interface §8: 6 to 96 instalments.
  if (typeof qt_parcela !== 'number' || !Number.isInteger(qt_parcela) || qt_parcela < 6 || qt_parcela > 96)
    return ['qt_parcela', 'qt_parcela deve ser um número inteiro entre 6 e 96'];
  if (dados_bancarios === undefined || dados_bancarios === null)
    return ['dados_bancarios', 'dados_bancarios é obrigatório'];
  if (!isObject(dados_bancarios)) return ['dados_bancarios', 'dados_bancarios deve ser um objeto'];
  return null;
}

/**
 * interface §2.1 and §7. Messages are in Portuguese, like the service's. The first problem found
 * is reported, with the field it is about. An employee "not found in the company" is decided by
 * `isUnknownCpf`, since the simulator knows no payroll.
 */
export function validateProposal(body: unknown, isUnknownCpf: (cpf: string) => boolean): ProposalValidation {
  const invalid = (field: string, message: string): ProposalValidation => ({
    ok: false,
    status: 400,
    error: 'VALIDATION_ERROR',
    field,
    message,
  });
  if (!isObject(body)) return invalid('body', 'O corpo da requisição deve ser um objeto JSON');
  const problem = firstInvalidField(body);
  if (problem !== null) return invalid(...problem);
  const input = body as unknown as ProposalInput;
  if (isUnknownCpf(input.nu_cpf))
    return {
      ok: false,
      status: 422,
      error: 'BUSINESS_RULE_VIOLATION',
      message: 'Funcionário não encontrado na empresa conveniada',
    };
  const { nu_cpf, nu_cnpj_conveniada, vl_emprestimo, qt_parcela, dados_bancarios } = input;
  return { ok: true, value: { nu_cpf, nu_cnpj_conveniada, vl_emprestimo, qt_parcela, dados_bancarios } };
}
