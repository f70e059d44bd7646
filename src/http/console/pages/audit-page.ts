import type { AuditRow } from '../../../domain/console';
import type { ConsoleDeps } from '../deps';
import { freeText, timeTag } from '../format';
import { html, type SafeHtml } from '../html';
import { actionForm, hrefWith, page, type PageContext, pager, table } from '../layout';

/**
 * `/console/audit`: what was done through the console, what it refused, and who read one person's
 * data through it or the admin API, newest first (both roles may read it); an admin ends every
 * session here.
 */

const PAGE_SIZE = 100;

/** A refused attempt's action cell: `refused: csrf`, and how often it repeated within its hour. */
function action(r: AuditRow): SafeHtml | string {
  if (r.outcome !== 'refused') return r.action;
  const repeats = r.times > 1 ? html`<br />${r.times} times, the last ${timeTag(r.last_at)}` : '';
  return html`refused: ${r.reason ?? '?'}${repeats}`;
}

/**
 * Who: the person signed in through the identity provider (e-mail, else subject) with their role,
 * else the role (a token's session), else anonymous for a refusal before sign-in; '—' otherwise.
 */
function who(r: AuditRow): string {
  const person = r.person ?? null;
  if (person !== null) return r.role === null ? person : `${person} (${r.role})`;
  if (r.role !== null) return r.role;
  return r.outcome === 'refused' ? 'anonymous' : '—';
}

function row(r: AuditRow): SafeHtml {
  return html`<tr>
    <th scope="row">${r.id}</th>
    <td>${timeTag(r.at)}</td>
    <td>${action(r)}</td>
    <td>${who(r)}</td>
    <td>${r.session ?? '—'}</td>
    <td>${r.target ?? ''}</td>
    <td><code>${freeText(r.detail, 1000)}</code></td>
    <td>${r.ip ?? ''}</td>
  </tr>`;
}

/** The admins' way to sign everyone out (the `end-sessions` command does the same). */
function endSessions(ctx: PageContext): SafeHtml | string {
  if (ctx.role !== 'admin') return '';
  return html`<section aria-labelledby="end-sessions">
    <h2 id="end-sessions">Sessions</h2>
    <p class="note">
      Ends every console session, yours included: everyone signs in again, with the role their groups at the
      identity provider give them now. Rotating a token ends the sessions it opened by itself.
    </p>
    ${actionForm(ctx, '/console/sessions/end', 'End all sessions')}
  </section>`;
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
  const body = html`<p class="note">
      A person signed in through the identity provider is named by e-mail (else the provider's subject); a
      token's session by its role. Sessions are named by a short tag, never by their id. Refused attempts (a
      missing or wrong CSRF token, another site's request, a viewer's action, a throttled sign-in) are counted
      per hour. Reads of one person's data are recorded too: <code>console_read</code> (an event's or a
      proposal's page), <code>admin_read</code> and <code>feed_read</code> (the admin API and the change feed,
      by its token: <code>admin-token</code>).
    </p>
    ${table('Actions and reads, newest first', ['id', 'at', 'action', 'who', 'session', 'target', 'detail', 'from'], shown.map(row), 'nothing recorded yet')}${pager(next)}${endSessions(ctx)}`;
  return page({ title: 'Audit', current: 'audit', ctx, body });
}
