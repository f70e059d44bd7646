import { Router } from 'express';
import type { IncomingMessage } from 'node:http';
import type { Route } from '../domain/delivery';
import type { WebhookHandler } from './webhook-handler';

/** The paths the fast path answers itself; everything else goes to Express. */
const FAST_PATHS: Readonly<Record<string, Route>> = {
  '/webhooks': 'events',
  '/webhooks/': 'events',
  '/webhooks/registry': 'registry',
  '/webhooks/registry/': 'registry',
};

/** The webhook route of a `POST /webhooks…` request for the fast path; undefined for anything else. */
export function fastPathRoute(req: IncomingMessage): Route | undefined {
  if (req.method !== 'POST') return undefined;
  const url = req.url ?? '';
  const query = url.indexOf('?');
  return FAST_PATHS[query === -1 ? url : url.slice(0, query)];
}

/**
 * The webhook routes inside Express: the same handler as the fast path (a request the fast path
 * does not match, e.g. `/WEBHOOKS`, still gets the same answer), and 405 for other methods.
 */
export function webhookRoutes(webhook: WebhookHandler): Router {
  const router = Router();
  router.post('/webhooks', (req, res) => webhook(req, res, 'events'));
  router.post('/webhooks/registry', (req, res) => webhook(req, res, 'registry'));
  router.all(['/webhooks', '/webhooks/registry'], (_req, res) => {
    res.set('allow', 'POST').status(405).json({ error: 'method_not_allowed', message: 'use POST' });
  });
  return router;
}
