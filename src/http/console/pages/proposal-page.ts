import type { TransitionReason } from '../../../domain/lifecycle';
import { maskCpf } from '../../../domain/privacy';
import { isStuck, stuckSince } from '../../../domain/stuck';
import type { AverbacaoRow } from '../../../domain/log-rows';
import {
  type RegistryEventRow,
  STORY_CAP,
  type StoryEventRow,
  type StoryForwardRow,
} from '../../../domain/console';
import type { ProposalRow } from '../../../domain/log-rows';
import type { ConsoleDeps } from '../deps';
import { ageOf, countOf, freeText, timeTag } from '../format';
import { html, joinHtml, type SafeHtml } from '../html';
import { page, type PageContext, statusBadge } from '../layout';
import { nextPoll } from './averbacoes-page';

/**
 * `/console/proposals/:nu`: where the proposal stands, and its whole story as one timeline ordered
 * by time — each event received and its duplicates, each transition (applied, or recorded without
 * moving the proposal and why), its averbações with the registry's answers and polls, and the
 * messages forwarded about it with their delivery per destination.
 */

/** Why a transition was or was not applied, in words (the reasons are lifecycle.ts's). */
export const REASON_TEXT: Readonly<Record<TransitionReason, string>> = {
  created: 'first event seen for this proposal: it starts here',
  forward: 'moved forward',
  final: 'reached a final status',
  payment_retried: 'payment retried after a failure',
  same_status: 'a repeat of the current status: nothing to change',
  late: 'out of order: an earlier step arrived after a later one',
  after_final: 'after a final status: a final proposal does not move',
};

export type TimelineKind = 'event' | 'duplicate' | 'transition' | 'averbacao' | 'poll' | 'forward';
const KIND_ORDER: readonly TimelineKind[] = [
  'event',
  'duplicate',
  'transition',
  'averbacao',
  'poll',
  'forward',
];

export interface TimelineItem {
  at: string;
  kind: TimelineKind;
  content: SafeHtml;
}

export interface ProposalStory {
  nu: number | string;
  proposal: ProposalRow | undefined;
  events: StoryEventRow[];
  averbacoes: { row: AverbacaoRow; answers: RegistryEventRow[] }[];
  forwards: StoryForwardRow[];
}

export async function loadProposal(d: ConsoleDeps, nu: number | string): Promise<ProposalStory | undefined> {
  const story = await d.log.proposalStory(nu);
  return story && { nu, ...story };
}

/** Items sorted by time; at one instant, in the order things happen (event, then its transition…). */
export function sortTimeline(items: readonly TimelineItem[]): TimelineItem[] {
  return items
    .map((item, i) => ({ item, i }))
    .sort((a, b) =>
      a.item.at !== b.item.at
        ? a.item.at < b.item.at
          ? -1
          : 1
        : KIND_ORDER.indexOf(a.item.kind) - KIND_ORDER.indexOf(b.item.kind) || a.i - b.i,
    )
    .map((x) => x.item);
}

const eventLink = (id: number, text: string | null) =>
  html`<a href="/console/events/${id}">${text ?? `event ${id}`}</a>`;

function eventItems(e: StoryEventRow): TimelineItem[] {
  const items: TimelineItem[] = [
    {
      at: e.received_at,
      kind: 'event',
      content: html`${eventLink(e.id, e.evento)} received (event ${e.id})
      ${statusBadge(e.status)}${e.attempts > 1 ? html`, ${countOf(e.attempts, 'attempt')}` : ''}${e.last_error === null ? '' : html`, last error: ${freeText(e.last_error)}`}`,
    },
  ];
  if (e.duplicates > 0) {
    items.push({
      at: e.last_duplicate_at ?? e.received_at,
      kind: 'duplicate',
      content: html`${countOf(e.duplicates, 'duplicate delivery', 'duplicate deliveries')} of event ${e.id}
      (the last one at this time): answered 200, nothing stored again`,
    });
  }
  if (e.to_status !== null) {
    const reason = REASON_TEXT[e.reason as TransitionReason] ?? e.reason ?? '';
    items.push({
      at: e.transition_at ?? e.processed_at ?? e.received_at,
      kind: 'transition',
      content:
        e.applied === 1
          ? html`${e.from_status ?? '(new)'} → <strong>${e.to_status}</strong>: ${reason}`
          : html`<span class="late">recorded, not applied</span>: ${e.evento} would set ${e.to_status}; stays
              at ${e.from_status ?? '—'} (${reason})`,
    });
  }
  return items;
}

function averbacaoItems(
  a: { row: AverbacaoRow; answers: RegistryEventRow[] },
  polling: boolean,
): TimelineItem[] {
  const r = a.row;
  const polls =
    r.poll_attempts > 0
      ? html`; ${countOf(r.poll_attempts, 'poll')}, the last ${timeTag(r.last_poll_at)}
        (${r.last_poll_outcome ?? '—'})`
      : '';
  const next = r.next_poll_at === null ? '' : html`; next poll ${nextPoll(r.next_poll_at, polling)}`;
  const items: TimelineItem[] = [
    {
      at: r.created_at,
      kind: 'averbacao',
      content: html`Averbação
        <a href="/console/averbacoes#req-${encodeURIComponent(r.request_id)}">${r.request_id}</a> tracked
        (${r.tracked_via}): now
        ${statusBadge(r.status)}${r.stale ? html` <strong>stale</strong>` : ''}${polls}${next}`,
    },
  ];
  if (r.completed_at !== null)
    items.push({
      at: r.completed_at,
      kind: 'averbacao',
      content: html`Averbação ${r.request_id} result: ${statusBadge(r.status)} (by ${r.result_source ?? '—'})`,
    });
  for (const ans of a.answers) {
    items.push({
      at: ans.received_at,
      kind: ans.kind === 'poll' ? 'poll' : 'event',
      content: html`${ans.kind === 'poll' ? 'Poll answer' : 'Registry webhook'} for ${ans.request_id}:
      ${ans.registry_status ?? '—'} (${eventLink(ans.id, `event ${ans.id}`)}
      ${statusBadge(ans.status)}${ans.duplicates > 0 ? html`, ${countOf(ans.duplicates, 'repeat')}` : ''})`,
    });
  }
  return items;
}

function forwardItems(rows: readonly StoryForwardRow[]): TimelineItem[] {
  const byMessage = new Map<number, StoryForwardRow[]>();
  for (const r of rows) byMessage.set(r.message_id, [...(byMessage.get(r.message_id) ?? []), r]);
  return [...byMessage.values()].map((group) => {
    const first = group[0] as StoryForwardRow;
    const deliveries = group
      .filter((g) => g.destination !== null)
      .map(
        (g) =>
          html`${g.destination}:
          ${statusBadge(g.status ?? 'pending')}${(g.attempts ?? 0) > 0 ? html` after ${countOf(g.attempts ?? 0, 'attempt')}` : ''}${g.last_error === null ? '' : html` (${freeText(g.last_error)})`}`,
      );
    const to = deliveries.length === 0 ? html`kept for the change feed only` : joinHtml(deliveries, '; ');
    return {
      at: first.created_at,
      kind: 'forward' as const,
      content: html`Forwarded ${first.type} (message ${first.message_id}, from
      ${eventLink(first.event_id, `event ${first.event_id}`)}) → ${to}`,
    };
  });
}

function header(s: ProposalStory, d: Pick<ConsoleDeps, 'stuckAfter'>, now: Date): SafeHtml {
  const p = s.proposal;
  if (p === undefined)
    return html`<p class="note">Events name this proposal, but none has been processed into it yet.</p>`;
  const amount = p.vl_emprestimo === null ? '—' : `R$ ${Number(p.vl_emprestimo).toFixed(2)}`;
  const stuck = isStuck(p, d.stuckAfter, now)
    ? html`yes, since ${timeTag(stuckSince(p, d.stuckAfter))}`
    : 'no';
  return html`<dl class="facts">
    <dt>Stage</dt>
    <dd>${p.stage}</dd>
    <dt>Status</dt>
    <dd>${statusBadge(p.status)}</dd>
    <dt>uuid</dt>
    <dd>${p.uuid ?? '—'}</dd>
    <dt>CPF</dt>
    <dd>${maskCpf(p.nu_cpf)}</dd>
    <dt>Amount (vl_emprestimo)</dt>
    <dd>${amount}</dd>
    <dt>Conveniada</dt>
    <dd>${p.no_conveniada ?? '—'}</dd>
    <dt>Last evento</dt>
    <dd>${p.last_evento ?? '—'}</dd>
    <dt>Last change</dt>
    <dd>${timeTag(p.updated_at)} (${ageOf(p.updated_at, now)})</dd>
    <dt>Stuck</dt>
    <dd>${stuck}</dd>
  </dl>`;
}

export function renderProposal(
  s: ProposalStory,
  ctx: PageContext,
  d: Pick<ConsoleDeps, 'stuckAfter' | 'registryPolling'>,
): string {
  const items = sortTimeline([
    ...s.events.flatMap(eventItems),
    ...s.averbacoes.flatMap((a) => averbacaoItems(a, d.registryPolling)),
    ...forwardItems(s.forwards),
  ]);
  const lis = items.map((i) => html`<li data-kind="${i.kind}">${timeTag(i.at)} ${i.content}</li>`);
  const capped =
    s.events.length >= STORY_CAP
      ? html`<p class="note">Only the first ${STORY_CAP} events are shown.</p>`
      : '';
  const body = html`${header(s, d, ctx.now)}
    <h2>Timeline</h2>
    ${capped}
    <ol class="timeline">
      ${lis}
    </ol>
    <p>
      <a href="/console/events?nu_proposta=${encodeURIComponent(String(s.nu))}">This proposal's events</a>
    </p>`;
  return page({ title: `Proposal ${s.nu}`, current: 'proposals', ctx, body });
}

/** The page, or undefined when nothing names this proposal. */
export async function proposalPage(
  d: ConsoleDeps,
  ctx: PageContext,
  nu: number | string,
): Promise<string | undefined> {
  const story = await loadProposal(d, nu);
  return story === undefined ? undefined : renderProposal(story, ctx, d);
}
