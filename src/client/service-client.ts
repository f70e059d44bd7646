import type { Logger } from 'pino';
import type { Config } from '../config';
import { ServiceApi } from './api';
import { staticToken, type TokenSource } from './auth';
import { clientCredentialsTokens } from './client-credentials';
import {
  type AverbacaoAccepted,
  createProposal,
  type ProposalCreated,
  registerWebhook,
  report,
  type ReportName,
  requestStatus,
  type RequestStatus,
  startAverbacao,
  type StartAverbacaoOptions,
  type WebhookRegistered,
} from './endpoints';
import { type OffersResult, searchOffers, type SearchOffersOptions } from './offers';
import type { Traces } from '../domain/tracing';
import { Transport, type TransportOptions } from './transport';
import { httpUrlOption, type Query } from './urls';
import type { ProposalRequest, WebhookRegistration } from './validate';

/**
 * The outbound client for the service's API (interface §4, §5): options in, one method per
 * endpoint out. The endpoints live in endpoints.ts and offers.ts; the transport does timeouts,
 * retries, auth and error mapping.
 */

export interface ServiceClientOptions {
  /**
   * `{base_url}` of the service; a path prefix is kept
   * (`https://host/consig` → `https://host/consig/request/…`).
   */
  baseUrl: string;
  /** Static bearer token. Ignored when `tokenUrl` is set. */
  accessToken?: string;
  /** OAuth2 token endpoint (client credentials grant); needs `clientId` and `clientSecret`. */
  tokenUrl?: string;
  clientId?: string;
  clientSecret?: string;
  /** Sent as `x-api-key` on every authenticated call (interface §4.3). */
  apiKey?: string;
  logger: Logger;
  /** Per attempt, body included. @default 10000 */
  timeoutMs?: number;
  /** Retries after the first attempt, for network errors, 429 and 5xx only. @default 3 */
  retries?: number;
  /** Wall-clock milliseconds (token expiry, `Retry-After` dates). @default Date.now */
  now?: () => number;
  /** Waits between retries. @default a real setTimeout */
  sleep?: (ms: number) => Promise<void>;
  /** Called each time a token is obtained from the token endpoint (metrics). */
  onTokenRefresh?: () => void;
  /** Tracing: a CLIENT span per call, named in its `traceparent`. @default undefined (off) */
  traces?: Traces | undefined;
}

export interface ServiceClient {
  createProposal(body: ProposalRequest): Promise<ProposalCreated>;
  startAverbacao(body: Record<string, unknown>, options?: StartAverbacaoOptions): Promise<AverbacaoAccepted>;
  requestStatus(requestId: string): Promise<RequestStatus>;
  registerWebhook(registration: WebhookRegistration): Promise<WebhookRegistered>;
  report(name: ReportName, query?: Query): Promise<unknown>;
  searchOffers(body: Record<string, unknown>, options?: SearchOffersOptions): Promise<OffersResult>;
}

/** Builds the client. Throws TypeError for unusable options (not a URL, OAuth without credentials). */
export function createServiceClient(options: ServiceClientOptions): ServiceClient {
  const base = httpUrlOption(options.baseUrl, 'baseUrl');
  const settings = transportSettings(options);
  const transport = new Transport({
    ...settings,
    tokens: tokenSource(options, settings),
    apiKey: options.apiKey,
  });
  const api = new ServiceApi(base, transport);
  return {
    createProposal: (body) => createProposal(api, body),
    startAverbacao: (body, opts) => startAverbacao(api, body, opts),
    requestStatus: (requestId) => requestStatus(api, requestId),
    registerWebhook: (registration) => registerWebhook(api, registration),
    report: (name, query) => report(api, name, query),
    searchOffers: (body, opts) => searchOffers(api, body, opts),
  };
}

type TransportSettings = Omit<TransportOptions, 'tokens' | 'apiKey'>;

function transportSettings(options: ServiceClientOptions): TransportSettings {
  return {
    logger: options.logger.child({ component: 'service-client' }),
    timeoutMs: options.timeoutMs ?? 10_000,
    retries: options.retries ?? 3,
    now: options.now ?? Date.now,
    sleep: options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms))),
    traces: options.traces,
  };
}

/** A static token, tokens from the token endpoint, or null when no credentials are configured. */
function tokenSource(options: ServiceClientOptions, settings: TransportSettings): TokenSource | null {
  const { tokenUrl, clientId, clientSecret } = options;
  if (tokenUrl === undefined)
    return options.accessToken === undefined ? null : staticToken(options.accessToken);
  if (clientId === undefined || clientSecret === undefined) {
    throw new TypeError('tokenUrl needs clientId and clientSecret');
  }
  return clientCredentialsTokens({
    url: httpUrlOption(tokenUrl, 'tokenUrl'),
    clientId,
    clientSecret,
    // A transport of its own, without tokens: the token request must never wait on a token.
    transport: new Transport({ ...settings, tokens: null, apiKey: undefined }),
    now: settings.now,
    onTokenRefresh: options.onTokenRefresh,
  });
}

/** The client for `config.service`, or null when SERVICE_BASE_URL is unset (no outbound calls). */
export function serviceClientFromConfig(
  config: Config,
  logger: Logger,
  hooks: Pick<ServiceClientOptions, 'onTokenRefresh' | 'traces'> = {},
): ServiceClient | null {
  const s = config.service;
  if (s.baseUrl === undefined) return null;
  return createServiceClient({
    ...hooks,
    logger,
    baseUrl: s.baseUrl,
    accessToken: s.accessToken,
    tokenUrl: s.tokenUrl,
    clientId: s.clientId,
    clientSecret: s.clientSecret,
    apiKey: s.apiKey,
  });
}
