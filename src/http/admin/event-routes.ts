import { type Request, Router } from 'express';
import { maskCpfsInBytes, maskCpfsInJsonText } from '../../domain/privacy';
import type { AppDeps } from '../app-deps';
import { HttpError } from '../errors';
import type { AdminStore } from '../../core/store-port';
import { integerParam, nuPropostaParam, textParam } from './params';
import type { ReadAudit } from './read-audit';

/**
 * `GET /admin/events`, `GET /admin/events/:id` (with its body as received, CPF masked, audited:
 * read-audit.ts), `POST /admin/events/:id/replay`. The list is not audited: its rows carry no body
 * and no CPF.
 */
export function eventRoutes(deps: Pick<AppDeps, 'clock'>, log: AdminStore, audited: ReadAudit): Router {
  const router = Router();

  router.get('/events', async (req, res) => {
    const filter = {
      status: textParam(req, 'status'),
      evento: textParam(req, 'evento'),
      kind: textParam(req, 'kind'),
      nuProposta: nuPropostaParam(req),
      beforeId: integerParam(req, 'before'),
      limit: integerParam(req, 'limit'),
    };
    res.json({ events: await log.events(filter) });
  });

  router.get('/events/:id', async (req, res) => {
    const found = await log.event(eventId(req));
    if (!found) throw noEvent(req);
    // A body that is not valid UTF-8 was stored as bytes: it travels as base64. Either way every
    // CPF in it is masked (contract §5: admin answers never show one in full).
    const { body } = found;
    await audited(req, { target: `event:${found.event.id}` });
    const json =
      body === null
        ? null
        : typeof body === 'string'
          ? maskCpfsInJsonText(body)
          : { base64: maskCpfsInBytes(body).toString('base64') };
    res.json({ event: { ...found.event, body: json } });
  });

  // The one replay rule (core/replay.ts; on PostgreSQL with its turns, postgres/pg-port.ts), shared
  // with the `replay` command and the console.
  router.post('/events/:id/replay', async (req, res) => {
    const id = eventId(req);
    const result = await log.replayEvents([id], deps.clock.now().toISOString());
    if (result.unknown.length > 0) throw noEvent(req);
    const refused = result.notReplayable[0];
    if (refused !== undefined) {
      throw new HttpError(
        409,
        'not_replayable',
        `event ${id} is ${refused.status}: it has no handler to run`,
      );
    }
    res.status(202).json({ status: 'queued', event_ids: result.queued });
  });

  return router;
}

/** `:id` as an event id; one that cannot be an id names no event (404, as an unknown one). */
function eventId(req: Request): number {
  const id = Number(req.params.id);
  if (!Number.isSafeInteger(id)) throw noEvent(req);
  return id;
}

function noEvent(req: Request): HttpError {
  return new HttpError(404, 'not_found', `no event ${String(req.params.id)}`);
}
