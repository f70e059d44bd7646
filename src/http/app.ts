import express from 'express';
import type { AppDeps } from './app-deps';
import { adminRouter } from './admin/admin-router';
import { consoleRouter, faviconRoute } from './console/console-router';
import { errorHandler, notFound } from './errors';
import { healthRoutes } from './health-routes';
import { metricsRoute } from './metrics-route';
import { createWebhookHandler, type WebhookHandler } from './webhook-handler';
import { webhookRoutes } from './webhook-routes';

export type { AppDeps } from './app-deps';

/** Builds the Express app: webhook routes, health, metrics, admin. It never listens: a server or a test does. */
export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(webhookRoutes(deps.webhook ?? webhookHandlerFor(deps)));
  app.use(healthRoutes(deps));
  app.use(metricsRoute({ ...deps, port: deps.storePort }));
  app.use('/admin', adminRouter(deps));
  app.use('/console', consoleRouter(deps));
  app.use(faviconRoute(deps));
  app.use(notFound);
  app.use(errorHandler(deps.logger));
  return app;
}

/** A webhook handler built from `config`, for an app (or a fast path) that was not given one. */
export function webhookHandlerFor(deps: AppDeps): WebhookHandler {
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
    watch: deps.deliveryWatch,
    inFlight: deps.inFlight,
    answers: deps.answers,
    traces: deps.traces,
    // Cluster mode: a replica that refuses PostgreSQL's schema, migrates it, or has not read it yet
    // acknowledges nothing (issue 46).
    refusing: deps.readiness === undefined ? undefined : () => deps.readiness?.().holdWebhooks,
  });
}
