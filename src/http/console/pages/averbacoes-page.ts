import { REGISTRY_STATUSES } from '../../../domain/catalogue';
import type { AverbacaoListRow } from '../../../core/console-reads';
import type { ConsoleDeps } from '../deps';
import type { averbacaoFilter } from '../filters';
import { ageOf, timeTag } from '../format';
import { html, type SafeHtml } from '../html';
import {
  filterForm,
  hrefWith,
  page,
  type PageContext,
  pager,
  selectField,
  statusBadge,
  table,
} from '../layout';
import type { RawFilters } from './events-page';

/**
 * `/console/averbacoes`: the tracked registrations (interface §4.2–§4.4), newest first: those
 * waiting for their result and being polled (attempts, next poll), those given up on (stale), and
 * the finished ones with where the result came from.
 */

const PAGE_SIZE = 50;

/**
 * Why nothing is polled, when nothing is: with SERVICE_BASE_URL unset no poller runs (in cluster
 * mode this replica runs no registry-poll worker: its own configuration decides, hence "this
 * receiver"), so a registration waits for the registry's webhook and its "next poll" never comes.
 */
export const POLLING_OFF =
  "Registry polling is off: SERVICE_BASE_URL is not set in this receiver's configuration, so no poller runs here. Results come only by the registry webhook.";
/** The same for the overview's card. */
export const POLLING_OFF_SHORT =
  'Registry polling is off: SERVICE_BASE_URL is not set (results come by webhook only).';

/** The "next poll" of a registration: its time, or why there is none while polling is off. */
export function nextPoll(at: string | null, polling: boolean): SafeHtml {
  if (at === null) return html`—`;
  return polling ? timeTag(at) : html`none (polling off)`;
}

function row(r: AverbacaoListRow, now: Date, polling: boolean): SafeHtml {
  const nu =
    r.nu_proposta === null
      ? '—'
      : html`<a href="/console/proposals/${encodeURIComponent(String(r.nu_proposta))}">${r.nu_proposta}</a>`;
  return html`<tr id="req-${r.request_id}">
    <th scope="row">${r.request_id}</th>
    <td>${nu}</td>
    <td>${statusBadge(r.status)}</td>
    <td>${r.stale ? 'yes' : 'no'}</td>
    <td>${r.tracked_via}</td>
    <td class="num">${r.poll_attempts}</td>
    <td>${timeTag(r.last_poll_at)} ${r.last_poll_outcome ?? ''}</td>
    <td>${nextPoll(r.next_poll_at, polling)}</td>
    <td>${r.result_source ?? '—'}</td>
    <td>${timeTag(r.created_at)} (${ageOf(r.created_at, now)})</td>
  </tr>`;
}

export async function averbacoesPage(
  d: ConsoleDeps,
  ctx: PageContext,
  filter: ReturnType<typeof averbacaoFilter>,
  raw: RawFilters,
): Promise<string> {
  const list = await d.log.averbacoes({ ...filter, limit: PAGE_SIZE });
  const nextHref = list.next === null ? null : hrefWith('/console/averbacoes', { ...raw, before: list.next });
  const yesNo = [
    { value: 'yes', label: 'yes' },
    { value: 'no', label: 'no' },
  ];
  const form = filterForm(
    '/console/averbacoes',
    html`${selectField('status', 'Status', REGISTRY_STATUSES, raw.status)}
    ${selectField('stale', 'Stale', yesNo, filter.stale === undefined ? undefined : filter.stale ? 'yes' : 'no')}
    ${selectField('waiting', d.registryPolling ? 'Being polled' : 'Waiting for a result', [{ value: 'yes', label: 'yes' }], filter.waiting ? 'yes' : undefined)}`,
  );
  const headings = [
    'requestId',
    'nu_proposta',
    'status',
    'stale',
    'tracked via',
    'polls',
    'last poll',
    'next poll',
    'result by',
    'tracked',
  ];
  const off = d.registryPolling ? '' : html`<p class="note" role="status">${POLLING_OFF}</p>`;
  const body = html`${off}${form}${table(
    'Averbações, newest first',
    headings,
    list.rows.map((r) => row(r, ctx.now, d.registryPolling)),
    'none match these filters',
  )}${pager(nextHref)}`;
  return page({ title: 'Averbações', current: 'averbacoes', ctx, body });
}
