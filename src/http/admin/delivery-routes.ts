import { Router } from 'express';
import type { AdminStore } from '../../core/store-port';
import { integerParam, textParam } from './params';

/** `GET /admin/deliveries?outcome=&limit=&before=`: the requests to the webhook routes, newest first. */
export function deliveryRoutes(log: AdminStore): Router {
  const router = Router();
  router.get('/deliveries', async (req, res) => {
    const filter = {
      outcome: textParam(req, 'outcome'),
      limit: integerParam(req, 'limit'),
      beforeId: integerParam(req, 'before'),
    };
    res.json({ deliveries: await log.deliveries(filter) });
  });
  return router;
}
