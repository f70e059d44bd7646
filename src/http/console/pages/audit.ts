import type { AuditRow } from '../../../domain/console';
import type { ConsoleDeps } from '../deps';
import { freeText, timeTag } from '../format';
import { html, type SafeHtml } from '../html';
import { hrefWith, page, type PageContext, pager, table } from '../layout';

/** `/console/audit`: what was done through the console, newest first (both roles may read it). */

const PAGE_SIZE = 100;

function row(r: AuditRow): SafeHtml {
  return html`<tr>
    <th scope="row">${r.id}</th>
    <td>${timeTag(r.at)}</td>
    <td>${r.action}</td>
    <td>${r.role ?? '—'}</td>
    <td>${r.session ?? '—'}</td>
    <td>${r.target ?? ''}</td>
    <td><code>${freeText(r.detail, 1000)}</code></td>
    <td>${r.ip ?? ''}</td>
  </tr>`;
}

export async function auditPage(
  d: ConsoleDeps,
  ctx: PageContext,
  before: number | undefined,
): Promise<string> {
  const rows = await d.log.audit.page(before ?? Number.MAX_SAFE_INTEGER, PAGE_SIZE + 1);
  const shown = rows.slice(0, PAGE_SIZE);
  const last = shown[shown.length - 1];
  const next =
    rows.length > PAGE_SIZE && last !== undefined ? hrefWith('/console/audit', { before: last.id }) : null;
  const body = html`<p class="note">Sessions are named by a short tag, never by their id.</p>
    ${table('Console actions, newest first', ['id', 'at', 'action', 'role', 'session', 'target', 'detail', 'from'], shown.map(row), 'nothing recorded yet')}${pager(next)}`;
  return page({ title: 'Audit', current: 'audit', ctx, body });
}
