import { isObject, nonBlankString } from '../domain/json';
import type { Answer, ServiceApi } from './api';
import { InvalidRequestError } from './errors';
import type { Query } from './urls';
import {
  type ProposalRequest,
  validateProposal,
  validateRequestId,
  validateWebhookRegistration,
  type WebhookRegistration,
} from './validate';

/**
 * One function per endpoint of the service (interface §4.1–§4.6; the offers search, which walks
 * pages, is in offers.ts): check the request locally, send it, read the answer.
 */

/** interface §2.2. */
export interface ProposalCreated {
  nu_proposta: number | string;
  status: string | null;
  dt_criacao: string | null;
  uuid: string | null;
  raw: unknown;
}

/** interface §2.3, §4.2. `_links.result` is in `raw` and is never followed: it points at a dead route. */
export interface AverbacaoAccepted {
  requestId: string;
  status: string | null;
  correlationId: string | null;
  httpStatus: number;
  raw: unknown;
}

/**
 * interface §4.3. `status` is passed through as sent: queued, processing, completed, error, or a
 * new value.
 */
export interface RequestStatus {
  requestId: string;
  correlationId: string | null;
  status: string;
  raw: unknown;
}

/** interface §4.5: the response is not shown, so it is returned as it came. */
export interface WebhookRegistered {
  httpStatus: number;
  raw: unknown;
}

/** interface §4.6. */
export const REPORT_PATHS = {
  'new-relationships': '/workers/new-relationships',
  'relationship-ended': '/contracts/relationship-ended',
  'accounting-and-remuneration': '/contracts/accounting-and-remuneration',
  'repasse-pagamentos': '/emprestimos/consultar-repasse-pagamentos',
} as const;

export type ReportName = keyof typeof REPORT_PATHS;

/** interface §4.1. */
export async function createProposal(api: ServiceApi, body: ProposalRequest): Promise<ProposalCreated> {
  const payload = validateProposal(body);
  // Not idempotent: a timeout is not retried (the proposal may exist); the interface shows no
  // idempotency key.
  const answer = await api.post('/api/v1/propostas', payload, { idempotent: false });
  return readProposalCreated(answer);
}

function readProposalCreated(answer: Answer): ProposalCreated {
  const raw = answer.object();
  const nu = raw.nu_proposta;
  const nuProposta = typeof nu === 'number' && Number.isSafeInteger(nu) ? nu : nonBlankString(nu);
  if (nuProposta === null) throw answer.unexpected('no nu_proposta');
  return {
    nu_proposta: nuProposta,
    status: nonBlankString(raw.status),
    dt_criacao: nonBlankString(raw.dt_criacao),
    uuid: nonBlankString(raw.uuid),
    raw,
  };
}

export interface StartAverbacaoOptions {
  /** Send to the deprecated `POST /contract` instead of `POST /contract/averbacao`. @default false */
  deprecatedPath?: boolean;
}

/** interface §4.2. */
export async function startAverbacao(
  api: ServiceApi,
  body: Record<string, unknown>,
  options: StartAverbacaoOptions = {},
): Promise<AverbacaoAccepted> {
  if (!isObject(body)) {
    throw new InvalidRequestError('averbação', [{ field: 'body', problem: 'expected an object' }]);
  }
  // interface §4.2, §9: /contract still answers (deprecated, Deprecation: true);
  // /contract/averbacao replaces it.
  const path = options.deprecatedPath ? '/contract' : '/contract/averbacao';
  const answer = await api.post(path, body, { idempotent: false });
  return readAverbacaoAccepted(answer);
}

/**
 * 202 is documented; 200 and 201 are accepted too. `_links.result` (→ /result/:id, a route that does
 * not answer) is deliberately ignored: the status lives at GET /request/:requestId.
 */
function readAverbacaoAccepted(answer: Answer): AverbacaoAccepted {
  const raw = answer.object();
  const requestId = nonBlankString(raw.requestId);
  if (requestId === null) throw answer.unexpected('no requestId');
  return {
    requestId,
    status: nonBlankString(raw.status),
    correlationId: nonBlankString(raw.correlationId),
    httpStatus: answer.response.status,
    raw,
  };
}

/** interface §4.3. */
export async function requestStatus(api: ServiceApi, requestId: string): Promise<RequestStatus> {
  const id = validateRequestId(requestId);
  const answer = await api.get(`/request/${encodeURIComponent(id)}`, { route: '/request/:requestId' });
  const raw = answer.object();
  const status = nonBlankString(raw.status);
  if (status === null) throw answer.unexpected('no status');
  const answeredId = nonBlankString(raw.requestId);
  if (answeredId !== null && answeredId !== id)
    throw answer.unexpected('the answer is about another requestId');
  return { requestId: id, correlationId: nonBlankString(raw.correlationId), status, raw };
}

/** interface §4.5. Only the three fields of interface §2.4 are sent. */
export async function registerWebhook(
  api: ServiceApi,
  registration: WebhookRegistration,
): Promise<WebhookRegistered> {
  const { url, eventos, secret } = validateWebhookRegistration(registration);
  const { response } = await api.post('/api/v1/webhooks', { url, eventos, secret }, { idempotent: false });
  return { httpStatus: response.status, raw: response.body === undefined ? response.text : response.body };
}

/**
 * interface §4.6: query parameters and bodies are not shown; the query goes as given, the body
 * comes back as it came.
 */
export async function report(api: ServiceApi, name: ReportName, query?: Query): Promise<unknown> {
  if (!Object.hasOwn(REPORT_PATHS, name)) {
    throw new InvalidRequestError('report', [
      { field: 'name', problem: `expected one of ${Object.keys(REPORT_PATHS).join(', ')}` },
    ]);
  }
  return (await api.get(REPORT_PATHS[name], { query })).json();
}
