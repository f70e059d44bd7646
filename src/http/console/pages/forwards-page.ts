import type { DestinationSummary } from '../../../domain/forwarding/admin';
import type { ConsoleDeps } from '../deps';
import { ageOf } from '../format';
import { html, type SafeHtml } from '../html';
import { actionForm, hrefWith, page, type PageContext, statusBadge, table } from '../layout';

/**
 * `/console/forwards`: each destination (contract §8) with its backlog, dead letters, circuit and
 * pause state; an admin pauses and resumes it here.
 */

function row(s: DestinationSummary, ctx: PageContext): SafeHtml {
  const name = encodeURIComponent(s.name);
  let action: SafeHtml | string = '';
  if (ctx.role === 'admin' && s.configured) {
    if (s.paused_in_config) action = 'paused in its configuration file';
    else if (s.paused) action = actionForm(ctx, `/console/forwards/${name}/resume`, 'Resume');
    else action = actionForm(ctx, `/console/forwards/${name}/pause`, 'Pause');
  }
  const dead =
    s.counts.dead > 0
      ? html`<a href="${hrefWith('/console/dead', { destination: s.name })}">${s.counts.dead}</a>`
      : '0';
  return html`<tr>
    <th scope="row">${s.name}</th>
    <td>${s.url ?? '(no longer configured)'}</td>
    <td class="num">${s.counts.pending}</td>
    <td class="num">${s.counts.retrying}</td>
    <td class="num">${s.counts.delivered}</td>
    <td class="num">${dead}</td>
    <td>${ageOf(s.oldest_pending_at, ctx.now)}</td>
    <td>${statusBadge(s.circuit.state)}</td>
    <td>${s.paused ? 'paused' : 'running'}</td>
    ${ctx.role === 'admin' ? html`<td>${action}</td>` : ''}
  </tr>`;
}

export async function forwardsPage(d: ConsoleDeps, ctx: PageContext, notice: string | null): Promise<string> {
  const summaries = await d.log.forwards.destinationSummaries(d.destinations);
  const headings = [
    'destination',
    'url',
    'backlog',
    'retrying',
    'delivered',
    'dead',
    'oldest waiting',
    'circuit',
    'state',
    ...(ctx.role === 'admin' ? ['action'] : []),
  ];
  const body = html`${notice === null ? '' : html`<p class="note" role="status">${notice}</p>`}${table(
    'Destinations',
    headings,
    summaries.map((s) => row(s, ctx)),
    'no destination configured (FORWARD_URL, DESTINATIONS_FILE)',
  )}`;
  return page({ title: 'Forwarding', current: 'forwards', ctx, body });
}
