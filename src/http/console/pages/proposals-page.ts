import { STAGES } from '../../../domain/catalogue';
import { isFinal, PROPOSAL_STATUSES, type ProposalStatus, stageOf } from '../../../domain/lifecycle';
import { maskCpf } from '../../../domain/privacy';
import { isStuck, limitOf, type StuckCutoff, stuckSince } from '../../../domain/stuck';
import type { ProposalListRow } from '../../../core/proposal-lists';
import type { ConsoleDeps } from '../deps';
import type { ProposalFilter } from '../filters';
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
  textField,
} from '../layout';
import { horizontalBarChart } from '../svg';

/**
 * `/console/proposals`: the funnel (proposals per status, grouped by stage) and a list filtered by
 * status, stage, age of the last change and stuck, most recently changed first (oldest first when
 * filtered by age or stuck). The lists are proposal-lists' keyset pages over the (status,
 * updated_at) index, one status at a time; the funnel is the per-status count.
 */

const PAGE_SIZE = 50;

export interface ProposalsData {
  now: Date;
  filter: ProposalFilter;
  counts: Record<string, number>;
  rows: ProposalListRow[];
  next: string | null;
  /** The search found nothing. */
  notFound: string | null;
  oldestFirst: boolean;
}

/** The statuses a filter covers: one, those of a stage, or all. */
function statusesOf(filter: ProposalFilter): readonly ProposalStatus[] {
  if (filter.status !== undefined) {
    return filter.stage === undefined || stageOf(filter.status) === filter.stage ? [filter.status] : [];
  }
  if (filter.stage !== undefined) return PROPOSAL_STATUSES.filter((s) => stageOf(s) === filter.stage);
  return PROPOSAL_STATUSES;
}

/**
 * Per status, the `updated_at` a proposal must be older than: its stuck limit and/or the age asked.
 * Statuses without a stuck limit drop out of a stuck listing. (`stuck()` reads a cutoff's status as
 * a column value: a final status given with an age filter works the same way.)
 */
function cutoffsOf(d: ConsoleDeps, filter: ProposalFilter, now: Date): StuckCutoff[] {
  return statusesOf(filter).flatMap((status) => {
    const limits: number[] = [];
    if (filter.stuck) {
      const limit = limitOf(status, d.stuckAfter);
      if (limit === null) return [];
      limits.push(limit);
    }
    if (filter.ageMs !== undefined) limits.push(filter.ageMs);
    const before = new Date(now.getTime() - Math.max(...limits)).toISOString();
    return [{ status, before } as StuckCutoff];
  });
}

export async function loadProposals(
  d: ConsoleDeps,
  filter: ProposalFilter,
  now: Date,
  notFound: string | null = null,
): Promise<ProposalsData> {
  const oldestFirst = filter.stuck || filter.ageMs !== undefined;
  const limit = PAGE_SIZE + 1;
  const { counts, rows } = await d.log.proposals(
    oldestFirst
      ? { kind: 'stuck', cutoffs: cutoffsOf(d, filter, now), after: filter.after, limit }
      : { kind: 'latest', statuses: statusesOf(filter), before: filter.after, limit },
  );
  const shown = rows.slice(0, PAGE_SIZE);
  const last = shown[shown.length - 1];
  const next =
    rows.length > PAGE_SIZE && last !== undefined ? `${last.updated_at}~${last.nu_proposta}` : null;
  return { now, filter, counts, rows: shown, next, notFound, oldestFirst };
}

function funnel(counts: Record<string, number>): SafeHtml {
  const rows = PROPOSAL_STATUSES.map((s) => ({
    label: `${stageOf(s)} · ${s}`,
    value: counts[s] ?? 0,
    className: isFinal(s) ? 's-final' : 's-bar',
  }));
  const tableRows = rows.map(
    (r) =>
      html`<tr>
        <th scope="row">${r.label}</th>
        <td class="num">${r.value}</td>
      </tr>`,
  );
  return html`${horizontalBarChart({ title: 'Proposals by stage and status', rows })}
    <details>
      <summary>The funnel as a table</summary>
      ${table('Proposals by stage and status', ['stage · status', 'proposals'], tableRows, 'None.', { cards: false })}
    </details>`;
}

function filters(f: ProposalFilter): SafeHtml {
  return filterForm(
    '/console/proposals',
    html`${textField('nu', 'nu_proposta', f.nu, { hint: 'exact number: opens the proposal' })}
    ${selectField('stage', 'Stage', STAGES, f.stage)}
    ${selectField('status', 'Status', PROPOSAL_STATUSES, f.status)}
    ${textField('age', 'Unchanged for at least', f.age, { placeholder: '3d', hint: 'e.g. 90m, 36h, 3d' })}
    ${selectField('stuck', 'Stuck', [{ value: 'yes', label: 'stuck only' }], f.stuck ? 'yes' : undefined)}`,
  );
}

function rowOf(r: ProposalListRow, d: Pick<ConsoleDeps, 'stuckAfter'>, now: Date): SafeHtml {
  const stuck = isStuck(r, d.stuckAfter, now)
    ? html`stuck since ${timeTag(stuckSince(r, d.stuckAfter))}`
    : '';
  return html`<tr>
    <th scope="row">
      <a href="/console/proposals/${encodeURIComponent(String(r.nu_proposta))}">${r.nu_proposta}</a>
    </th>
    <td>${r.stage}</td>
    <td>${statusBadge(r.status)}</td>
    <td>${r.last_evento ?? '—'}</td>
    <td>${timeTag(r.updated_at)} (${ageOf(r.updated_at, now)})</td>
    <td>${maskCpf(r.nu_cpf)}</td>
    <td>${stuck}</td>
  </tr>`;
}

export function renderProposals(
  data: ProposalsData,
  ctx: PageContext,
  d: Pick<ConsoleDeps, 'stuckAfter'>,
): string {
  const f = data.filter;
  const notFound =
    data.notFound === null ? '' : html`<p class="error-box" role="alert">No proposal ${data.notFound}.</p>`;
  const rows = data.rows.map((r) => rowOf(r, d, data.now));
  const order = data.oldestFirst ? 'longest unchanged first' : 'most recently changed first';
  const nextHref =
    data.next === null
      ? null
      : hrefWith('/console/proposals', {
          status: f.status,
          stage: f.stage,
          age: f.age,
          stuck: f.stuck ? 'yes' : undefined,
          after: data.next,
        });
  const body = html`${notFound}
    <h2>Funnel</h2>
    ${funnel(data.counts)}
    <h2>List</h2>
    ${filters(f)}${table(`Proposals, ${order}`, ['nu_proposta', 'stage', 'status', 'last evento', 'last change', 'CPF', 'stuck'], rows, 'none match')}${pager(nextHref)}`;
  return page({ title: 'Proposals', current: 'proposals', ctx, body });
}

export async function proposalsPage(
  d: ConsoleDeps,
  ctx: PageContext,
  filter: ProposalFilter,
  notFound: string | null = null,
): Promise<string> {
  return renderProposals(await loadProposals(d, filter, ctx.now, notFound), ctx, d);
}
