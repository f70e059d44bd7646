import { isReplayable } from '../../../domain/event-status';
import {
  type ConsoleEventFilter,
  type ListPage,
  scanCapFor,
  type StoryForwardRow,
} from '../../../domain/console';
import type { EventRow } from '../../../domain/event-status';
import type { ConsoleDeps } from '../deps';
import { EVENT_KINDS, EVENT_STATUSES, type Query } from '../filters';
import { formatCount, freeText, prettyBody, timeTag } from '../format';
import { html, type SafeHtml } from '../html';
import {
  actionForm,
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

/**
 * `/console/events` (filtered list, newest first, keyset pages) and `/console/events/:id` (one
 * event: what it is, its status, its body as pretty JSON with the CPF masked, the messages it was
 * forwarded as, and a Replay button for an admin).
 */

const PAGE_SIZE = 50;
export const EVENT_FILTER_FIELDS = ['status', 'evento', 'kind', 'nu_proposta', 'from', 'to', 'json'] as const;

/** The filters as typed (to refill the form and build links), already validated by the parser. */
export type RawFilters = Partial<Record<string, string>>;

export function rawFilters(q: Query, names: readonly string[]): RawFilters {
  const raw: RawFilters = {};
  for (const name of names) {
    const v = q[name];
    if (typeof v === 'string' && v.trim() !== '') raw[name] = v.trim();
  }
  return raw;
}

/** A table row for an event; `action` (a form) goes in one more cell at the end. */
export function eventRow(e: EventRow, action?: SafeHtml): SafeHtml {
  const nu =
    e.nu_proposta === null
      ? '—'
      : html`<a href="/console/proposals/${encodeURIComponent(String(e.nu_proposta))}">${e.nu_proposta}</a>`;
  return html`<tr>
    <th scope="row"><a href="/console/events/${e.id}">${e.id}</a></th>
    <td>${timeTag(e.received_at)}</td>
    <td>${e.evento ?? '—'}</td>
    <td>${e.kind}</td>
    <td>${nu}</td>
    <td>${statusBadge(e.status)}</td>
    <td class="num">${e.attempts}</td>
    <td class="num">${e.duplicates}</td>
    <td>${freeText(e.last_error)}</td>
    ${action === undefined ? '' : html`<td>${action}</td>`}
  </tr>`;
}

export const EVENT_HEADINGS = [
  'id',
  'received',
  'evento',
  'kind',
  'nu_proposta',
  'status',
  'attempts',
  'duplicates',
  'last error',
];

/** "Searched the newest 50 000 …": said whenever a window ended before the page was full. */
export function windowNote(
  list: ListPage<unknown>,
  filter: ConsoleEventFilter,
  nextHref: string | null,
): SafeHtml {
  if (list.stoppedAt === null) return html``;
  return html`<p class="note" role="status">
    Evento, kind and body matches are checked on the newest ${formatCount(scanCapFor(filter))} events per page
    (no index serves them): events older than ${list.stoppedAt} were not searched
    yet.${nextHref === null ? '' : html` <a href="${nextHref}">Search older events</a>.`}
  </p>`;
}

function eventFilters(raw: RawFilters): SafeHtml {
  return filterForm(
    '/console/events',
    html`${selectField('status', 'Status', EVENT_STATUSES, raw.status)}
      ${textField('evento', 'evento', raw.evento, { placeholder: 'proposta.aprovada' })}
      ${selectField('kind', 'Kind', EVENT_KINDS, raw.kind)}
      ${textField('nu_proposta', 'nu_proposta', raw.nu_proposta)}
      ${textField('from', 'From (UTC)', raw.from, { placeholder: '2026-11-21T10:00' })}
      ${textField('to', 'To (UTC)', raw.to, { placeholder: '2026-11-22' })}
      <div class="field wide">
        <label for="f-json">Body contains (JSON)</label
        ><input
          id="f-json"
          name="json"
          type="text"
          value="${raw.json ?? ''}"
          placeholder='{"dados":{"no_conveniada":"ACME"}}'
          aria-describedby="f-json-hint"
        /><small id="f-json-hint">every value given must be at that place in the body</small>
      </div>`,
  );
}

export async function eventsPage(
  d: ConsoleDeps,
  ctx: PageContext,
  filter: ConsoleEventFilter,
  raw: RawFilters,
): Promise<string> {
  const list = await d.log.events({ ...filter, limit: PAGE_SIZE });
  const nextHref = list.next === null ? null : hrefWith('/console/events', { ...raw, before: list.next });
  const body = html`${eventFilters(raw)}${windowNote(list, filter, nextHref)}${table(
    'Events, newest first',
    EVENT_HEADINGS,
    list.rows.map((e) => eventRow(e)),
    'none match these filters',
  )}${list.stoppedAt === null ? pager(nextHref) : ''}`;
  return page({ title: 'Events', current: 'events', ctx, body });
}

function forwardsOf(rows: readonly StoryForwardRow[]): SafeHtml {
  const trs = rows.map(
    (r) =>
      html`<tr>
        <th scope="row">${r.message_id}</th>
        <td>${r.type}</td>
        <td>${r.destination ?? '(feed only)'}</td>
        <td>${r.status === null ? '—' : statusBadge(r.status)}</td>
        <td class="num">${r.attempts ?? 0}</td>
        <td>${freeText(r.last_error)}</td>
      </tr>`,
  );
  return table(
    'Forwarded as',
    ['message', 'type', 'destination', 'status', 'attempts', 'last error'],
    trs,
    'not forwarded',
  );
}

export async function eventPage(
  d: ConsoleDeps,
  ctx: PageContext,
  id: number,
  notice: string | null,
): Promise<string | undefined> {
  const found = await d.log.event(id);
  if (found === undefined) return undefined;
  const e = found.event;
  const shown = prettyBody(found.body);
  const replay =
    ctx.role === 'admin' && isReplayable(e.status)
      ? actionForm(ctx, `/console/events/${e.id}/replay`, 'Replay')
      : ctx.role === 'admin'
        ? html`<p class="note">A ${e.status} event has no handler to run: it cannot be replayed.</p>`
        : '';
  const nu =
    e.nu_proposta === null
      ? '—'
      : html`<a href="/console/proposals/${encodeURIComponent(String(e.nu_proposta))}">${e.nu_proposta}</a>`;
  const body = html`${notice === null ? '' : html`<p class="note" role="status">${notice}</p>`}
    <dl class="facts">
      <dt>Status</dt>
      <dd>${statusBadge(e.status)}</dd>
      <dt>evento</dt>
      <dd>${e.evento ?? '—'}</dd>
      <dt>Kind</dt>
      <dd>${e.kind}</dd>
      <dt>nu_proposta</dt>
      <dd>${nu}</dd>
      <dt>requestId</dt>
      <dd>${e.request_id ?? '—'}</dd>
      <dt>webhook_id</dt>
      <dd>${e.webhook_id ?? '—'}</dd>
      <dt>tentativa</dt>
      <dd>${e.tentativa ?? '—'}</dd>
      <dt>Received</dt>
      <dd>${timeTag(e.received_at)}</dd>
      <dt>Processed</dt>
      <dd>${timeTag(e.processed_at)}</dd>
      <dt>Attempts</dt>
      <dd>${e.attempts}</dd>
      <dt>Duplicates</dt>
      <dd>
        ${e.duplicates}${e.last_duplicate_at === null ? '' : html`, the last ${timeTag(e.last_duplicate_at)}`}
      </dd>
      <dt>Last error</dt>
      <dd>${e.last_error === null ? '—' : freeText(e.last_error, 5000)}</dd>
      <dt>Body</dt>
      <dd>${e.body_bytes} bytes</dd>
    </dl>
    ${replay}
    <h2>Body</h2>
    ${shown.note === null ? '' : html`<p class="note">${shown.note}</p>`}${shown.text === null ? '' : html`<pre class="body" role="region" tabindex="0" aria-label="Body of event ${e.id}">${shown.text}</pre>`}
    <h2>Forwarding</h2>
    ${forwardsOf(found.forwards)}`;
  return page({ title: `Event ${e.id}`, current: 'events', ctx, body });
}
