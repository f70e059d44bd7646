import { type RequestHandler, Router } from 'express';
import { constantTimeEqual } from '../../domain/signature';
import type { AppDeps } from '../app';
import { notFound } from '../errors';
import { averbacaoRoutes } from './averbacoes';
import { deliveryRoutes } from './deliveries';
import { eventRoutes } from './events';
import { feedRoutes } from './feed';
import { forwardRoutes } from './forwards';
import { proposalRoutes } from './proposals';

/** `/admin/*`, behind `Authorization: Bearer $ADMIN_TOKEN`. */
export function adminRouter(deps: AppDeps): Router {
  const router = Router();
  router.use(requireAdminToken(deps.config.adminToken));
  router.use(eventRoutes(deps));
  router.use(proposalRoutes(deps));
  router.use(averbacaoRoutes(deps));
  router.use(deliveryRoutes(deps));
  router.use(forwardRoutes(deps));
  router.use(feedRoutes(deps));
  return router;
}

/**
 * `/admin/*` in cluster mode: the change feed, read from PostgreSQL (`deps.clusterFeed`), behind the
 * same token; every other admin route answers with `rest` (501 until it reads PostgreSQL).
 */
export function clusterAdminRouter(deps: AppDeps, rest: RequestHandler): Router {
  const router = Router();
  router.use(requireAdminToken(deps.config.adminToken));
  router.use(feedRoutes(deps));
  router.use(rest);
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
