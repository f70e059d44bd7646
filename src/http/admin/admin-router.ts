import { type RequestHandler, Router } from 'express';
import { constantTimeEqual } from '../../domain/signature';
import type { AppDeps } from '../app-deps';
import { notFound } from '../errors';
import { adminStore } from '../../core/store-port';
import { storeUnavailableAs503 } from './store-unavailable';
import { averbacaoRoutes, averbacaoWriteRoutes } from './averbacao-routes';
import { deliveryRoutes } from './delivery-routes';
import { eventRoutes } from './event-routes';
import { feedRoutes } from './feed-routes';
import { forwardRoutes } from './forward-routes';
import { proposalRoutes } from './proposal-routes';
import { adminReadAudit } from './read-audit';
import { subjectRoutes } from './subject-routes';

/**
 * `/admin/*`, behind `Authorization: Bearer $ADMIN_TOKEN`, on the store (the SQLite file or, in
 * cluster mode, PostgreSQL): the same routes, parameters and answers, PostgreSQL
 * being away answered 503 `log_unavailable`.
 */
export function adminRouter(deps: AppDeps): Router {
  const log = adminStore(deps.storePort);
  // The reads that serve personal data record themselves (read-audit.ts): the routes name their target.
  const audited = adminReadAudit(deps);
  const router = Router();
  router.use(requireAdminToken(deps.config.adminToken));
  router.use(eventRoutes(deps, log, audited));
  router.use(proposalRoutes(log, audited));
  router.use(averbacaoRoutes(log, audited));
  router.use(averbacaoWriteRoutes(deps, log));
  router.use(deliveryRoutes(log));
  router.use(forwardRoutes(deps, log.forwards, audited));
  router.use(feedRoutes(deps, log.feed, adminReadAudit(deps, 'feed_read'), log.feedShared));
  router.use(subjectRoutes(deps));
  if (deps.storePort.mayBeAway) router.use(storeUnavailableAs503);
  return router;
}

/**
 * ADMIN_TOKEN unset → 404: the admin routes do not exist. A missing or wrong token → 401; the
 * comparison takes the same time wherever the tokens differ.
 */
function requireAdminToken(token: string | undefined): RequestHandler {
  return (req, res, next) => {
    if (token === undefined) return notFound(req, res);
    const match = /^Bearer (.+)$/i.exec(req.get('authorization') ?? '');
    if (!match?.[1] || !constantTimeEqual(match[1], token)) {
      res
        .set('www-authenticate', 'Bearer')
        .status(401)
        .json({ error: 'unauthorized', message: 'Authorization: Bearer $ADMIN_TOKEN required' });
      return;
    }
    next();
  };
}
