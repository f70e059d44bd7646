import { createHmac } from 'node:crypto';
import { cpfDigits, isValidCpf } from './documents';
import { isObject, own, parseJsonOrUndefined } from './json';
import type { HandlerEvent } from './event-router';
import { normalizeCpf } from './normalize';

/**
 * The people in the data (issue 45, LGPD; docs/privacy.md): how a person — the *titular* — is
 * named in the log without their CPF, which of a stored text is theirs, and what is left of it once
 * they are erased. Pure: the key, the texts and the clock are given.
 *
 * A person is their **subject hash**: HMAC-SHA256 of the 11 digits of their CPF under a random key
 * kept in the log (`console_keys` `subject-hash`), in base64url. Without the key a hash says nothing
 * (a CPF has about 10^9 values: an unkeyed hash would be read back by trying them all); with the
 * log in hand the CPFs of the people not erased are there in clear anyway, so the key adds nothing
 * to protect and lives beside them.
 */

/** The name of the subject-hash key in `console_keys`. */
export const SUBJECT_KEY_NAME = 'subject-hash';

/** The marker an erased value is replaced by (Portuguese, as the data it replaces). */
export const ERASED = '[apagado]';

/** A person's hash under `key` (base64url, 43 characters), from the 11 digits of their CPF. */
export function subjectHash(key: Buffer, cpf: string): string {
  return createHmac('sha256', key).update(`cpf:${cpf}`).digest('base64url');
}

/**
 * A CPF typed by an operator (`529.982.247-25`, `52998224725`), as its 11 digits, or an error saying
 * why not: the check digits must hold, so a typo cannot erase (or find) someone else.
 */
export function parseSubjectCpf(input: string): { cpf: string } | { error: string } {
  // cpfDigits drops blanks with the punctuation.
  const digits = cpfDigits(input);
  if (digits === null) return { error: 'expected a CPF: 11 digits, or 000.000.000-00' };
  if (!isValidCpf(digits)) return { error: 'not a valid CPF (its check digits do not match)' };
  return { cpf: digits };
}

/** The two ways a CPF is written in a text: 11 digits, and 000.000.000-00 (what raw searches look for). */
export function cpfForms(cpf: string): string[] {
  return [cpf, `${cpf.slice(0, 3)}.${cpf.slice(3, 6)}.${cpf.slice(6, 9)}-${cpf.slice(9)}`];
}

/** A CPF written in a text: 11 digits, or `000.000.000-00`, not inside a longer run of digits. */
const CPF_IN_TEXT = /(?<!\d)(?:\d{3}\.\d{3}\.\d{3}-\d{2}|\d{11})(?!\d)/g;

/** The CPFs (11 digits, valid check digits) written anywhere in `text`, in order, each once. */
export function cpfsInText(text: string): string[] {
  const found = new Set<string>();
  for (const match of text.matchAll(CPF_IN_TEXT)) {
    const digits = match[0].replace(/\D/g, '');
    if (isValidCpf(digits)) found.add(digits);
  }
  return [...found];
}

/**
 * Whose a stored body is: the CPF of its `dados.nu_cpf` (a delivery, a forwarded message's
 * `data.proposal`), else the first valid CPF written anywhere in it (a registry result, a body
 * quarantined as not JSON); null when it names nobody.
 */
export function bodySubject(text: string): string | null {
  const parsed = parseJsonOrUndefined(text);
  const named = normalizeCpf(own(own(parsed, 'dados'), 'nu_cpf'));
  if (isValidCpf(named)) return named;
  return cpfsInText(text)[0] ?? null;
}

/**
 * The keys of a body that describe the person rather than the loan, removed from every object of a
 * body that is theirs: identity (CPF, name, birth, contact, address), employment (employer, CNPJ,
 * salary, admission, dismissal) and bank account. What stays is the legal-hold set of
 * docs/privacy.md: ids, events, statuses, dates and amounts.
 */
export const PERSONAL_KEYS: ReadonlySet<string> = new Set([
  'nu_cpf',
  'cpf',
  'nu_cnpj_conveniada',
  'no_conveniada',
  'no_cliente',
  'nome',
  'no_pessoa',
  'dt_nascimento',
  'email',
  'telefone',
  'celular',
  'endereco',
  'dados_bancarios',
  'pix',
  'vl_salario',
  'salario',
  'dt_admissao',
  'dt_demissao',
]);

/**
 * What is left of a body of the person `isSubject` recognises: as JSON, every {@link PERSONAL_KEYS}
 * member gone and every CPF of theirs written in a value (a string, or an 11-digit number) replaced
 * by {@link ERASED}; as any other text, their CPFs replaced. Other people's CPFs stay: a body is
 * erased for one person at a time.
 */
export function eraseFromText(text: string, isSubject: (cpf: string) => boolean): string {
  const parsed = parseJsonOrUndefined(text);
  if (parsed === undefined) return eraseCpfsIn(text, isSubject);
  return JSON.stringify(eraseFromValue(parsed, isSubject));
}

/** A CPF written in a text or a value: valid check digits (so a plain number is no CPF), and theirs. */
function isTheirs(digits: string, isSubject: (cpf: string) => boolean): boolean {
  return isValidCpf(digits) && isSubject(digits);
}

function eraseCpfsIn(text: string, isSubject: (cpf: string) => boolean): string {
  return text.replace(CPF_IN_TEXT, (match) =>
    isTheirs(match.replace(/\D/g, ''), isSubject) ? ERASED : match,
  );
}

function eraseFromValue(value: unknown, isSubject: (cpf: string) => boolean): unknown {
  if (typeof value === 'string') return eraseCpfsIn(value, isSubject);
  if (typeof value === 'number') {
    const cpf = normalizeCpf(value);
    return cpf !== null && isTheirs(cpf, isSubject) ? ERASED : value;
  }
  if (Array.isArray(value)) return value.map((v) => eraseFromValue(v, isSubject));
  if (!isObject(value)) return value;
  const kept: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (!PERSONAL_KEYS.has(key)) kept[key] = eraseFromValue(v, isSubject);
  }
  return kept;
}

/** `isSubject` for the person of `hash` under `key`. */
export function subjectMatcher(key: Buffer, hash: string): (cpf: string) => boolean {
  return (cpf) => subjectHash(key, cpf) === hash;
}

/** An erasure's id: `era_` and 22 base64url characters from 16 random bytes. */
export function erasureId(random: Buffer): string {
  if (random.length !== 16) throw new RangeError('an erasure id takes 16 random bytes');
  return `era_${random.toString('base64url')}`;
}

/**
 * An event of a proposal whose personal data was erased, as processing then sees it: every CPF and
 * every {@link PERSONAL_KEYS} member gone from its body (the body is that proposal's: any CPF in it
 * is the person's), so that neither its messages nor a partner's handler nor the log get them back.
 */
export function erasedEvent(event: HandlerEvent): HandlerEvent {
  if (event.rawBody === null) return event;
  const rawBody = eraseFromText(event.rawBody, () => true);
  const payload = parseJsonOrUndefined(rawBody);
  return { ...event, rawBody, payload, dados: own(payload, 'dados') };
}

/**
 * The body of an erasure's `subject.erased` message (Standard Webhooks' shape, as every forwarded
 * message): which proposals and registrations the receiving system should erase too (LGPD art. 18
 * §6), and the erasure's id to acknowledge it by. No CPF: the recipient knows the person by these.
 */
export function noticeBody(notice: {
  webhookId: string;
  erasureId: string;
  createdAt: string;
  proposals: readonly (number | string)[];
  requests: readonly string[];
}): string {
  return JSON.stringify({
    id: notice.webhookId,
    type: 'subject.erased',
    created_at: notice.createdAt,
    data: { erasure_id: notice.erasureId, nu_propostas: notice.proposals, request_ids: notice.requests },
  });
}

/**
 * What an access request is answered with beside the data (LGPD art. 19 §1: origin, the absence of
 * records, the criteria used and the purpose), as `subject export` states it; docs/privacy.md says
 * the same at length.
 */
export const EXPORT_STATEMENT = {
  controller:
    'The lender operating this receiver is the controller; consig-receiver is the system that received the data on its behalf.',
  origin:
    'Every record came from the consignado service: its signed webhook deliveries (events of the proposal and of the payroll registration) and the answers to the registration status query. Nothing was collected from the person directly.',
  purpose:
    "To follow the person's payroll-deductible loan proposal through analysis, payroll registration (averbação), formalisation, contract and payment, and to tell the lender's own systems (the destinations listed under sharing).",
  criteria:
    "Kept as the service sent it; the CPF read as its 11 digits. No automated decision about the person is taken here: the status of each proposal is the service's, in the order its events arrived.",
  legal_basis:
    "Performance of the loan contract and its preliminary steps (LGPD art. 7 V), and the lender's legal and regulatory obligations for the records kept after an erasure (art. 7 II, art. 16 I).",
  retention:
    "Raw bodies of finished events and delivered messages: RETENTION_DAYS. A proposal's CPF, employer and CNPJ: RETENTION_DAYS after it reached a final status. Ids, statuses, dates and amounts: kept (legal hold). See docs/privacy.md.",
} as const;
