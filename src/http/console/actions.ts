import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Request, Response, Router } from 'express';
import { actorOf, audit, contextOf, requireAdmin, secureCookies } from './console-auth';
import type { ConsoleDeps } from './deps';
import { deadFilter, FilterError, positiveId, type Query, text } from './filters';
import { messagePage } from './pages/login-page';
import { clearedCookie } from './session';
import { confirmReplayPage, DEAD_FILTER_FIELDS } from './pages/dead-page';
import { rawFilters } from './pages/events-page';

/**
 * The console's actions, admin only, each a POST checked for its CSRF token before it gets here,
 * each recorded in `console_audit`, each reusing the store's replay rules (the ones `/admin` and
 * the commands use, through the console's log: the SQLite file, or PostgreSQL in cluster mode),
 * which wakes the pipeline or the sender afterwards, as `/admin` does. A bulk
 * replay first shows how many rows its filter matches (a GET: it changes nothing) and runs only
 * when that page's "Confirm replay" is posted.
 */

/** Ids put back in the queue per transaction in a bulk replay (ingest goes on between chunks). */
const REPLAY_CHUNK = 1000;

/** `back` when it is a console page (a replay from a list returns to it), otherwise `fallback`. */
function backTo(value: unknown, fallback: string): string {
  return typeof value === 'string' && /^\/console(\/|\?|$)/.test(value) && !/[\\\r\n]/.test(value)
    ? value
    : fallback;
}

function idParam(req: Request): number {
  const id = positiveId({ id: req.params.id }, 'id');
  if (id === undefined) throw new FilterError('id: expected a positive whole number');
  return id;
}

async function replayOne(d: ConsoleDeps, req: Request, res: Response): Promise<void> {
  const id = idParam(req);
  const result = await d.log.replayEvents([id], d.clock.now().toISOString());
  if (result.unknown.length > 0) {
    res.status(404).send(messagePage('Not found', `There is no event ${id}.`));
    return;
  }
  const refused = result.notReplayable[0];
  if (refused !== undefined) {
    res
      .status(409)
      .send(
        messagePage(
          'Not replayable',
          `Event ${id} is ${refused.status}: it has no handler to run. Nothing was changed.`,
          { href: `/console/events/${id}`, text: `Event ${id}` },
        ),
      );
    return;
  }
  await audit(d, req, actorOf(res), 'replay_event', `event:${id}`);
  res.redirect(303, backTo((req.body as Query | undefined)?.back, `/console/events/${id}?replayed=1`));
}

/** Puts every dead event matching `filter` back in the queue, newest first, in chunks. */
async function replayMatching(d: ConsoleDeps, q: Query): Promise<number> {
  const filter = deadFilter(q);
  let before = Number.MAX_SAFE_INTEGER;
  let total = 0;
  for (;;) {
    const ids = await d.log.eventIds(filter, before, REPLAY_CHUNK);
    if (ids.length === 0) return total;
    total += (await d.log.replayEvents(ids, d.clock.now().toISOString())).queued.length;
    before = ids[ids.length - 1] as number;
    if (ids.length < REPLAY_CHUNK) return total;
    await nextTurn();
  }
}

function eventActions(router: Router, d: ConsoleDeps): void {
  router.post('/events/:id/replay', (req, res) => replayOne(d, req, res));
  router.get('/dead/replay', async (req, res) => {
    const q = req.query as Query;
    const raw = rawFilters(q, DEAD_FILTER_FIELDS);
    const count = await d.log.countEvents(deadFilter(q));
    res.send(
      confirmReplayPage(contextOf(d, res), {
        count,
        what: count === 1 ? 'event' : 'events',
        action: '/console/dead/replay',
        hidden: raw,
        back: '/console/dead',
      }),
    );
  });
  router.post('/dead/replay', async (req, res) => {
    const body = (req.body ?? {}) as Query;
    const count = await replayMatching(d, body);
    await audit(d, req, actorOf(res), 'replay_bulk', 'events:dead', {
      filter: rawFilters(body, DEAD_FILTER_FIELDS),
      count,
    });
    res.redirect(303, `/console/dead?replayed=${count}`);
  });
}

function forwardReplays(router: Router, d: ConsoleDeps): void {
  router.get('/forwards/replay', async (req, res) => {
    const destination = text(req.query as Query, 'destination');
    const count = (await d.log.forwards.countWhere({ status: 'dead', destination })).replayed;
    res.send(
      confirmReplayPage(contextOf(d, res), {
        count,
        what: count === 1 ? 'forward delivery' : 'forward deliveries',
        action: '/console/forwards/replay',
        hidden: { destination },
        back: '/console/dead',
      }),
    );
  });
  router.post('/forwards/replay', async (req, res) => {
    const destination = text((req.body ?? {}) as Query, 'destination');
    const counts = await d.log.forwards.replayWhere(
      { status: 'dead', destination },
      d.clock.now().toISOString(),
    );
    await audit(
      d,
      req,
      actorOf(res),
      'forward_replay_bulk',
      destination === undefined ? 'forwards:dead' : `destination:${destination}`,
      { filter: { status: 'dead', destination: destination ?? null }, count: counts.replayed },
    );
    res.redirect(303, `/console/dead?replayed=${counts.replayed}`);
  });
  router.post('/forwards/:id/replay', async (req, res) => {
    const id = idParam(req);
    if ((await d.log.forwards.missing([id])).length > 0) {
      res.status(404).send(messagePage('Not found', `There is no forward delivery ${id}.`));
      return;
    }
    await d.log.forwards.replay([id], d.clock.now().toISOString());
    await audit(d, req, actorOf(res), 'forward_replay', `forward:${id}`);
    res.redirect(303, '/console/dead?replayed=1');
  });
}

function pauseResume(router: Router, d: ConsoleDeps): void {
  const act = (paused: boolean) => async (req: Request, res: Response) => {
    const name = String(req.params.name);
    const destination = d.destinations.find((x) => x.name === name);
    if (destination === undefined) {
      res.status(404).send(
        messagePage('Not found', `No destination ${JSON.stringify(name)} is configured.`, {
          href: '/console/forwards',
          text: 'Forwarding',
        }),
      );
      return;
    }
    if (!paused && destination.paused) {
      res
        .status(409)
        .send(
          messagePage(
            'Paused in configuration',
            `Destination ${name} is paused in its configuration file: change the file and restart. Nothing was changed.`,
            { href: '/console/forwards', text: 'Forwarding' },
          ),
        );
      return;
    }
    await d.log.forwards.setPaused(name, paused, d.clock.now().toISOString());
    await audit(d, req, actorOf(res), paused ? 'forward_pause' : 'forward_resume', `destination:${name}`);
    res.redirect(303, `/console/forwards?done=${paused ? 'paused' : 'resumed'}`);
  };
  router.post('/forwards/:name/pause', act(true));
  router.post('/forwards/:name/resume', act(false));
}

/**
 * Signs everyone out (this browser too): every session in the log ends, at every replica in cluster
 * mode; recorded with how many ended. The `end-sessions` command does the same.
 */
function endSessions(router: Router, d: ConsoleDeps): void {
  router.post('/sessions/end', async (req, res) => {
    const ended = await d.log.sessions.endAll();
    await audit(d, req, actorOf(res), 'end_sessions', 'console', { ended });
    res.set('set-cookie', clearedCookie(secureCookies(d, req))).redirect(303, '/console/login');
  });
}

/** Mounts the actions and their confirmation pages, all behind requireAdmin. */
export function actionRoutes(router: Router, d: ConsoleDeps): void {
  const admin = requireAdmin(d);
  router.use(
    [
      '/events/:id/replay',
      '/dead/replay',
      '/forwards/replay',
      '/forwards/:id/replay',
      '/forwards/:name/pause',
      '/forwards/:name/resume',
      '/sessions/end',
    ],
    admin,
  );
  endSessions(router, d);
  eventActions(router, d);
  forwardReplays(router, d);
  pauseResume(router, d);
}
