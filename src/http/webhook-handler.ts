import type { IncomingMessage, ServerResponse } from 'node:http';
import getRawBody from 'raw-body';
import type { Clock } from '../clock';
import type { AnswerTracker } from '../domain/answer-first';
import { type ClassifiedDelivery, classifyDelivery, type Route } from '../domain/delivery';
import { StorageError } from '../domain/errors';
import { type IpAllowList, clientAddress } from '../domain/cidr';
import { verifySignature } from '../domain/signature';
import type { RequestTrace, TraceAttributes, Traces } from '../domain/tracing';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { DeliveryOutcome } from '../domain/delivery';
import type { NewEvent } from '../domain/event-status';
import type { DeliveryWriter, IngestResult } from '../domain/delivery';
import {
  badSignature,
  forbidden,
  type Rejection,
  schemaRefused,
  unreadBody,
  type WebhookHold,
} from './rejections';
import { DeliveryWatch } from './delivery-watch';

/**
 * The webhook path of contract §4: read the raw body (bounded while reading), verify the signature
 * on those bytes, classify, store (group commit), answer. The answer depends only on verify +
 * store; no handler runs inside the request. Framework-free: it takes Node's request and response,
 * so production calls it before Express and the Express route is a one-line adapter.
 */

/**
 * The answers under way, as a replica's relay must know them (its heartbeat may not cover a request
 * whose delivery is not in the spool yet): each request begins with its received_at and ends with
 * its answer.
 */
export interface InFlightAnswers {
  /** A request arrived at `receivedAt`: its order time (null: received_at stands for it) and its token. */
  begin(receivedAt: string): { token: number; orderAt: string | null };
  /** Its answer left (after its spool commit, for a stored delivery). */
  end(token: number): void;
}

export interface WebhookDeps {
  /** WEBHOOK_SECRETS: any one that matches is accepted (rotation). */
  secrets: readonly string[];
  /** SIGNATURE_HEADER as configured; matched case-insensitively. */
  signatureHeader: string;
  /** MAX_BODY_BYTES: a larger body gets 413 while it is read, never buffered whole. */
  maxBodyBytes: number;
  writer: DeliveryWriter;
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /**
   * ALLOWED_CIDRS: who may POST here at all (checked before reading the body).
   * @default undefined (anyone)
   */
  allowList?: IpAllowList | undefined;
  /**
   * TRUST_PROXY: proxies whose X-Forwarded-For gives the client address.
   * @default 0
   */
  trustProxy?: number | undefined;
  /**
   * The deactivation alarm every answer is reported to (interface §6.1, rule 4). `serve` passes
   * the one that stores its run and checks the silence (startDeliveryWatch).
   * @default a watch in memory only
   */
  watch?: DeliveryWatch | undefined;
  /**
   * Cluster mode: the requests being answered, for the relay's heartbeat (the cluster runtime's
   * in-flight.ts).
   * @default undefined (not tracked)
   */
  inFlight?: InFlightAnswers | undefined;
  /**
   * Cluster mode (issue 46): why this replica takes no delivery now (it refuses PostgreSQL's schema,
   * migrates it, or has not read it yet), or undefined while it does. Refused: 503 with Retry-After
   * before the body is read.
   * @default undefined (never refuses)
   */
  refusing?: (() => WebhookHold | undefined) | undefined;
  /**
   * Answers first (issue 23): told when each answer begins and when it left, so that background
   * work (processing, forwarding) waits meanwhile.
   * @default none
   */
  answers?: AnswerTracker | undefined;
  /**
   * Tracing (issue 35): a SERVER span per request, continuing the service's `traceparent`; its
   * context is stored with the event, so that processing continues the trace.
   * @default undefined (off: the request pays one comparison)
   */
  traces?: Traces | undefined;
}

export type WebhookHandler = (req: IncomingMessage, res: ServerResponse, route: Route) => void;

/** Seconds the service should wait before retrying after a 503 (it has up to 3 attempts, interface §6.1). */
const RETRY_AFTER_SECONDS = 5;

const ROUTE_PATHS: Record<Route, string> = { events: '/webhooks', registry: '/webhooks/registry' };

/** Every answer a webhook route gives (`consig_webhook_deliveries_total`'s outcome label). */
const OUTCOMES: Record<DeliveryOutcome, null> = {
  accepted: null,
  duplicate: null,
  quarantined: null,
  invalid_signature: null,
  payload_too_large: null,
  storage_unavailable: null,
  aborted: null,
  forbidden: null,
};

/** What the answer, the audit row and the log line of one request all carry. */
interface RequestFacts {
  route: Route;
  path: string;
  /** Monotonic milliseconds, for the latency. */
  startedAt: number;
  receivedAt: string;
  /** Cluster mode: PostgreSQL's time as this replica estimates it (the runtime's in-flight.ts); null otherwise. */
  orderAt: string | null;
  remote: string;
  /** Its entry in `deps.inFlight`, ended when the answer is measured. */
  flight: number;
  /** Reported to `answers` as begun (its body read): measure() reports its end. */
  answering: boolean;
  /** Its SERVER span when tracing is on, ended in measure(). */
  trace: RequestTrace | undefined;
}

export function createWebhookHandler(options: WebhookDeps): WebhookHandler {
  const headerName = options.signatureHeader.toLowerCase();
  // Every answer reaches the watch through measure(), which each answer passes exactly once.
  const deps = { ...options, watch: options.watch ?? new DeliveryWatch(options) };
  // Every outcome of every route at 0 from the start (issue 44, src/metrics.ts): the first 503 is an
  // increase that ConsigWebhookStorageUnavailable's `increase()` sees.
  for (const route of Object.values(ROUTE_PATHS))
    for (const outcome of Object.keys(OUTCOMES)) deps.metrics.deliveries.inc({ outcome, route }, 0);
  const handle = (req: IncomingMessage, res: ServerResponse, route: Route, trace?: RequestTrace): void => {
    const request = describeRequest(deps, req, route, trace);
    if (deps.allowList && !deps.allowList.allows(request.remote)) {
      return reject(deps, res, request, forbidden());
    }
    const refusal = deps.refusing?.();
    if (refusal) return reject(deps, res, request, schemaRefused(refusal));
    getRawBody(req, { length: req.headers['content-length'], limit: deps.maxBodyBytes }, (err, body) => {
      if (err) return reject(deps, res, request, unreadBody(err, req, deps.maxBodyBytes));
      // From the whole body to the answer, the request needs this process's CPU: background work
      // waits (a body still arriving does not hold it: a slow client would). Ended in measure().
      request.answering = true;
      deps.answers?.begin();
      const verdict = verifySignature(body, req.headers[headerName], deps.secrets);
      if (!verdict.ok)
        return reject(deps, res, request, badSignature(verdict.reason, body.length, deps.signatureHeader));
      store(deps, res, request, body, verdict.secretIndex);
    });
  };
  const { traces } = deps;
  if (traces === undefined) return handle;
  return function handleTracedWebhook(req, res, route) {
    handle(
      req,
      res,
      route,
      traces.request(ROUTE_PATHS[route], header(req, 'traceparent'), header(req, 'tracestate')),
    );
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function describeRequest(
  deps: WebhookDeps,
  req: IncomingMessage,
  route: Route,
  trace: RequestTrace | undefined,
): RequestFacts {
  const receivedAt = deps.clock.now().toISOString();
  const flight = deps.inFlight?.begin(receivedAt) ?? { token: 0, orderAt: null };
  return {
    route,
    path: ROUTE_PATHS[route],
    startedAt: deps.clock.monotonic(),
    receivedAt,
    orderAt: flight.orderAt,
    remote: clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for'], deps.trustProxy ?? 0),
    flight: flight.token,
    answering: false,
    trace,
  };
}

/** Answers a refused request, counts it, writes its `deliveries` row (no body, no event) and logs it. */
function reject(deps: WebhookDeps, res: ServerResponse, request: RequestFacts, r: Rejection): void {
  sendJson(
    res,
    r.status,
    { error: r.error, message: r.message },
    {
      ...(r.close ? { connection: 'close' } : {}),
      ...(r.retryAfter === undefined ? {} : { 'retry-after': String(r.retryAfter) }),
    },
  );
  const ms = measure(deps, request, r.outcome, r.status);
  deps.writer.audit({
    receivedAt: request.receivedAt,
    orderAt: request.orderAt,
    path: request.path,
    outcome: r.outcome,
    httpStatus: r.status,
    dedupKey: null,
    eventId: null,
    durationMs: ms,
    bodyBytes: r.bodyBytes,
    secretIndex: null,
    remoteAddr: request.remote,
    detail: r.reason,
  });
  deps.logger.warn(
    {
      route: request.path,
      outcome: r.outcome,
      reason: r.reason,
      http_status: r.status,
      ms,
      remote: request.remote,
      ...request.trace?.logIds,
    },
    'delivery rejected',
  );
}

/** Classifies a verified body and stores it; answers once the group commit holding it settles. */
function store(
  deps: WebhookDeps,
  res: ServerResponse,
  request: RequestFacts,
  body: Buffer,
  secretIndex: number,
): void {
  const delivery = classifyDelivery(body, request.route);
  deps.writer
    .ingest(newEvent(delivery, body, request.receivedAt, request.trace?.stored ?? null), {
      receivedAt: request.receivedAt,
      orderAt: request.orderAt,
      path: request.path,
      bodyBytes: body.length,
      secretIndex,
      remoteAddr: request.remote,
      detail: delivery.invalidReason,
      startedAt: request.startedAt,
    })
    .then(
      (stored) => answerStored(deps, res, request, delivery, stored),
      (err: unknown) => answerNotStored(deps, res, request, delivery, err),
    );
}

function newEvent(
  c: ClassifiedDelivery,
  body: Buffer,
  receivedAt: string,
  traceContext: string | null,
): NewEvent {
  return {
    dedupKey: c.dedupKey,
    webhookId: c.webhookId,
    kind: c.kind,
    evento: c.evento,
    nuProposta: c.nuProposta,
    requestId: c.requestId,
    registryStatus: c.registryStatus,
    tentativa: c.tentativa,
    receivedAt,
    // Valid UTF-8 is kept as TEXT (readable in sqlite3), anything else byte-exact as a BLOB.
    body: c.text ?? body,
    bodyBytes: body.length,
    status: c.status,
    lastError: c.invalidReason,
    traceContext,
  };
}

/** 200 for what is on disk: accepted, duplicate or quarantined (the writer wrote its `deliveries` row). */
function answerStored(
  deps: WebhookDeps,
  res: ServerResponse,
  request: RequestFacts,
  c: ClassifiedDelivery,
  stored: IngestResult,
): void {
  const quarantined = stored.outcome === 'quarantined';
  sendJson(res, 200, {
    status: stored.outcome,
    event_id: stored.eventId,
    ...(quarantined ? { reason: c.invalidReason } : {}),
  });
  const ms = measure(deps, request, stored.outcome, 200, request.trace && delivered(c, stored));
  if (stored.outcome !== 'duplicate')
    deps.metrics.eventsStored.inc({ evento: c.evento ?? `(${c.kind})`, status: c.status });
  const line = {
    route: request.path,
    outcome: stored.outcome,
    http_status: 200,
    ms,
    event_id: stored.eventId,
    kind: c.kind,
    evento: c.evento,
    status: stored.status,
    nu_proposta: c.nuProposta,
    request_id: c.requestId,
    webhook_id: c.webhookId,
    tentativa: c.tentativa,
    // Tracing on: the request's span ids. The line is written outside the span, so that the
    // request's callbacks (the group commit, the processing it schedules) inherit no context.
    ...request.trace?.logIds,
  };
  if (quarantined) deps.logger.warn({ ...line, reason: c.invalidReason }, 'delivery quarantined');
  else deps.logger.info(line, 'delivery');
}

/**
 * 503 for what is not on disk: never 200 for it, and the service retries. The writer writes the
 * `deliveries` row itself, once the disk takes writes again.
 */
function answerNotStored(
  deps: WebhookDeps,
  res: ServerResponse,
  request: RequestFacts,
  c: ClassifiedDelivery,
  err: unknown,
): void {
  sendJson(
    res,
    503,
    { error: 'storage_unavailable', message: 'the delivery could not be stored; retry later' },
    { 'retry-after': String(RETRY_AFTER_SECONDS) },
  );
  const ms = measure(deps, request, 'storage_unavailable', 503);
  deps.logger.error(
    {
      route: request.path,
      outcome: 'storage_unavailable',
      http_status: 503,
      ms,
      webhook_id: c.webhookId,
      err: err instanceof StorageError ? err.message : 'unexpected error while storing',
      ...request.trace?.logIds,
    },
    'delivery not stored',
  );
}

/** What the request's span says of a stored delivery (no CPF: the body is not read for it). */
function delivered(c: ClassifiedDelivery, stored: IngestResult): TraceAttributes {
  return {
    'consig.event_id': stored.eventId,
    'consig.kind': c.kind,
    'consig.evento': c.evento,
    'consig.webhook_id': c.webhookId,
    'consig.nu_proposta': c.nuProposta === null ? null : String(c.nuProposta),
    'consig.request_id': c.requestId,
  };
}

/**
 * Counts the answer, observes its latency, reports it to the deactivation alarm and ends its span;
 * returns the latency in ms, rounded to the microsecond.
 */
function measure(
  deps: WebhookDeps,
  request: RequestFacts,
  outcome: DeliveryOutcome,
  httpStatus: number,
  attributes?: TraceAttributes,
): number {
  request.trace?.end(outcome, httpStatus, attributes);
  const ms = deps.clock.monotonic() - request.startedAt;
  deps.inFlight?.end(request.flight);
  deps.metrics.deliveries.inc({ outcome, route: request.path });
  deps.metrics.ackLatency.observe({ outcome }, ms / 1000);
  deps.watch?.answered(outcome);
  if (request.answering) deps.answers?.end();
  request.answering = false;
  return Math.round(ms * 1000) / 1000;
}

function sendJson(
  res: ServerResponse,
  status: number,
  body: object,
  headers: Record<string, string> = {},
): void {
  // The client may be gone (an aborted body) or a late storage answer may race a closed socket.
  if (res.headersSent || res.destroyed) return;
  const json = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(json)),
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(json);
}
