import { type SubjectAction, type SubjectReport, subjectJson } from '../../../core/subject-report';
import { maskCpf } from '../../../domain/privacy';
import { html, type SafeHtml } from '../html';
import { csrfField, page, type PageContext, table, textField } from '../layout';

/**
 * `/console/subjects` (admins only; issue 45, LGPD): what the receiver holds about one person, place
 * by place (the log, this replica's spool, the backups), counted as `subject find` counts it, and
 * their erasure. The CPF travels in POST bodies only and is shown masked: the page never holds it
 * in full, not even in a form's value.
 */

/** What the page shows under its forms: nothing yet, a refusal, or a find's or an erasure's report. */
export type SubjectsView =
  | { kind: 'forms' }
  | { kind: 'refused'; message: string }
  | { kind: 'report'; action: Extract<SubjectAction, 'find' | 'erase'>; cpf: string; report: SubjectReport };

const HEADINGS = [
  'place',
  'proposals',
  'with personal data',
  'events',
  'with a body',
  'averbações',
  'messages',
  'destination deliveries',
  'raw copies of the CPF',
  'shared with',
  'erasures',
];

type PlaceJson = Exclude<ReturnType<typeof subjectJson>['backups'][number], { missing: true }>;

function placeRow(label: string, p: PlaceJson): SafeHtml {
  return html`<tr>
    <th scope="row">${label} ${p.place}</th>
    <td class="num">${p.proposals}</td>
    <td class="num">${p.proposals_with_personal_data}</td>
    <td class="num">${p.events}</td>
    <td class="num">${p.events_with_body}</td>
    <td class="num">${p.averbacoes}</td>
    <td class="num">${p.messages}</td>
    <td class="num">${p.deliveries}</td>
    <td class="num">${p.raw_copies ?? '—'}</td>
    <td>${p.recipients.length === 0 ? '—' : p.recipients.join(', ')}</td>
    <td>${p.erasures.length === 0 ? '—' : p.erasures.join(', ')}</td>
  </tr>`;
}

/** The counts per place, then (erase) what the erasure changed and whom it told. */
function reportSection(view: Extract<SubjectsView, { kind: 'report' }>): SafeHtml {
  const json = subjectJson(view.report, view.action);
  const rows = [placeRow('log', json.log)];
  if (json.spool !== null) rows.push(placeRow('spool', json.spool));
  for (const b of json.backups)
    rows.push(
      'missing' in b
        ? html`<tr>
            <th scope="row">backup ${b.place}</th>
            <td colspan="10">missing (moved or deleted)</td>
          </tr>`
        : placeRow('backup', b),
    );
  const erased = json.log.erasure;
  const heading =
    erased === undefined
      ? `${maskCpf(view.cpf)}: what the receiver holds`
      : `${maskCpf(view.cpf)}: erased (${erased.erasure_id}); what is left is the legal-hold set`;
  const summary =
    erased === undefined
      ? ''
      : html`<p class="note" role="status">
          Changed in the log: ${erased.proposals} proposal(s), ${erased.events} event(s), ${erased.messages}
          message(s), ${erased.attempts} attempt(s), ${erased.averbacoes} averbação(ões), ${erased.audit}
          audit row(s).
          ${erased.notified.length === 0 ? 'No destination had their data.' : `Told: ${erased.notified.join(', ')}.`}
          ${json.journal === null ? '' : `Recorded in ${json.journal}.`}
          ${json.log.scrub?.walTruncated === false ? 'The WAL could not be truncated yet (a reader held it): erase again.' : ''}
        </p>`;
  const notices = json.log.notices.map(
    (n) =>
      html`<tr>
        <th scope="row">${n.erasure_id}</th>
        <td>${n.destination}</td>
        <td>${n.status}</td>
      </tr>`,
  );
  return html`<section aria-labelledby="subject-report">
    <h2 id="subject-report">${heading}</h2>
    ${summary}${table('Per place', HEADINGS, rows)}${notices.length === 0 ? '' : table('Erasures told to the destinations', ['erasure', 'destination', 'status'], notices)}
  </section>`;
}

function findForm(ctx: PageContext): SafeHtml {
  return html`<form method="post" action="/console/subjects" class="filters" aria-label="Find a person">
    ${csrfField(ctx)}${textField('cpf', 'CPF', undefined, { placeholder: '000.000.000-00' })}
    <div class="field actions"><button type="submit">Find</button></div>
  </form>`;
}

function eraseForm(ctx: PageContext): SafeHtml {
  return html`<section aria-labelledby="erase-subject">
    <h2 id="erase-subject">Erase a person</h2>
    <p class="note">
      Removes their personal data from the log, this replica's spool and the backups; ids, events, statuses,
      dates and amounts stay (the legal-hold set), and every destination that was sent their data is told.
      This cannot be undone.
    </p>
    <form method="post" action="/console/subjects/erase" class="filters" aria-label="Erase a person">
      ${csrfField(ctx)}
      <div class="field">
        <label for="f-erase-cpf">CPF</label
        ><input id="f-erase-cpf" name="cpf" type="text" placeholder="000.000.000-00" />
      </div>
      <div class="field wide">
        <label for="f-reason">Reason (the request it answers)</label
        ><input id="f-reason" name="reason" type="text" maxlength="1000" />
      </div>
      <div class="field">
        <label for="f-confirm">Erase: this cannot be undone</label
        ><input id="f-confirm" name="confirm" type="checkbox" value="erase" />
      </div>
      <div class="field actions"><button type="submit">Erase</button></div>
    </form>
  </section>`;
}

export function subjectsPage(ctx: PageContext, view: SubjectsView): string {
  const shown =
    view.kind === 'refused'
      ? html`<p class="error-box" role="alert">${view.message}</p>`
      : view.kind === 'report'
        ? reportSection(view)
        : '';
  const body = html`<p class="note">
      What the receiver holds about one person (the titular, LGPD), found by their CPF: each use is recorded
      in the audit. The CPF is never shown in full here.
    </p>
    ${findForm(ctx)}${shown}${eraseForm(ctx)}`;
  return page({ title: 'Personal data', current: 'subjects', ctx, body });
}
