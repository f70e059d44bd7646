export { tokenExpiresAt } from './auth';
export {
  type AverbacaoAccepted,
  type ProposalCreated,
  REPORT_PATHS,
  type ReportName,
  type RequestStatus,
  type StartAverbacaoOptions,
  type WebhookRegistered,
} from './endpoints';
export {
  AuthError,
  BusinessError,
  type CallContext,
  type FieldIssue,
  InvalidRequestError,
  NetworkError,
  NotFoundError,
  ProtocolError,
  RateLimitedError,
  ServiceError,
  ServiceUnavailableError,
} from './errors';
export { type OffersResult, type SearchOffersOptions } from './offers';
export { MAX_RETRY_AFTER_MS, parseRetryAfter } from './retry';
export {
  createServiceClient,
  type ServiceClient,
  serviceClientFromConfig,
  type ServiceClientOptions,
} from './service-client';
export type { Query, QueryValue } from './urls';
export { type DadosBancarios, type ProposalRequest, type WebhookRegistration } from './validate';
