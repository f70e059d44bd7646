import type { IncomingMessage, ServerResponse } from 'node:http';
import getRawBody from 'raw-body';
import type { Clock } from '../clock';
import { classifyDelivery, type Route } from '../domain/delivery';
import { StorageError } from '../domain/errors';
import { type IpAllowList, clientAddress } from '../domain/cidr';
import { verifySignature } from '../domain/signature';
import { initialAlarmState, recordSignatureOutcome } from '../domain/signature-alarm';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { DeliveryOutcome } from '../store/deliveries';
import type { IngestWriter } from '../store/ingest-writer';

/**
 * The webhook path of SPEC §4: read the raw body (bounded while reading), verify the signature on
 * those bytes, classify, store (group commit), answer. The answer depends only on verify + store;
 * no handler runs inside the request. Framework-free: it takes Node's request and response, so the
 * Express route is a one-line adapter.
 */

export interface WebhookDeps {
  secrets: readonly string[];
  signatureHeader: string;
  maxBodyBytes: number;
  writer: IngestWriter;
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /** ALLOWED_CIDRS: who may POST here at all (checked before reading the body). */
  allowList?: IpAllowList | undefined;
  /** TRUST_PROXY: proxies whose X-Forwarded-For gives the client address. */
  trustProxy?: number;
}

/** Seconds the service should wait before retrying after a 503 (it has up to 3 attempts, §6.1). */
const RETRY_AFTER_SECONDS = 5;

const ROUTE_PATHS: Record<Route, string> = { events: '/webhooks', registry: '/webhooks/registry' };

function send(res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
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

interface BodyError extends Error {
  type?: string;
}

export type WebhookHandler = (req: IncomingMessage, res: ServerResponse, route: Route) => void;

export function createWebhookHandler(deps: WebhookDeps): WebhookHandler {
  const { secrets, maxBodyBytes, writer, metrics, logger, clock } = deps;
  const headerName = deps.signatureHeader.toLowerCase();
  let alarm = initialAlarmState;

  function observe(route: Route, outcome: DeliveryOutcome, startedAt: number): number {
    const ms = clock.monotonic() - startedAt;
    metrics.deliveries.inc({ outcome, route: ROUTE_PATHS[route] });
    metrics.ackLatency.observe({ outcome }, ms / 1000);
    return Math.round(ms * 1000) / 1000;
  }

  function signatureRejected(
    route: Route,
    reason: string,
    startedAt: number,
    receivedAt: string,
    bodyBytes: number,
    remote: string | null,
    res: ServerResponse,
  ) {
    const step = recordSignatureOutcome(alarm, true, clock.now().getTime());
    alarm = step.state;
    metrics.signatureAlarm.set(alarm.consecutive);
    const messages: Record<string, string> = {
      missing: `missing ${deps.signatureHeader} header`,
      malformed: `${deps.signatureHeader} must be sha256= followed by 64 hex digits`,
      mismatch: 'signature does not match the body',
    };
    send(res, 401, { error: 'invalid_signature', message: messages[reason] ?? 'invalid signature' });
    const ms = observe(route, 'invalid_signature', startedAt);
    writer.audit({
      receivedAt,
      path: ROUTE_PATHS[route],
      outcome: 'invalid_signature',
      httpStatus: 401,
      dedupKey: null,
      eventId: null,
      durationMs: ms,
      bodyBytes,
      secretIndex: null,
      remoteAddr: remote,
      detail: reason,
    });
    logger.warn(
      { route: ROUTE_PATHS[route], outcome: 'invalid_signature', reason, http_status: 401, ms, remote },
      'delivery rejected',
    );
    if (step.alarm) {
      logger.error(
        {
          consecutive: alarm.consecutive,
          since: new Date(alarm.firstAt ?? 0).toISOString(),
          header: deps.signatureHeader,
        },
        `${alarm.consecutive} consecutive webhook deliveries rejected for invalid signature: the service deactivates the callback after 3 consecutive failed deliveries (seed §6.1). Check that WEBHOOK_SECRETS holds the secret registered with the service and SIGNATURE_HEADER its header name, then re-register or re-activate the callback.`,
      );
    }
  }

  return function handleWebhook(req: IncomingMessage, res: ServerResponse, route: Route): void {
    const startedAt = clock.monotonic();
    const receivedAt = clock.now().toISOString();
    const path = ROUTE_PATHS[route];
    const remote = clientAddress(
      req.socket.remoteAddress,
      req.headers['x-forwarded-for'],
      deps.trustProxy ?? 0,
    );
    if (deps.allowList && !deps.allowList.allows(remote)) {
      send(
        res,
        403,
        { error: 'forbidden', message: 'this address may not deliver webhooks here' },
        { connection: 'close' },
      );
      const ms = observe(route, 'forbidden', startedAt);
      writer.audit({
        receivedAt,
        path,
        outcome: 'forbidden',
        httpStatus: 403,
        dedupKey: null,
        eventId: null,
        durationMs: ms,
        bodyBytes: null,
        secretIndex: null,
        remoteAddr: remote,
        detail: 'not in ALLOWED_CIDRS',
      });
      logger.warn(
        { route: path, outcome: 'forbidden', http_status: 403, remote },
        'delivery refused: address not in ALLOWED_CIDRS',
      );
      return;
    }

    const bodyFailed = (err: BodyError) => {
      const tooLarge = err.type === 'entity.too.large';
      const outcome: DeliveryOutcome = tooLarge ? 'payload_too_large' : 'aborted';
      const status = tooLarge ? 413 : 400;
      // The rest of the body was not read: close the connection rather than reuse it.
      if (tooLarge) {
        send(
          res,
          413,
          { error: 'payload_too_large', message: `body exceeds MAX_BODY_BYTES (${maxBodyBytes} bytes)` },
          { connection: 'close' },
        );
      } else {
        send(
          res,
          400,
          { error: 'bad_request', message: 'request body could not be read completely' },
          { connection: 'close' },
        );
      }
      const ms = observe(route, outcome, startedAt);
      const length = Number(req.headers['content-length']);
      writer.audit({
        receivedAt,
        path,
        outcome,
        httpStatus: status,
        dedupKey: null,
        eventId: null,
        durationMs: ms,
        bodyBytes: Number.isFinite(length) ? length : null,
        secretIndex: null,
        remoteAddr: remote,
        detail: err.type ?? err.message,
      });
      logger.warn(
        { route: path, outcome, http_status: status, ms, remote, reason: err.type },
        'delivery rejected',
      );
    };

    getRawBody(req, { length: req.headers['content-length'], limit: maxBodyBytes }, (err, body) => {
      if (err) return bodyFailed(err as BodyError);
      const verdict = verifySignature(body, req.headers[headerName], secrets);
      if (!verdict.ok)
        return signatureRejected(route, verdict.reason, startedAt, receivedAt, body.length, remote, res);
      if (alarm.consecutive > 0) {
        alarm = recordSignatureOutcome(alarm, false, 0).state;
        metrics.signatureAlarm.set(0);
      }

      const c = classifyDelivery(body, route);
      writer
        .ingest(
          {
            dedupKey: c.dedupKey,
            webhookId: c.webhookId,
            kind: c.kind,
            evento: c.evento,
            nuProposta: c.nuProposta,
            requestId: c.requestId,
            registryStatus: c.registryStatus,
            tentativa: c.tentativa,
            receivedAt,
            body: c.text ?? body,
            bodyBytes: body.length,
            status: c.status,
            lastError: c.invalidReason,
          },
          {
            receivedAt,
            path,
            bodyBytes: body.length,
            secretIndex: verdict.secretIndex,
            remoteAddr: remote,
            detail: c.invalidReason,
            startedAt,
          },
        )
        .then(
          (r) => {
            const payload: Record<string, unknown> = { status: r.outcome, event_id: r.eventId };
            if (r.outcome === 'quarantined') payload.reason = c.invalidReason;
            send(res, 200, payload);
            const ms = observe(route, r.outcome, startedAt);
            if (r.outcome !== 'duplicate')
              metrics.eventsStored.inc({ evento: c.evento ?? `(${c.kind})`, status: c.status });
            const line = {
              route: path,
              outcome: r.outcome,
              http_status: 200,
              ms,
              event_id: r.eventId,
              kind: c.kind,
              evento: c.evento,
              status: r.status,
              nu_proposta: c.nuProposta,
              request_id: c.requestId,
              webhook_id: c.webhookId,
              tentativa: c.tentativa,
            };
            if (r.outcome === 'quarantined')
              logger.warn({ ...line, reason: c.invalidReason }, 'delivery quarantined');
            else logger.info(line, 'delivery');
          },
          (e: unknown) => {
            const message = e instanceof StorageError ? e.message : 'unexpected error while storing';
            send(
              res,
              503,
              { error: 'storage_unavailable', message: 'the delivery could not be stored; retry later' },
              { 'retry-after': String(RETRY_AFTER_SECONDS) },
            );
            const ms = observe(route, 'storage_unavailable', startedAt);
            logger.error(
              {
                route: path,
                outcome: 'storage_unavailable',
                http_status: 503,
                ms,
                webhook_id: c.webhookId,
                err: message,
              },
              'delivery not stored',
            );
          },
        );
    });
  };
}
