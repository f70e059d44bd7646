import { type RequestHandler, Router } from 'express';
import { constantTimeEqual } from '../../domain/signature';
import type { AppDeps } from '../app';
import { notFound } from '../errors';
import { logUnavailableAs503, notInClusterMode, sqliteAdminLog } from './admin-log';
import { averbacaoRoutes, averbacaoWriteRoutes } from './averbacoes';
import { deliveryRoutes } from './deliveries';
import { eventRoutes } from './events';
import { feedRoutes } from './feed';
import { forwardRoutes } from './forwards';
import { proposalRoutes } from './proposals';

/**
 * `/admin/*`, behind `Authorization: Bearer $ADMIN_TOKEN`, on the SQLite file's log or, in cluster
 * mode (`deps.clusterLog`), on PostgreSQL's: the same routes, parameters and answers, PostgreSQL
 * being away answered 503 `log_unavailable`. Declaring or starting an averbação writes only the
 * SQLite file yet: 501 in cluster mode.
 */
export function adminRouter(deps: AppDeps): Router {
  const log =
    deps.clusterLog ??
    sqliteAdminLog(deps.store, {
      sweep: () => deps.pipeline?.sweep(),
      nudge: () => deps.forwarding?.nudge(),
    });
  const router = Router();
  router.use(requireAdminToken(deps.config.adminToken));
  router.use(eventRoutes(deps, log));
  router.use(proposalRoutes(log));
  router.use(averbacaoRoutes(log));
  router.use(deps.clusterLog ? clusterAverbacaoWrites() : averbacaoWriteRoutes(deps));
  router.use(deliveryRoutes(log));
  router.use(forwardRoutes(deps, log.forwards));
  router.use(feedRoutes(deps, log.feed));
  if (deps.clusterLog) router.use(logUnavailableAs503);
  return router;
}

/** Cluster mode: the averbação writes of SQLite mode, not on PostgreSQL yet, each saying so. */
function clusterAverbacaoWrites(): Router {
  const router = Router();
  router.post(
    '/averbacoes/track',
    notInClusterMode(
      'declare it with the `track` command (with DATABASE_URL set it writes PostgreSQL and queues the first poll); a registration named by an event or a registry result is tracked by itself',
    ),
  );
  router.post(
    '/averbacoes',
    notInClusterMode(
      'start it with the `start-averbacao --no-track` command; the registration is tracked once an event or its registry result names it',
    ),
  );
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
