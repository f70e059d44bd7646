import { isObject, type JsonObject, nonBlankString } from '../domain/json';
import { type Answer, finiteNumber, type ServiceApi } from './api';
import { InvalidRequestError } from './errors';

/**
 * interface §4.7: `POST /offers/search`, walked page after page. Pages are hypermedia (`_embedded`,
 * `_links`) with `total`, `pageStart`, `pageSize` and `totalPages`.
 */

export interface OffersResult {
  /** Items of every array in `_embedded`, page after page. */
  items: unknown[];
  pages: number;
  /** `total` of the first page, when the service sent it. */
  total: number | null;
  /** False when `maxPages` stopped the walk before the last page. */
  complete: boolean;
}

export interface SearchOffersOptions {
  /** Pages read at the most. @default 10 */
  maxPages?: number;
}

const DEFAULT_MAX_PAGES = 10;

export async function searchOffers(
  api: ServiceApi,
  body: Record<string, unknown>,
  options: SearchOffersOptions = {},
): Promise<OffersResult> {
  const maxPages = options.maxPages ?? DEFAULT_MAX_PAGES;
  checkSearch(body, maxPages);
  const result: OffersResult = { items: [], pages: 0, total: null, complete: false };
  const visited = new Set<string>();
  let url = api.url('/offers/search');
  for (;;) {
    visited.add(url.href);
    // interface §4.7: public, so no credentials are sent. A search changes nothing: retried freely.
    const answer = await api.post(url, body, { route: '/offers/search', auth: false, idempotent: true });
    const page = answer.object();
    result.pages += 1;
    result.items.push(...embeddedItems(page));
    if (result.pages === 1) result.total = finiteNumber(page.total);
    const next = linkedNextPage(url, page, answer) ?? countedNextPage(url, page, result.pages);
    if (next === null || visited.has(next.href)) return { ...result, complete: true };
    if (result.pages >= maxPages) return result;
    url = next;
  }
}

function checkSearch(body: unknown, maxPages: number): void {
  if (!Number.isSafeInteger(maxPages) || maxPages < 1) {
    throw new InvalidRequestError('offers search', [
      { field: 'maxPages', problem: 'expected a positive integer' },
    ]);
  }
  if (!isObject(body)) {
    throw new InvalidRequestError('offers search', [{ field: 'body', problem: 'expected an object' }]);
  }
}

function embeddedItems(page: JsonObject): unknown[] {
  const embedded = page._embedded;
  if (!isObject(embedded)) return [];
  return Object.values(embedded).flatMap((value) => (Array.isArray(value) ? (value as unknown[]) : []));
}

/** `_links.next.href`, resolved against the page's URL; null when the page has no such link. */
function linkedNextPage(current: URL, page: JsonObject, answer: Answer): URL | null {
  const links = page._links;
  const href = isObject(links) && isObject(links.next) ? nonBlankString(links.next.href) : null;
  if (href === null) return null;
  const next = new URL(href, current);
  // A link elsewhere would take the request (and the search) to another host.
  if (next.origin !== current.origin) throw answer.unexpected('_links.next points at another origin');
  return next;
}

/**
 * Without a link: `pageStart` is taken as the offset of the page's first item (the interface does
 * not say whether it counts items or pages), sent back with `pageSize` as query parameters. Null
 * when the counts say this was the last page, or say nothing to go by.
 */
function countedNextPage(current: URL, page: JsonObject, pagesRead: number): URL | null {
  const pageStart = finiteNumber(page.pageStart);
  const pageSize = finiteNumber(page.pageSize);
  const totalPages = finiteNumber(page.totalPages);
  const totalItems = finiteNumber(page.total);
  if (pageStart === null || pageSize === null || pageSize <= 0) return null;
  if (totalPages === null && totalItems === null) return null;
  if (totalPages !== null && pagesRead >= totalPages) return null;
  const nextStart = pageStart + pageSize;
  if (totalItems !== null && nextStart >= totalItems) return null;
  const next = new URL(current);
  next.searchParams.set('pageStart', String(nextStart));
  next.searchParams.set('pageSize', String(pageSize));
  return next;
}
