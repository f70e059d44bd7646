import type { ConsoleEventFilter } from '../../../domain/console';
import type { ForwardRow } from '../../../domain/forwarding/admin';
import type { ConsoleDeps } from '../deps';
import { formatCount, freeText, timeTag } from '../format';
import { html, type SafeHtml } from '../html';
import {
  actionForm,
  csrfField,
  filterForm,
  foldedFilters,
  hrefWith,
  page,
  type PageContext,
  pager,
  table,
  textField,
} from '../layout';
import { EVENT_HEADINGS, eventRow, type RawFilters, windowNote } from './events-page';

/**
 * `/console/dead`: the dead letters — events whose handlers failed HANDLER_MAX_ATTEMPTS times, and
 * forward deliveries a destination refused for good or that ran out of attempts — each replayable
 * one by one, or in bulk by the current filter after a page that says how many.
 */

const PAGE_SIZE = 50;
export const DEAD_FILTER_FIELDS = ['evento', 'nu_proposta', 'from', 'to', 'json'] as const;

export interface DeadParams {
  filter: ConsoleEventFilter;
  raw: RawFilters;
  destination: string | undefined;
  forwardsBefore: number | undefined;
  /** How many were just replayed (after a bulk replay's redirect). */
  replayed: number | undefined;
}

async function deadEvents(d: ConsoleDeps, ctx: PageContext, p: DeadParams): Promise<SafeHtml> {
  const list = await d.log.events({ ...p.filter, limit: PAGE_SIZE });
  const self = hrefWith('/console/dead', { ...p.raw });
  const nextHref = list.next === null ? null : hrefWith('/console/dead', { ...p.raw, before: list.next });
  const form = foldedFilters(
    'dead events',
    DEAD_FILTER_FIELDS.filter((f) => p.raw[f] !== undefined),
    filterForm(
      '/console/dead',
      html`${textField('evento', 'evento', p.raw.evento, { placeholder: 'proposta.aprovada' })}
      ${textField('nu_proposta', 'nu_proposta', p.raw.nu_proposta)}
      ${textField('from', 'From (UTC)', p.raw.from, { placeholder: '2026-11-21T10:00' })}
      ${textField('to', 'To (UTC)', p.raw.to, { placeholder: '2026-11-22' })}
      ${textField('json', 'Body contains (JSON)', p.raw.json, { placeholder: '{"dados":{"no_conveniada":"ACME"}}' })}`,
      'Dead letter filters',
    ),
  );
  const rows = list.rows.map((e) =>
    eventRow(
      e,
      ctx.role === 'admin'
        ? actionForm(ctx, `/console/events/${e.id}/replay`, 'Replay', { back: self })
        : undefined,
    ),
  );
  const headings = ctx.role === 'admin' ? [...EVENT_HEADINGS, 'action'] : EVENT_HEADINGS;
  const bulk =
    ctx.role === 'admin' && list.rows.length > 0
      ? html`<p>
          <a href="${hrefWith('/console/dead/replay', { ...p.raw })}"
            >Replay every dead event matching these filters…</a
          >
          (asks for confirmation first)
        </p>`
      : '';
  return html`${form}${bulk}${windowNote(list, p.filter, nextHref)}${table('Dead events, newest first', headings, rows, 'no dead events')}${list.stoppedAt === null ? pager(nextHref) : ''}`;
}

function forwardRow(ctx: PageContext, r: ForwardRow): SafeHtml {
  const action =
    ctx.role === 'admin'
      ? html`<td>${actionForm(ctx, `/console/forwards/${r.id}/replay`, 'Replay')}</td>`
      : '';
  return html`<tr>
    <th scope="row">${r.id}</th>
    <td>${r.destination}</td>
    <td>${r.type}</td>
    <td><a href="/console/events/${r.event_id}">${r.event_id}</a></td>
    <td>${r.nu_proposta ?? '—'}</td>
    <td class="num">${r.attempts}</td>
    <td>${r.last_status ?? ''} ${freeText(r.last_error)}</td>
    <td>${timeTag(r.updated_at)}</td>
    ${action}
  </tr>`;
}

async function deadForwards(d: ConsoleDeps, ctx: PageContext, p: DeadParams): Promise<SafeHtml> {
  const rows = await d.log.forwards.list({
    status: 'dead',
    destination: p.destination,
    beforeId: p.forwardsBefore,
    limit: PAGE_SIZE + 1,
  });
  const shown = rows.slice(0, PAGE_SIZE);
  const last = shown[shown.length - 1];
  const next =
    rows.length > PAGE_SIZE && last !== undefined
      ? hrefWith('/console/dead', { destination: p.destination, fbefore: last.id })
      : null;
  const headings = [
    'id',
    'destination',
    'type',
    'event',
    'nu_proposta',
    'attempts',
    'last answer',
    'since',
    ...(ctx.role === 'admin' ? ['action'] : []),
  ];
  const form = foldedFilters(
    'dead deliveries',
    p.destination === undefined ? [] : ['destination'],
    filterForm(
      '/console/dead',
      textField('destination', 'Destination', p.destination),
      'Dead delivery filters',
    ),
  );
  const bulk =
    ctx.role === 'admin' && shown.length > 0
      ? html`<p>
          <a href="${hrefWith('/console/forwards/replay', { destination: p.destination })}"
            >Replay every dead delivery${p.destination === undefined ? '' : html` to ${p.destination}`}…</a
          >
          (asks for confirmation first)
        </p>`
      : '';
  return html`${form}${bulk}${table(
    'Dead forward deliveries, newest first',
    headings,
    shown.map((r) => forwardRow(ctx, r)),
    'no dead deliveries',
  )}${pager(next)}`;
}

export async function deadPage(d: ConsoleDeps, ctx: PageContext, p: DeadParams): Promise<string> {
  const notice =
    p.replayed === undefined
      ? ''
      : html`<p class="note" role="status">${formatCount(p.replayed)} queued for replay.</p>`;
  const body = html`${notice}
    <h2>Events</h2>
    ${await deadEvents(d, ctx, p)}
    <h2 id="dead-forwards">Forward deliveries</h2>
    ${await deadForwards(d, ctx, p)}`;
  return page({ title: 'Dead letters', current: 'dead', ctx, body });
}

/** "Replay 37 events?": the count of the same filter, and a POST form carrying it. */
export function confirmReplayPage(
  ctx: PageContext,
  o: { count: number; what: string; action: string; hidden: RawFilters; back: string },
): string {
  const fields = Object.entries(o.hidden)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`);
  const body =
    o.count === 0
      ? html`<p>Nothing matches: nothing to replay.</p>
          <p><a href="${o.back}">Back</a></p>`
      : html`<p>
            This puts ${formatCount(o.count)} ${o.what} back in the queue. They are processed again, in order.
          </p>
          <form method="post" action="${o.action}">
            ${csrfField(ctx)}${fields}<button type="submit">Confirm replay</button>
            <a href="${o.back}">Cancel</a>
          </form>`;
  return page({ title: `Replay ${formatCount(o.count)} ${o.what}?`, current: 'dead', ctx, body });
}
