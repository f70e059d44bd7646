import { Router } from 'express';
import type { AppDeps } from '../app';
import { integerParam, textParam } from './params';

/** `GET /admin/deliveries?outcome=&limit=&before=`: the requests to the webhook routes, newest first. */
export function deliveryRoutes(deps: Pick<AppDeps, 'store'>): Router {
  const { deliveries } = deps.store;
  const router = Router();
  router.get('/deliveries', (req, res) => {
    res.json({
      deliveries: deliveries.list({
        outcome: textParam(req, 'outcome'),
        limit: integerParam(req, 'limit'),
        beforeId: integerParam(req, 'before'),
      }),
    });
  });
  return router;
}
