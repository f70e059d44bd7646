import type { Request, Response, Router } from 'express';
import { parseNuProposta } from '../../store/proposals';
import { contextOf } from './auth';
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
import { auditPage } from './pages/audit';
import { averbacoesPage } from './pages/averbacoes';
import { DEAD_FILTER_FIELDS, deadPage } from './pages/dead';
import { deliveriesPage } from './pages/deliveries';
import { EVENT_FILTER_FIELDS, eventPage, eventsPage, rawFilters } from './pages/events';
import { forwardsPage } from './pages/forwards';
import { overviewPage } from './pages/overview';
import { proposalPage } from './pages/proposal';
import { proposalsPage } from './pages/proposals';

/** The console's GET pages: each parses its filters, renders, and sends; no page writes but the rollup. */

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
  router.get('/proposals', (req, res) => {
    const filter = proposalFilter(req.query as Query);
    if (filter.nu !== undefined) {
      const nu = parseNuProposta(filter.nu);
      if (d.store.proposals.get(nu) !== undefined || d.q.proposals.events(nu).length > 0) {
        res.redirect(303, `/console/proposals/${encodeURIComponent(String(nu))}`);
        return;
      }
      res.status(404).send(proposalsPage(d, contextOf(d, res), filter, filter.nu));
      return;
    }
    res.send(proposalsPage(d, contextOf(d, res), filter));
  });
  router.get('/proposals/:nu', (req, res) => {
    const raw = String(req.params.nu);
    const nu = parseNuProposta(raw.slice(0, 40));
    const html = proposalPage(d, contextOf(d, res), nu);
    if (html === undefined) notFoundPage(d, res, `No proposal ${raw.slice(0, 40)}.`);
    else res.send(html);
  });
}

function eventRoutes(router: Router, d: ConsoleDeps): void {
  router.get('/events', (req, res) => {
    const q = req.query as Query;
    res.send(eventsPage(d, contextOf(d, res), eventFilter(q), rawFilters(q, EVENT_FILTER_FIELDS)));
  });
  router.get('/events/:id', (req: Request, res) => {
    const id = positiveId({ id: req.params.id }, 'id') as number;
    const notice =
      req.query.replayed === '1'
        ? 'Queued for replay: the status below changes once the pipeline has run it (reload).'
        : null;
    const html = eventPage(d, contextOf(d, res), id, notice);
    if (html === undefined) notFoundPage(d, res, `No event ${id}.`);
    else res.send(html);
  });
  router.get('/deliveries', (req, res) => {
    const q = req.query as Query;
    res.send(
      deliveriesPage(d, contextOf(d, res), deliveryFilter(q), rawFilters(q, ['outcome', 'from', 'to'])),
    );
  });
  router.get('/dead', (req, res) => {
    const q = req.query as Query;
    const replayed = positiveId(q, 'replayed');
    res.send(
      deadPage(d, contextOf(d, res), {
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
  router.get('/', (_req, res) => {
    res.send(overviewPage(d, contextOf(d, res)));
  });
  proposalRoutes(router, d);
  eventRoutes(router, d);
  router.get('/averbacoes', (req, res) => {
    const q = req.query as Query;
    res.send(
      averbacoesPage(d, contextOf(d, res), averbacaoFilter(q), rawFilters(q, ['status', 'stale', 'waiting'])),
    );
  });
  router.get('/forwards', (req, res) => {
    const done = req.query.done;
    const notice =
      done === 'paused' ? 'Destination paused.' : done === 'resumed' ? 'Destination resumed.' : null;
    res.send(forwardsPage(d, contextOf(d, res), notice));
  });
  router.get('/audit', (req, res) => {
    res.send(auditPage(d, contextOf(d, res), positiveId(req.query as Query, 'before')));
  });
}
