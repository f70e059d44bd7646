import express, { type NextFunction, type Request, type Response } from 'express';
import type { ServiceClient } from '../client';
import type { Clock } from '../clock';
import type { Config } from '../config';
import { maskCpf } from '../domain/privacy';
import { constantTimeEqual } from '../domain/signature';
import { trackRegistration, trackStarted } from '../registry/tracking';
import { replayEvents } from '../store/pipeline-queries';
import { parseNuProposta } from '../store/proposals';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { IngestWriter } from '../store/ingest-writer';
import type { Store } from '../store/store';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Route } from '../domain/delivery';
import { createWebhookHandler, type WebhookHandler } from './webhook-handler';

export interface AppDeps {
  config: Pick<Config, 'webhookSecrets' | 'signatureHeader' | 'maxBodyBytes' | 'adminToken'> &
    Partial<Pick<Config, 'allowedCidrs' | 'trustProxy'>>;
  store: Store;
  writer: IngestWriter;
  metrics: Metrics;
  logger: Logger;
  clock: Clock;
  /** In-process pipeline: replays are picked up at once instead of at the next sweep. */
  pipeline?: { sweep(): void };
  /** The service's API, for POST /admin/averbacoes (start one and track it); null when unset. */
  serviceClient?: Pick<ServiceClient, 'startAverbacao'> | null;
  /** REGISTRY_WEBHOOK_GRACE_MS: a declared registration's first poll waits this long. */
  registryGraceMs?: number;
  /** The webhook handler to mount (shared with the fast path of createRequestListener). */
  webhook?: WebhookHandler;
}

function webhookFor(deps: AppDeps): WebhookHandler {
  return createWebhookHandler({
    secrets: deps.config.webhookSecrets,
    signatureHeader: deps.config.signatureHeader,
    maxBodyBytes: deps.config.maxBodyBytes,
    writer: deps.writer,
    metrics: deps.metrics,
    logger: deps.logger,
    clock: deps.clock,
    allowList: deps.config.allowedCidrs,
    trustProxy: deps.config.trustProxy,
  });
}

const WEBHOOK_ROUTES: Record<string, Route> = {
  '/webhooks': 'events',
  '/webhooks/': 'events',
  '/webhooks/registry': 'registry',
  '/webhooks/registry/': 'registry',
};

/**
 * The server's request listener. `POST /webhooks` and `POST /webhooks/registry` go straight to the
 * framework-free webhook handler; everything else goes through Express. Express 5 costs about
 * 0.3 ms of CPU per request on these machines (see TOOLCHAIN.md and `npm run bench`), as much as
 * verifying, storing and logging a delivery; the hot path does not pay it. The same handler is
 * mounted in the Express app too, so both paths answer identically.
 */
export function createRequestListener(deps: AppDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const webhook = deps.webhook ?? webhookFor(deps);
  const app = createApp({ ...deps, webhook });
  return (req, res) => {
    if (req.method === 'POST') {
      const url = req.url ?? '';
      const q = url.indexOf('?');
      const route = WEBHOOK_ROUTES[q === -1 ? url : url.slice(0, q)];
      if (route !== undefined) return webhook(req, res, route);
    }
    app(req, res);
  };
}

/** Builds the Express app. It never listens: main.ts (or a test) does. */
export function createApp(deps: AppDeps): express.Express {
  const { store, metrics, logger, clock } = deps;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);

  const webhook = deps.webhook ?? webhookFor(deps);
  app.post('/webhooks', (req, res) => webhook(req, res, 'events'));
  app.post('/webhooks/registry', (req, res) => webhook(req, res, 'registry'));
  app.all(['/webhooks', '/webhooks/registry'], (_req, res) => {
    res.set('allow', 'POST').status(405).json({ error: 'method_not_allowed', message: 'use POST' });
  });

  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', (_req, res) => {
    try {
      store.probeWrite(clock.now());
      res.json({ status: 'ready' });
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'readiness probe failed');
      res
        .status(503)
        .json({ status: 'unavailable', error: 'storage_unavailable', message: (err as Error).message });
    }
  });
  app.get('/metrics', async (_req, res, next) => {
    try {
      for (const [status, n] of Object.entries(store.events.countByStatus()))
        metrics.eventsByStatus.set({ status }, n);
      const av = store.averbacoes.counts();
      for (const [status, n] of Object.entries(av.byStatus)) metrics.averbacoes.set({ status }, n);
      metrics.averbacoesStale.set(av.stale);
      metrics.averbacoesWaiting.set(av.waiting);
      const text = await metrics.registry.metrics();
      res.set('content-type', metrics.registry.contentType).send(text);
    } catch (err) {
      next(err);
    }
  });

  app.use('/admin', adminRouter(deps));

  app.use((_req, res) => {
    res.status(404).json({ error: 'not_found' });
  });
  app.use(
    (err: Error & { status?: number; type?: string }, _req: Request, res: Response, _next: NextFunction) => {
      const status =
        typeof err.status === 'number' && err.status >= 400 && err.status < 600 ? err.status : 500;
      if (status >= 500) logger.error({ err: err.message }, 'unhandled error in route');
      if (res.headersSent) return;
      res.status(status).json({ error: status >= 500 ? 'internal_error' : (err.type ?? 'bad_request') });
    },
  );
  return app;
}

/** `/admin/*`: absent ADMIN_TOKEN → 404 (the routes do not exist); wrong token → 401. */
function adminRouter(deps: AppDeps): express.Router {
  const router = express.Router();
  const token = deps.config.adminToken;
  router.use((req, res, next) => {
    if (token === undefined) {
      res.status(404).json({ error: 'not_found' });
      return;
    }
    const header = req.get('authorization') ?? '';
    const match = /^Bearer (.+)$/i.exec(header);
    if (!match?.[1] || !constantTimeEqual(match[1], token)) {
      res
        .set('www-authenticate', 'Bearer')
        .status(401)
        .json({ error: 'unauthorized', message: 'Authorization: Bearer $ADMIN_TOKEN required' });
      return;
    }
    next();
  });
  const { events, deliveries } = deps.store;
  router.get('/events', (req, res) => {
    const q = req.query as Record<string, string | undefined>;
    res.json({
      events: events.list({
        status: q.status,
        evento: q.evento,
        kind: q.kind,
        nuProposta: q.nu_proposta,
        beforeId: q.before ? Number(q.before) : undefined,
        limit: q.limit ? Number(q.limit) : undefined,
      }),
    });
  });
  /** The event named by `:id`, or a 404 already sent. */
  const eventOr404 = (req: Request, res: Response) => {
    const id = Number(req.params.id);
    const row = Number.isSafeInteger(id) ? events.get(id) : undefined;
    if (!row) res.status(404).json({ error: 'not_found', message: `no event ${req.params.id}` });
    return row;
  };
  router.get('/events/:id', (req, res) => {
    const row = eventOr404(req, res);
    if (!row) return;
    const body = events.body(row.id);
    res.json({
      event: {
        ...row,
        body: typeof body === 'string' ? body : body === null ? null : { base64: body.toString('base64') },
      },
    });
  });
  router.post('/events/:id/replay', (req, res) => {
    const row = eventOr404(req, res);
    if (!row) return;
    const result = replayEvents(deps.store.db, [row.id], deps.clock.now().toISOString());
    if (result.notReplayable.length > 0) {
      res
        .status(409)
        .json({ error: 'not_replayable', message: `event ${row.id} is ${row.status}: it has no handler to run` });
      return;
    }
    const requeued = result.queued;
    deps.pipeline?.sweep();
    res.status(202).json({ status: 'queued', event_ids: requeued });
  });
  router.get('/proposals/:nu', (req, res) => {
    const nu = parseNuProposta(String(req.params.nu));
    const proposal = deps.store.proposals.get(nu);
    const timeline = deps.store.proposals.timeline(nu);
    if (!proposal && timeline.length === 0) {
      res.status(404).json({ error: 'not_found', message: `no proposal ${req.params.nu}` });
      return;
    }
    res.json({ proposal: proposal ? { ...proposal, nu_cpf: maskCpf(proposal.nu_cpf) } : null, timeline });
  });
  router.get('/averbacoes', (req, res) => {
    const q = req.query as Record<string, string | undefined>;
    res.json({
      averbacoes: deps.store.averbacoes.list({
        status: q.status,
        stale: q.stale === undefined ? undefined : q.stale === 'true' || q.stale === '1',
        nuProposta: q.nu_proposta === undefined ? undefined : parseNuProposta(q.nu_proposta),
        limit: q.limit ? Number(q.limit) : undefined,
      }),
    });
  });
  router.get('/averbacoes/:requestId', (req, res) => {
    const row = deps.store.averbacoes.get(String(req.params.requestId));
    if (!row) {
      res
        .status(404)
        .json({ error: 'not_found', message: `requestId ${req.params.requestId} is not tracked` });
      return;
    }
    res.json({ averbacao: row });
  });
  router.post('/averbacoes/track', express.json({ limit: '16kb' }), (req, res) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const requestId = typeof body.requestId === 'string' ? body.requestId.trim() : '';
    if (requestId === '' || requestId.length > 200) {
      res.status(400).json({ error: 'bad_request', message: 'requestId (string) is required' });
      return;
    }
    const nu = body.nu_proposta;
    const nuProposta = typeof nu === 'number' || typeof nu === 'string' ? parseNuProposta(String(nu)) : null;
    const created = trackRegistration(
      deps.store.averbacoes,
      { requestId, nuProposta, via: 'declared' },
      deps.clock.now(),
      deps.registryGraceMs ?? 0,
    );
    res.status(created ? 201 : 200).json({
      status: created ? 'tracked' : 'already_tracked',
      averbacao: deps.store.averbacoes.get(requestId),
    });
  });
  router.post('/averbacoes', express.json({ limit: '64kb' }), async (req, res) => {
    const client = deps.serviceClient;
    if (!client) {
      res.status(503).json({ error: 'service_not_configured', message: 'SERVICE_BASE_URL is not set' });
      return;
    }
    const body = req.body as unknown;
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      res.status(400).json({
        error: 'bad_request',
        message: 'a JSON object is required (the body of POST /contract/averbacao)',
      });
      return;
    }
    try {
      const accepted = await client.startAverbacao(body as Record<string, unknown>);
      const nu = (body as Record<string, unknown>).nu_proposta;
      const nuProposta =
        typeof nu === 'number' || typeof nu === 'string' ? parseNuProposta(String(nu)) : null;
      trackStarted(deps.store.averbacoes, accepted, nuProposta, deps.clock.now(), deps.registryGraceMs ?? 0);
      res.status(202).json({ status: 'tracked', averbacao: deps.store.averbacoes.get(accepted.requestId) });
    } catch (err) {
      const e = err as Error & { code?: string; error?: string; status?: number };
      const status = e.code === 'INVALID_REQUEST' ? 400 : e.code === 'SERVICE_BUSINESS_ERROR' ? 422 : 502;
      res.status(status).json({
        error: e.code ?? 'service_error',
        message: e.message,
        ...(e.error ? { service_error: e.error } : {}),
      });
    }
  });
  router.get('/deliveries', (req, res) => {
    const q = req.query as Record<string, string | undefined>;
    res.json({
      deliveries: deliveries.list({
        outcome: q.outcome,
        limit: q.limit ? Number(q.limit) : undefined,
        beforeId: q.before ? Number(q.before) : undefined,
      }),
    });
  });
  return router;
}
