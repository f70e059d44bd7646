import express, { type Request, Router } from 'express';
import type { Destination } from '../../domain/forwarding/destinations';
import { isObject } from '../../domain/json';
import {
  type BackfillRange,
  DELIVERY_STATUS_FILTERS,
  type DeliveryStatusFilter,
  type ForwardFilter,
  isEmptyFilter,
  shownForward,
  shownForwardRow,
  isMessageType,
  parseInstant,
} from '../../domain/forwarding/admin';
import { parseNuProposta } from '../../domain/log-rows';
import type { AppDeps } from '../app-deps';
import { HttpError } from '../errors';
import type { ForwardAdmin as AdminForwards } from '../../core/store-port';
import { integerParam, nuPropostaParam, textParam } from './params';
import type { ReadAudit } from './read-audit';

/**
 * The operators' side of forwarding (contract §8): `GET /admin/forwards` (list), `GET
 * /admin/forwards/:id` (with its message and every attempt), `POST /admin/forwards/:id/replay`,
 * `POST /admin/forwards/replay` (by filter, or a dry run), `POST /admin/forwards/backfill`,
 * `GET /admin/destinations`, `POST /admin/destinations/:name/pause` and `/resume`. `GET
 * /admin/forwards/:id` is audited (read-audit.ts): it serves the message's body; the list serves
 * rows without one.
 */

type ForwardDeps = Pick<AppDeps, 'clock' | 'forwarding'>;

/** Most deliveries one listing returns. */
const MAX_LIST_LIMIT = 1000;

/** The routes above, on `admin`: the SQLite file's forwarding tables, or PostgreSQL's in cluster mode. */
export function forwardRoutes(deps: ForwardDeps, admin: AdminForwards, audited: ReadAudit): Router {
  const router = Router();
  deliveryRoutes(router, deps, admin, audited);
  bulkRoutes(router, deps, admin);
  destinationRoutes(router, deps, admin);
  return router;
}

function deliveryRoutes(router: Router, deps: ForwardDeps, admin: AdminForwards, audited: ReadAudit): void {
  router.get('/forwards', async (req, res) => {
    const limit = integerParam(req, 'limit') ?? 50;
    if (limit < 1 || limit > MAX_LIST_LIMIT) {
      throw new HttpError(400, 'bad_request', `limit must be an integer from 1 to ${MAX_LIST_LIMIT}`);
    }
    const type = textParam(req, 'type');
    if (type !== undefined && !isMessageType(type)) {
      throw new HttpError(
        400,
        'bad_request',
        'type must be event.received, proposal.changed or averbacao.result',
      );
    }
    const forwards = (
      await admin.list({
        ...queryFilter(req),
        type,
        beforeId: integerParam(req, 'before'),
        limit,
      })
    ).map(shownForwardRow);
    const last = forwards[forwards.length - 1];
    res.json({ forwards, next_before: forwards.length === limit && last !== undefined ? last.id : null });
  });

  router.get('/forwards/:id', async (req, res) => {
    const detail = await admin.show(deliveryId(req));
    if (detail === undefined) throw new HttpError(404, 'not_found', `no forward ${req.params.id}`);
    await audited(req, { target: `forward:${detail.delivery.id}` });
    res.json(shownForward(detail));
  });

  router.post('/forwards/:id/replay', async (req, res) => {
    const id = deliveryId(req);
    if ((await admin.missing([id])).length > 0)
      throw new HttpError(404, 'not_found', `no forward ${req.params.id}`);
    const counts = await admin.replay([id], deps.clock.now().toISOString());
    const shown = await admin.show(id);
    res.status(202).json({ status: 'queued', ...counts, delivery: shown && shownForward(shown).delivery });
  });
}

function bulkRoutes(router: Router, deps: ForwardDeps, admin: AdminForwards): void {
  const configured = deps.forwarding?.destinations ?? [];
  const json = express.json({ limit: '16kb' });

  router.post('/forwards/replay', json, async (req, res) => {
    const body = objectBody(req.body, ['destination', 'status', 'nu_proposta', 'since', 'until', 'dry_run']);
    const filter = bodyFilter(body);
    if (isEmptyFilter(filter)) {
      throw new HttpError(
        400,
        'filter_required',
        'give at least one of destination, status, nu_proposta, since, until (replaying everything is refused)',
      );
    }
    const dryRun = body.dry_run ?? false;
    if (typeof dryRun !== 'boolean') throw new HttpError(400, 'bad_request', 'dry_run must be true or false');
    if (dryRun) {
      const counts = await admin.countWhere(filter);
      res.json({ dry_run: true, matched: counts.replayed, by_status: counts.by_status });
      return;
    }
    const counts = await admin.replayWhere(filter, deps.clock.now().toISOString());
    res.status(202).json({ status: 'queued', ...counts });
  });

  router.post('/forwards/backfill', json, async (req, res) => {
    const body = objectBody(req.body, ['destination', 'nu_proposta', 'since', 'until']);
    const name = body.destination;
    if (typeof name !== 'string' || name === '') {
      throw new HttpError(
        400,
        'bad_request',
        'destination (the name of a configured destination) is required',
      );
    }
    const destination = configuredOr404(configured, name);
    const { nuProposta, since, until } = bodyFilter(body);
    const range: BackfillRange = { nuProposta, since, until };
    const counts = await admin.backfill(destination, range, deps.clock.now().toISOString());
    res.status(202).json({ status: 'queued', destination: name, ...counts });
  });
}

function destinationRoutes(router: Router, deps: ForwardDeps, admin: AdminForwards): void {
  const configured = deps.forwarding?.destinations ?? [];
  const summaryOf = async (name: string) =>
    (await admin.destinationSummaries(configured)).find((d) => d.name === name);

  router.get('/destinations', async (_req, res) => {
    res.json({ destinations: await admin.destinationSummaries(configured) });
  });

  router.post('/destinations/:name/pause', async (req, res) => {
    const destination = configuredOr404(configured, String(req.params.name));
    await admin.setPaused(destination.name, true, deps.clock.now().toISOString());
    res.json({ status: 'paused', destination: await summaryOf(destination.name) });
  });

  router.post('/destinations/:name/resume', async (req, res) => {
    const destination = configuredOr404(configured, String(req.params.name));
    if (destination.paused) {
      throw new HttpError(
        409,
        'paused_in_config',
        `destination ${destination.name} is paused in its configuration file ("paused": true): change the file and restart`,
      );
    }
    await admin.setPaused(destination.name, false, deps.clock.now().toISOString());
    res.json({ status: 'resumed', destination: await summaryOf(destination.name) });
  });
}

function configuredOr404(configured: readonly Destination[], name: string): Destination {
  const destination = configured.find((d) => d.name === name);
  if (destination === undefined) {
    const names = configured.map((d) => d.name).join(', ') || 'none';
    throw new HttpError(
      404,
      'not_found',
      `no destination ${JSON.stringify(name)} is configured (configured: ${names})`,
    );
  }
  return destination;
}

function deliveryId(req: Request): number {
  const text = String(req.params.id);
  if (!/^[1-9]\d{0,14}$/.test(text)) throw new HttpError(400, 'bad_request', 'id must be a positive integer');
  return Number(text);
}

/** destination, status, nu_proposta, since, until from the query string. */
function queryFilter(req: Request): ForwardFilter {
  return {
    destination: textParam(req, 'destination'),
    status: status(textParam(req, 'status')),
    nuProposta: nuPropostaParam(req),
    since: instant(textParam(req, 'since'), 'since'),
    until: instant(textParam(req, 'until'), 'until'),
  };
}

/** The same from a JSON body (already checked for unknown keys). */
function bodyFilter(body: Record<string, unknown>): ForwardFilter {
  const text = (name: string): string | undefined => {
    const value = body[name];
    if (value === undefined || value === null) return undefined;
    if (typeof value === 'string' && value !== '') return value;
    if (name === 'nu_proposta' && typeof value === 'number' && Number.isSafeInteger(value))
      return String(value);
    throw new HttpError(400, 'bad_request', `${name} must be a non-empty string`);
  };
  const nu = text('nu_proposta');
  return {
    destination: text('destination'),
    status: status(text('status')),
    nuProposta: nu === undefined ? undefined : parseNuProposta(nu),
    since: instant(text('since'), 'since'),
    until: instant(text('until'), 'until'),
  };
}

/**
 * The JSON body as an object with only `allowed` keys: a misspelt key would otherwise widen the
 * filter silently (`{"status":"dead","destinaton":"crm"}` replaying every destination's dead letters).
 */
function objectBody(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  const value = body ?? {};
  if (!isObject(value)) throw new HttpError(400, 'bad_request', 'the body must be a JSON object');
  const unknown = Object.keys(value).filter((key) => !allowed.includes(key));
  if (unknown.length > 0) {
    throw new HttpError(
      400,
      'bad_request',
      `unknown ${unknown.length === 1 ? 'field' : 'fields'} ${unknown.join(', ')} (allowed: ${allowed.join(', ')})`,
    );
  }
  return value;
}

function status(value: string | undefined): DeliveryStatusFilter | undefined {
  if (value === undefined) return undefined;
  if ((DELIVERY_STATUS_FILTERS as readonly string[]).includes(value)) return value as DeliveryStatusFilter;
  throw new HttpError(400, 'bad_request', `status must be one of ${DELIVERY_STATUS_FILTERS.join(', ')}`);
}

function instant(value: string | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  const parsed = parseInstant(value);
  if (parsed === null) {
    throw new HttpError(
      400,
      'bad_request',
      `${name} must be an ISO 8601 date (2026-11-21) or date-time with its zone (2026-11-21T10:00:00-03:00)`,
    );
  }
  return parsed;
}
