import { isObject, own } from '../domain/json';
import { OFFERS, paginate, REPORTS } from './fixtures';
import { errorReply, type Reply, reply } from './http-util';
import { type Context, type Route, route } from './simulator-router';

/**
 * The synchronous pages: the four portfolio reports (interface §4.6) and the public offer search
 * of the marketplace (interface §4.7), over fixed sample data (their bodies are "not shown").
 */

type PageParams = { ok: true; start: number; size: number } | { ok: false; reply: Reply };

/** `pageStart` and `pageSize`, from the query string or the body. */
function pageParams(ctx: Context): PageParams {
  const pick = (name: string, fallback: number): number | null => {
    const raw = ctx.query.get(name) ?? own(ctx.body, name);
    if (raw === undefined || raw === null || raw === '') return fallback;
    const n = typeof raw === 'string' ? Number(raw) : raw;
    return typeof n === 'number' && Number.isSafeInteger(n) ? n : null;
  };
  const start = pick('pageStart', 0);
  const size = pick('pageSize', 10);
  const invalid = (field: string, message: string): PageParams => ({
    ok: false,
    reply: errorReply(400, 'VALIDATION_ERROR', message, { field }),
  });
  if (start === null || start < 0) return invalid('pageStart', 'pageStart deve ser um inteiro ≥ 0');
  if (size === null || size < 1 || size > 100)
    return invalid('pageSize', 'pageSize deve ser um inteiro entre 1 e 100');
  return { ok: true, start, size };
}

function searchOffers(ctx: Context): Reply {
  if (ctx.body !== undefined && !isObject(ctx.body))
    return errorReply(400, 'VALIDATION_ERROR', 'O corpo da requisição deve ser um objeto JSON', {
      field: 'body',
    });
  const page = pageParams(ctx);
  if (!page.ok) return page.reply;
  return reply(200, paginate('/offers/search', 'offers', OFFERS, page.start, page.size));
}

function report(path: string, name: string, items: readonly unknown[]) {
  return (ctx: Context): Reply => {
    const page = pageParams(ctx);
    if (!page.ok) return page.reply;
    return reply(200, paginate(path, name, items, page.start, page.size));
  };
}

export function reportRoutes(): Route[] {
  return [
    ...Object.entries(REPORTS).map(([path, { name, items }]) =>
      route('GET', path, 'api', report(path, name, items)),
    ),
    // interface §5: the one route without authentication.
    route('POST', '/offers/search', 'public', searchOffers),
  ];
}
