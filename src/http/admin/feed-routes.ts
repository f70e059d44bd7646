import { type Request, type Response, Router } from 'express';
import { bodyFor } from '../../domain/forwarding/messages';
import type { MessageType } from '../../domain/forwarding/destinations';
import { decodeFeedCursor, encodeFeedCursor } from '../../core/feed-reader';
import { FEED_DEFAULT_TYPES, isMessageType } from '../../domain/forwarding/admin';
import type { FeedPage } from '../../domain/forwarding/messages';
import type { AppDeps } from '../app-deps';
import { type FeedReader, FeedWaiters } from './feed-waiters';
import type { AdminStore } from '../../core/store-port';
import { HttpError } from '../errors';
import { integerParam, textParam } from './params';
import type { ReadAudit } from './read-audit';

/**
 * The change feed (contract §8): `GET /admin/feed?after=&limit=&wait=&types=` serves the stored
 * messages in commit order for lenders whose systems cannot accept inbound HTTP, and long-polls up
 * to `wait` seconds when nothing is newer than `after`.
 */

/**
 * How often a waiting feed request looks at the database itself: the messages may be committed by
 * another process sharing the file (a rolling deploy), whose commits no `notify()` here announces.
 */
export const FEED_RECHECK_MS = 500;
/** The longest long-poll: below every proxy's usual idle timeout (60 s). */
export const FEED_MAX_WAIT_SECONDS = 30;
export const FEED_MAX_LIMIT = 1000;
/** @default 100 */
export const FEED_DEFAULT_LIMIT = 100;

interface FeedQuery {
  afterId: number;
  limit: number;
  waitMs: number;
  types: readonly MessageType[];
}

/** Why the feed is not served, and how to turn it on (the route and the `feed` command say it). */
export const FEED_DISABLED =
  'the change feed is off: set FEED_ENABLED=true (proposal.changed and averbacao.result are stored for it from then on)';

/**
 * `GET /admin/feed`, reading the file's outbox or (cluster mode) PostgreSQL's with `readPage`. Each
 * answer is audited (`feed_read`, read-audit.ts) once its page is known, after any long-poll and
 * before it is sent: one row per request, none for a client that went away while it waited.
 */
export function feedRoutes(
  deps: Pick<AppDeps, 'clock' | 'forwarding'>,
  readPage: FeedReader,
  audited: ReadAudit,
  shared: AdminStore['feedShared'] = async () => 0,
): Router {
  // Without the composition root's waiters (tests, a bare app) nothing notifies: the 500 ms
  // re-check alone finds new messages.
  const waiters = deps.forwarding?.waiters ?? new FeedWaiters();
  const fullCpf = deps.forwarding?.feedFullCpf ?? false;
  const enabled = deps.forwarding?.feedEnabled ?? true;
  const router = Router();
  router.get('/feed', async (req, res) => {
    if (!enabled) {
      res.status(404).json({ error: 'feed_disabled', message: FEED_DISABLED });
      return;
    }
    const query = feedQuery(req);
    const read = () => readPage(query.afterId, query.limit, query.types);
    const page = await longPoll(read, query.waitMs, waiters, deps.clock, clientGone(res));
    if (res.destroyed) return;
    await audited(req, {
      target: 'feed',
      served: { limit: query.limit, messages: page.messages.length },
    });
    // Who was sent what (LGPD art. 18 VII): before the answer, like the audit row.
    await shared(
      page.messages.map((m) => m.id),
      'feed',
      deps.clock.now().toISOString(),
    );
    // The bodies are spliced in as the JSON text they are stored as: no parse and re-serialise
    // of every message on the way out (bodyFor parses only to mask the CPF).
    const messages = page.messages.map((m) => bodyFor(m.body, fullCpf)).join(',');
    res
      .type('application/json')
      .send(`{"messages":[${messages}],"cursor":${JSON.stringify(encodeFeedCursor(page.lastId))}}`);
  });
  return router;
}

/**
 * Reads a page; while it is empty, waits for a notify or {@link FEED_RECHECK_MS} and reads again,
 * until `waitMs` has passed, the client went away or the server is closing.
 */
async function longPoll(
  read: () => Promise<FeedPage>,
  waitMs: number,
  waiters: FeedWaiters,
  clock: AppDeps['clock'],
  gone: AbortSignal,
): Promise<FeedPage> {
  const deadline = clock.monotonic() + waitMs;
  let page = await read();
  while (page.messages.length === 0 && !gone.aborted && !waiters.closed) {
    const left = deadline - clock.monotonic();
    if (left <= 0) break;
    await waiters.wait(Math.min(left, FEED_RECHECK_MS), gone);
    page = await read();
  }
  return page;
}

/** Aborts when the connection closes before the answer was sent (the waiter is let go at once). */
function clientGone(res: Response): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableEnded) controller.abort();
  });
  return controller.signal;
}

function feedQuery(req: Request): FeedQuery {
  const after = textParam(req, 'after');
  const afterId = after === undefined ? 0 : decodeFeedCursor(after);
  if (afterId === null) {
    throw new HttpError(400, 'invalid_cursor', 'after must be a cursor returned by this feed');
  }
  const limit = integerParam(req, 'limit') ?? FEED_DEFAULT_LIMIT;
  if (limit < 1 || limit > FEED_MAX_LIMIT) {
    throw new HttpError(400, 'bad_request', `limit must be an integer from 1 to ${FEED_MAX_LIMIT}`);
  }
  const wait = integerParam(req, 'wait') ?? 0;
  if (wait > FEED_MAX_WAIT_SECONDS) {
    throw new HttpError(
      400,
      'bad_request',
      `wait must be an integer from 0 to ${FEED_MAX_WAIT_SECONDS} (seconds)`,
    );
  }
  return { afterId, limit, waitMs: wait * 1000, types: typesParam(textParam(req, 'types')) };
}

/** `types=proposal.changed,averbacao.result` (the default); each a message type. */
function typesParam(value: string | undefined): readonly MessageType[] {
  if (value === undefined) return FEED_DEFAULT_TYPES;
  const names = value.split(',').map((t) => t.trim());
  const unknown = names.filter((t) => !isMessageType(t));
  if (unknown.length > 0 || names.length === 0) {
    throw new HttpError(
      400,
      'bad_request',
      `types must be a comma-separated list of event.received, proposal.changed, averbacao.result; got ${JSON.stringify(value)}`,
    );
  }
  return [...new Set(names as MessageType[])];
}
