import type { DeliveryRow } from '../../../domain/delivery';
import type { ConsoleDeps } from '../deps';
import { DELIVERY_OUTCOMES, deliveryFilter } from '../filters';
import { freeText, timeTag } from '../format';
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
  textField,
} from '../layout';
import type { RawFilters } from './events-page';

/**
 * `/console/deliveries`: every request to the webhook routes (the `deliveries` table), newest first,
 * filtered by outcome and time (both indexed), with the event each one stored or counted.
 */

const PAGE_SIZE = 50;

function row(r: DeliveryRow): SafeHtml {
  const event = r.event_id === null ? '—' : html`<a href="/console/events/${r.event_id}">${r.event_id}</a>`;
  return html`<tr>
    <th scope="row">${r.id}</th>
    <td>${timeTag(r.received_at)}</td>
    <td>${r.path}</td>
    <td>${statusBadge(r.outcome)}</td>
    <td class="num">${r.http_status}</td>
    <td class="num">${r.duration_ms.toFixed(1)}</td>
    <td>${event}</td>
    <td>${r.remote_addr ?? ''}</td>
    <td>${freeText(r.detail)}</td>
  </tr>`;
}

export async function deliveriesPage(
  d: ConsoleDeps,
  ctx: PageContext,
  filter: ReturnType<typeof deliveryFilter>,
  raw: RawFilters,
): Promise<string> {
  const list = await d.log.deliveries({ ...filter, limit: PAGE_SIZE });
  const nextHref = list.next === null ? null : hrefWith('/console/deliveries', { ...raw, before: list.next });
  const form = filterForm(
    '/console/deliveries',
    html`${selectField('outcome', 'Outcome', DELIVERY_OUTCOMES, raw.outcome)}
    ${textField('from', 'From (UTC)', raw.from, { placeholder: '2026-11-21T10:00' })}
    ${textField('to', 'To (UTC)', raw.to, { placeholder: '2026-11-22' })}`,
  );
  const body = html`${form}${table('Deliveries, newest first', ['id', 'received', 'path', 'outcome', 'HTTP', 'ms', 'event', 'from', 'detail'], list.rows.map(row), 'none match these filters')}${pager(nextHref)}`;
  return page({ title: 'Deliveries', current: 'deliveries', ctx, body });
}
