import { type Request, type Response, Router } from 'express';
import { replayEvents } from '../../store/pipeline-queries';
import type { EventRow } from '../../store/events';
import type { AppDeps } from '../app';
import { integerParam, nuPropostaParam, textParam } from './params';

/** `GET /admin/events`, `GET /admin/events/:id` (with its raw body), `POST /admin/events/:id/replay`. */
export function eventRoutes(deps: Pick<AppDeps, 'store' | 'clock' | 'pipeline'>): Router {
  const { events } = deps.store;
  const router = Router();

  router.get('/events', (req, res) => {
    res.json({
      events: events.list({
        status: textParam(req, 'status'),
        evento: textParam(req, 'evento'),
        kind: textParam(req, 'kind'),
        nuProposta: nuPropostaParam(req),
        beforeId: integerParam(req, 'before'),
        limit: integerParam(req, 'limit'),
      }),
    });
  });

  /** The event named by `:id`, or undefined with the 404 already sent. */
  const eventOr404 = (req: Request, res: Response): EventRow | undefined => {
    const id = Number(req.params.id);
    const row = Number.isSafeInteger(id) ? events.get(id) : undefined;
    if (!row) res.status(404).json({ error: 'not_found', message: `no event ${req.params.id}` });
    return row;
  };

  router.get('/events/:id', (req, res) => {
    const row = eventOr404(req, res);
    if (!row) return;
    const body = events.body(row.id);
    // A body that is not valid UTF-8 was stored as a BLOB: it travels as base64.
    const json = typeof body === 'string' || body === null ? body : { base64: body.toString('base64') };
    res.json({ event: { ...row, body: json } });
  });

  // The one replay rule (store replayEvents), shared with the `replay` command.
  router.post('/events/:id/replay', (req, res) => {
    const row = eventOr404(req, res);
    if (!row) return;
    const result = replayEvents(deps.store.db, [row.id], deps.clock.now().toISOString());
    if (result.notReplayable.length > 0) {
      res.status(409).json({
        error: 'not_replayable',
        message: `event ${row.id} is ${row.status}: it has no handler to run`,
      });
      return;
    }
    deps.pipeline?.sweep();
    res.status(202).json({ status: 'queued', event_ids: result.queued });
  });

  return router;
}
