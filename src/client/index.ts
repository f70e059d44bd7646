export { tokenExpiresAt } from './auth';
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
export { MAX_RETRY_AFTER_MS, parseRetryAfter } from './retry';
export {
  type AverbacaoAccepted,
  createServiceClient,
  type OffersResult,
  type ProposalCreated,
  REPORT_PATHS,
  type ReportName,
  type RequestStatus,
  type ServiceClient,
  serviceClientFromConfig,
  type ServiceClientOptions,
  type WebhookRegistered,
} from './service-client';
export type { Query, QueryValue } from './transport';
export { type DadosBancarios, type ProposalRequest, type WebhookRegistration } from './validate';
