import type { Request, Response, Router } from 'express';
import { parseNuProposta } from '../../domain/log-rows';
import { isLockBusy, StorageError } from '../../domain/errors';
import { HttpError } from '../errors';
import { auditTarget } from '../admin/read-audit';
import { actorOf, audit, contextOf } from './console-auth';
import type { ConsoleDeps } from './deps';
import {
  averbacaoFilter,
  deadFilter,
  deliveryFilter,
  eventFilter,
  positiveId,
  proposalFilter,
  type Query,
  text,
} from './filters';
import { page } from './layout';
import { html } from './html';
import { auditPage } from './pages/audit-page';
import { averbacoesPage } from './pages/averbacoes-page';
import { DEAD_FILTER_FIELDS, deadPage } from './pages/dead-page';
import { deliveriesPage } from './pages/deliveries-page';
import { EVENT_FILTER_FIELDS, eventPage, eventsPage, rawFilters } from './pages/events-page';
import { forwardsPage } from './pages/forwards-page';
import { overviewPage } from './pages/overview-page';
import { proposalPage } from './pages/proposal-page';
import { proposalsPage } from './pages/proposals-page';

/**
 * The console's GET pages: each parses its filters, renders, and sends; no page writes but the
 * rollup and the audit of the two that show one person's data (an event's body, a proposal).
 */

/** Why a page that would show personal data is not shown: its audit row could not be written. */
export const PAGE_NOT_AUDITED =
  'This page could not be recorded in the audit, so it is not shown: try again in a moment.';

/**
 * Records that the session was shown `target` (`console_read`, contract §9), before the page is
 * sent. A page whose row is not written is not sent: a busy or unreachable log is the console's
 * usual 503 page, any other failure a 503 saying why (as `/admin` answers, http/admin/read-audit.ts).
 */
async function auditedPage(d: ConsoleDeps, req: Request, res: Response, target: string): Promise<void> {
  try {
    await audit(d, req, actorOf(res), 'console_read', auditTarget(target));
  } catch (err) {
    if (isLockBusy(err) || err instanceof StorageError) throw err;
    d.logger.error(
      { err: (err as Error).message, target: auditTarget(target) },
      'console: read not audited: refused',
    );
    throw new HttpError(503, 'audit_unavailable', PAGE_NOT_AUDITED);
  }
}

function notFoundPage(d: ConsoleDeps, res: Response, what: string): void {
  res.status(404).send(
    page({
      title: 'Not found',
      current: null,
      ctx: contextOf(d, res),
      body: html`<p class="error-box" role="alert">${what}</p>`,
    }),
  );
}

function proposalRoutes(router: Router, d: ConsoleDeps): void {
  router.get('/proposals', async (req, res) => {
    const filter = proposalFilter(req.query as Query);
    if (filter.nu !== undefined) {
      const nu = parseNuProposta(filter.nu);
      if (await d.log.proposalExists(nu)) {
        res.redirect(303, `/console/proposals/${encodeURIComponent(String(nu))}`);
        return;
      }
      res.status(404).send(await proposalsPage(d, contextOf(d, res), filter, filter.nu));
      return;
    }
    res.send(await proposalsPage(d, contextOf(d, res), filter));
  });
  router.get('/proposals/:nu', async (req, res) => {
    const raw = String(req.params.nu);
    const nu = parseNuProposta(raw.slice(0, 40));
    const html = await proposalPage(d, contextOf(d, res), nu);
    if (html === undefined) return notFoundPage(d, res, `No proposal ${raw.slice(0, 40)}.`);
    await auditedPage(d, req, res, `proposal:${String(nu)}`);
    res.send(html);
  });
}

function eventRoutes(router: Router, d: ConsoleDeps): void {
  router.get('/events', async (req, res) => {
    const q = req.query as Query;
    res.send(await eventsPage(d, contextOf(d, res), eventFilter(q), rawFilters(q, EVENT_FILTER_FIELDS)));
  });
  router.get('/events/:id', async (req: Request, res) => {
    const id = positiveId({ id: req.params.id }, 'id') as number;
    const notice =
      req.query.replayed === '1'
        ? 'Queued for replay: the status below changes once the pipeline has run it (reload).'
        : null;
    const html = await eventPage(d, contextOf(d, res), id, notice);
    if (html === undefined) return notFoundPage(d, res, `No event ${id}.`);
    await auditedPage(d, req, res, `event:${id}`);
    res.send(html);
  });
  router.get('/deliveries', async (req, res) => {
    const q = req.query as Query;
    res.send(
      await deliveriesPage(d, contextOf(d, res), deliveryFilter(q), rawFilters(q, ['outcome', 'from', 'to'])),
    );
  });
  router.get('/dead', async (req, res) => {
    const q = req.query as Query;
    const replayed = positiveId(q, 'replayed');
    res.send(
      await deadPage(d, contextOf(d, res), {
        filter: deadFilter(q),
        raw: rawFilters(q, DEAD_FILTER_FIELDS),
        destination: text(q, 'destination'),
        forwardsBefore: positiveId(q, 'fbefore'),
        replayed: replayed ?? (q.replayed === '0' ? 0 : undefined),
      }),
    );
  });
}

/** Mounts every page (after requireSession). */
export function pageRoutes(router: Router, d: ConsoleDeps): void {
  router.get('/', async (_req, res) => {
    res.send(await overviewPage(d, contextOf(d, res)));
  });
  proposalRoutes(router, d);
  eventRoutes(router, d);
  router.get('/averbacoes', async (req, res) => {
    const q = req.query as Query;
    res.send(
      await averbacoesPage(
        d,
        contextOf(d, res),
        averbacaoFilter(q),
        rawFilters(q, ['status', 'stale', 'waiting']),
      ),
    );
  });
  router.get('/forwards', async (req, res) => {
    const done = req.query.done;
    const notice =
      done === 'paused' ? 'Destination paused.' : done === 'resumed' ? 'Destination resumed.' : null;
    res.send(await forwardsPage(d, contextOf(d, res), notice));
  });
  router.get('/audit', async (req, res) => {
    res.send(await auditPage(d, contextOf(d, res), positiveId(req.query as Query, 'before')));
  });
}
