import { type Clock, systemClock } from '../clock';
import { own } from '../domain/json';
import { createLogger, type Logger } from '../logger';

/** What the simulator does with the registry-result webhook (interface §4.4) of a finished averbação. */
export type RegistryWebhookMode = 'send' | 'delay' | 'drop';
/** Final status of an averbação request (interface §3.2). */
export type RegistryOutcome = 'completed' | 'error';
/** Where the registry webhook puts its fields: the real shape is "not shown" (interface §6.2). */
export type RegistryPayloadShape = 'top' | 'dados';

/** Delivery rules of interface §6.1. */
export interface DeliveryOptions {
  /**
   * An attempt not answered within this is a failure (interface §6.1: "under 5 seconds").
   * @default 5000
   */
  timeoutMs?: number;
  /**
   * Wait before attempt 2, 3, …; the last value repeats. interface §6.1 says "with backoff" without intervals.
   * @default [200, 1000]
   */
  backoffMs?: readonly number[];
  /**
   * Attempts per delivery, the first included (interface §6.1).
   * @default 3
   */
  maxAttempts?: number;
  /**
   * Consecutive failed attempts to a registration that deactivate it (interface §6.1).
   * @default 3
   */
  deactivateAfterFailures?: number;
}

/** The asynchronous averbação (interface §3.2, §4.2–§4.4). */
export interface RegistryOptions {
  /**
   * Age at which a request reads `processing` on `GET /request/:id`.
   * @default 200
   */
  processingAfterMs?: number;
  /**
   * Age at which it reads `completed` or `error` and its registry webhook is due.
   * @default 1000
   */
  completeAfterMs?: number;
  /**
   * `send`: the webhook goes when the request completes; `delay`: `webhookDelayMs` later; `drop`: never.
   * Read when a request is created, so changing it affects later requests only.
   * @default 'send'
   */
  webhook?: RegistryWebhookMode;
  /**
   * How late a `delay`ed webhook is.
   * @default 5000
   */
  webhookDelayMs?: number;
  /**
   * Final status of a request, decided when it is created.
   * @default completed, unless the request body has a truthy `forceError`
   */
  outcome?: (requestId: string, body: Record<string, unknown>) => RegistryOutcome;
  /**
   * `top`: `{requestId, correlationId, status, nu_proposta}`; `dados`: the same under `dados`.
   * @default 'top'
   */
  payloadShape?: RegistryPayloadShape;
}

/** Faults injected on request; all off by default. Changeable at run time (`POST /_sim/chaos`). */
export interface ChaosOptions {
  /**
   * Probability that a delivered event is sent a second time, same bytes and same `webhook_id`.
   * @default 0
   */
  duplicateRate?: number;
  /**
   * Hold each proposal event and send it after the proposal's next one (consecutive pairs swap).
   * @default false
   */
  outOfOrder?: boolean;
  /**
   * A held event with no successor within this is sent anyway.
   * @default 2000
   */
  outOfOrderMaxHoldMs?: number;
  /**
   * Probability that an API request is answered 503 (not the control API, not the token endpoint).
   * @default 0
   */
  apiErrorRate?: number;
  /**
   * Probability that an API request is answered 429 with `Retry-After: 1`.
   * @default 0
   */
  rateLimitRate?: number;
}

/** Options of `startSimulator`; every one has a default, so `{}` gives a working sandbox. */
export interface SimulatorOptions {
  /** @default 0 (any free port) */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default a pino logger at LOG_LEVEL (or info) on stdout */
  logger?: Logger;
  /** Timestamps, token expiry and the age of averbação requests. @default systemClock */
  clock?: Clock;
  /** @default 'X-Service-Signature' (interface §5: the real name carries the service's brand) */
  signatureHeader?: string;
  /** Client credentials accepted by the token endpoint. @default any non-empty pair */
  clientId?: string;
  /** @default any non-empty pair (see clientId) */
  clientSecret?: string;
  /** When set, `GET /request/:id` also requires `x-api-key: <apiKey>` (interface §4.3). @default unset */
  apiKey?: string;
  /** Lifetime of issued tokens (fractions allowed, for tests). @default 600 */
  tokenTtlSeconds?: number;
  /** Retries, timeouts and deactivation of deliveries. @default each field's own default */
  delivery?: DeliveryOptions;
  /** Between `proposta.criada` and the analysis result. @default 50 */
  analysisDelayMs?: number;
  /** Analysis denies (`proposta.negada`) a `vl_emprestimo` above this. @default 200000 */
  denyAboveAmount?: number;
  /**
   * Employees "not found in the company" (422 BUSINESS_RULE_VIOLATION): a list of CPFs, or a test.
   * @default '00000000191' and any CPF ending in '99'
   */
  unknownCpfs?: readonly string[] | ((cpf: string) => boolean);
  /** Timing and outcome of averbação requests and their webhook. @default each field's own default */
  registry?: RegistryOptions;
  /** @default no chaos at all */
  chaos?: ChaosOptions;
  /**
   * Source of randomness for chaos, in [0, 1); pass `seededRandom(n)` for repeatable runs.
   * @default Math.random
   */
  random?: () => number;
}

export interface ResolvedDelivery {
  timeoutMs: number;
  backoffMs: readonly number[];
  maxAttempts: number;
  deactivateAfterFailures: number;
}

export interface ResolvedRegistry {
  processingAfterMs: number;
  completeAfterMs: number;
  webhook: RegistryWebhookMode;
  webhookDelayMs: number;
  outcome: (requestId: string, body: Record<string, unknown>) => RegistryOutcome;
  payloadShape: RegistryPayloadShape;
}

export type ResolvedChaos = Required<ChaosOptions>;

export interface ResolvedOptions {
  port: number;
  host: string;
  logger: Logger;
  clock: Clock;
  signatureHeader: string;
  clientId: string | undefined;
  clientSecret: string | undefined;
  apiKey: string | undefined;
  tokenTtlSeconds: number;
  delivery: ResolvedDelivery;
  analysisDelayMs: number;
  denyAboveAmount: number;
  isUnknownCpf: (cpf: string) => boolean;
  registry: ResolvedRegistry;
  chaos: ResolvedChaos;
  random: () => number;
}

const DEFAULT_UNKNOWN_CPF = '00000000191';

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new TypeError(`simulator: ${name} must be a number ≥ 0`);
  return value;
}

function rate(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0 || value > 1)
    throw new TypeError(`simulator: ${name} must be a probability between 0 and 1`);
  return value;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1)
    throw new TypeError(`simulator: ${name} must be an integer ≥ 1`);
  return value;
}

/** Checks and completes chaos settings over `base` (used at start and by `POST /_sim/chaos`). */
export function resolveChaos(input: ChaosOptions, base?: ResolvedChaos): ResolvedChaos {
  const merged = {
    duplicateRate: input.duplicateRate ?? base?.duplicateRate ?? 0,
    outOfOrder: input.outOfOrder ?? base?.outOfOrder ?? false,
    outOfOrderMaxHoldMs: input.outOfOrderMaxHoldMs ?? base?.outOfOrderMaxHoldMs ?? 2000,
    apiErrorRate: input.apiErrorRate ?? base?.apiErrorRate ?? 0,
    rateLimitRate: input.rateLimitRate ?? base?.rateLimitRate ?? 0,
  };
  if (typeof merged.outOfOrder !== 'boolean') throw new TypeError('simulator: outOfOrder must be a boolean');
  rate('duplicateRate', merged.duplicateRate);
  rate('apiErrorRate', merged.apiErrorRate);
  rate('rateLimitRate', merged.rateLimitRate);
  nonNegative('outOfOrderMaxHoldMs', merged.outOfOrderMaxHoldMs);
  if (merged.apiErrorRate + merged.rateLimitRate > 1)
    throw new TypeError('simulator: apiErrorRate + rateLimitRate must not exceed 1');
  return merged;
}

/** Checks and completes registry settings over `base` (used at start and by `POST /_sim/registry`). */
export function resolveRegistry(input: RegistryOptions, base?: ResolvedRegistry): ResolvedRegistry {
  const merged: ResolvedRegistry = {
    processingAfterMs: nonNegative(
      'registry.processingAfterMs',
      input.processingAfterMs ?? base?.processingAfterMs ?? 200,
    ),
    completeAfterMs: nonNegative(
      'registry.completeAfterMs',
      input.completeAfterMs ?? base?.completeAfterMs ?? 1000,
    ),
    webhook: input.webhook ?? base?.webhook ?? 'send',
    webhookDelayMs: nonNegative(
      'registry.webhookDelayMs',
      input.webhookDelayMs ?? base?.webhookDelayMs ?? 5000,
    ),
    outcome:
      input.outcome ?? base?.outcome ?? ((_id, body) => (own(body, 'forceError') ? 'error' : 'completed')),
    payloadShape: input.payloadShape ?? base?.payloadShape ?? 'top',
  };
  if (!['send', 'delay', 'drop'].includes(merged.webhook))
    throw new TypeError("simulator: registry.webhook must be 'send', 'delay' or 'drop'");
  if (!['top', 'dados'].includes(merged.payloadShape))
    throw new TypeError("simulator: registry.payloadShape must be 'top' or 'dados'");
  if (merged.completeAfterMs < merged.processingAfterMs)
    throw new TypeError('simulator: registry.completeAfterMs must not be less than processingAfterMs');
  return merged;
}

/** Fills in every default and refuses values that cannot work (a TypeError naming the option). */
export function resolveOptions(options: SimulatorOptions = {}): ResolvedOptions {
  const delivery = options.delivery ?? {};
  const backoffMs = delivery.backoffMs ?? [200, 1000];
  if (backoffMs.length === 0) throw new TypeError('simulator: delivery.backoffMs needs at least one value');
  backoffMs.forEach((ms) => nonNegative('delivery.backoffMs', ms));
  const unknown = options.unknownCpfs;
  const isUnknownCpf =
    typeof unknown === 'function'
      ? unknown
      : unknown === undefined
        ? (cpf: string) => cpf === DEFAULT_UNKNOWN_CPF || cpf.endsWith('99')
        : (cpf: string) => unknown.includes(cpf);
  const port = options.port ?? 0;
  if (!Number.isSafeInteger(port) || port < 0 || port > 65535)
    throw new TypeError('simulator: port must be an integer from 0 to 65535');
  const tokenTtlSeconds = options.tokenTtlSeconds ?? 600;
  if (!(tokenTtlSeconds > 0)) throw new TypeError('simulator: tokenTtlSeconds must be > 0');
  return {
    port,
    host: options.host ?? '127.0.0.1',
    logger: (options.logger ?? createLogger(process.env.LOG_LEVEL ?? 'info')).child({
      component: 'simulator',
    }),
    clock: options.clock ?? systemClock,
    signatureHeader: options.signatureHeader ?? 'X-Service-Signature',
    clientId: options.clientId,
    clientSecret: options.clientSecret,
    apiKey: options.apiKey,
    tokenTtlSeconds,
    delivery: {
      timeoutMs: positiveInteger('delivery.timeoutMs', delivery.timeoutMs ?? 5000),
      backoffMs: [...backoffMs],
      maxAttempts: positiveInteger('delivery.maxAttempts', delivery.maxAttempts ?? 3),
      deactivateAfterFailures: positiveInteger(
        'delivery.deactivateAfterFailures',
        delivery.deactivateAfterFailures ?? 3,
      ),
    },
    analysisDelayMs: nonNegative('analysisDelayMs', options.analysisDelayMs ?? 50),
    denyAboveAmount: nonNegative('denyAboveAmount', options.denyAboveAmount ?? 200_000),
    isUnknownCpf,
    registry: resolveRegistry(options.registry ?? {}),
    chaos: resolveChaos(options.chaos ?? {}),
    random: options.random ?? Math.random,
  };
}

export { seededRandom } from '../domain/random';
