import { withMaskedResultBody } from '../../domain/privacy';
import express, { type Request, type Response, Router } from 'express';
import { ConsigError } from '../../domain/errors';
import { isObject, nonBlankString, nonBlankText, own } from '../../domain/json';
import { parseNuProposta } from '../../domain/log-rows';
import type { AppDeps } from '../app-deps';
import type { AdminStore } from '../../core/store-port';
import { integerParam, nuPropostaParam, textParam } from './params';
import type { ReadAudit } from './read-audit';

type AverbacaoDeps = Pick<AppDeps, 'clock' | 'serviceClient' | 'registryGraceMs'>;

/**
 * The tracked registrations (averbações, interface §4.2–§4.4): `GET /admin/averbacoes` and
 * `GET /admin/averbacoes/:requestId`, from whichever store holds the log. Both audited
 * (read-audit.ts): a row carries the registry's answer as the service sent it (`result_body`, a
 * payload interface §4.4 does not show, kept whole), as an event's body.
 */
export function averbacaoRoutes(log: AdminStore, audited: ReadAudit): Router {
  const router = Router();
  router.get('/averbacoes', async (req, res) => {
    const stale = textParam(req, 'stale');
    const filter = {
      status: textParam(req, 'status'),
      stale: stale === undefined ? undefined : stale === 'true' || stale === '1',
      nuProposta: nuPropostaParam(req),
      limit: integerParam(req, 'limit'),
    };
    const rows = await log.averbacoes(filter);
    await audited(req, { target: 'averbacoes', served: { rows: rows.length } });
    // The registry's answers are the service's text: any CPF in them masked (contract §5).
    res.json({ averbacoes: rows.map(withMaskedResultBody) });
  });
  router.get('/averbacoes/:requestId', async (req, res) => {
    const row = await log.averbacao(String(req.params.requestId));
    if (!row) {
      res
        .status(404)
        .json({ error: 'not_found', message: `requestId ${req.params.requestId} is not tracked` });
      return;
    }
    await audited(req, { target: `averbacao:${row.request_id}` });
    res.json({ averbacao: withMaskedResultBody(row) });
  });
  return router;
}

/**
 * Declare a registration started elsewhere (`POST /admin/averbacoes/track`), or start one through
 * the service and track it (`POST /admin/averbacoes`), in whichever store holds the log (in cluster
 * mode the first poll is a job queued with the row).
 */
export function averbacaoWriteRoutes(deps: AverbacaoDeps, log: AdminStore): Router {
  const router = Router();
  router.post('/averbacoes/track', express.json({ limit: '16kb' }), (req, res) => track(deps, log, req, res));
  router.post('/averbacoes', express.json({ limit: '64kb' }), (req, res) => start(deps, log, req, res));
  return router;
}

/** `{ requestId, nu_proposta? }`: tracks a registration started elsewhere; 201 when new, 200 when known. */
async function track(deps: AverbacaoDeps, log: AdminStore, req: Request, res: Response): Promise<void> {
  const requestId = nonBlankString(own(req.body, 'requestId'))?.trim();
  if (requestId === undefined || requestId.length > 200) {
    res.status(400).json({ error: 'bad_request', message: 'requestId (string) is required' });
    return;
  }
  const { created, averbacao } = await log.track(
    { requestId, correlationId: null, nuProposta: nuPropostaOf(req.body), via: 'declared' },
    deps.clock.now(),
    deps.registryGraceMs ?? 0,
  );
  res.status(created ? 201 : 200).json({
    status: created ? 'tracked' : 'already_tracked',
    averbacao: averbacao && withMaskedResultBody(averbacao),
  });
}

/** Sends the body to `POST /contract/averbacao` and tracks the `requestId` the service answers. */
async function start(deps: AverbacaoDeps, log: AdminStore, req: Request, res: Response): Promise<void> {
  const client = deps.serviceClient;
  if (!client) {
    res.status(503).json({ error: 'service_not_configured', message: 'SERVICE_BASE_URL is not set' });
    return;
  }
  const body: unknown = req.body;
  if (!isObject(body)) {
    res.status(400).json({
      error: 'bad_request',
      message: 'a JSON object is required (the body of POST /contract/averbacao)',
    });
    return;
  }
  try {
    const accepted = await client.startAverbacao(body);
    const { averbacao } = await log.track(
      { ...accepted, nuProposta: nuPropostaOf(body), via: 'started' },
      deps.clock.now(),
      deps.registryGraceMs ?? 0,
    );
    res.status(202).json({ status: 'tracked', averbacao });
  } catch (err) {
    // Anything but the client's own errors is a fault here: the error handler answers 500.
    if (!(err instanceof ConsigError)) throw err;
    const serviceError = nonBlankString(own(err, 'error'));
    res.status(statusForClientError(err.code)).json({
      error: err.code,
      message: err.message,
      ...(serviceError === null ? {} : { service_error: serviceError }),
    });
  }
}

/** The client refused the body (400), the service refused it for a business rule (422), or it failed (502). */
function statusForClientError(code: string): number {
  if (code === 'INVALID_REQUEST') return 400;
  if (code === 'SERVICE_BUSINESS_ERROR') return 422;
  return 502;
}

/** `nu_proposta` of a JSON body, when it names one. */
function nuPropostaOf(body: unknown): number | string | null {
  const nu = nonBlankText(own(body, 'nu_proposta'));
  return nu === null ? null : parseNuProposta(nu);
}
