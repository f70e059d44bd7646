import type { ConsoleRole } from '../../domain/console';
import { html, type HtmlValue, labelCells, type SafeHtml } from './html';

/**
 * The console's page shell and the small pieces every page uses: navigation, the CSRF field,
 * status badges, filter fields (each with its label) and keyset pager links. Pure.
 */

export type NavKey =
  | 'overview'
  | 'proposals'
  | 'events'
  | 'deliveries'
  | 'dead'
  | 'averbacoes'
  | 'forwards'
  | 'audit'
  | 'subjects';

/** Who is looking, and what a page needs to render for them. */
export interface PageContext {
  role: ConsoleRole;
  /** The session's CSRF token, for the hidden `_csrf` field of every POST form. */
  csrf: string;
  now: Date;
  /** Signed in through the identity provider: the person's name (else e-mail, else subject). */
  person?: string | null;
}

/** "Maria Souza (admin)" for a person; the role alone for a token's session. */
function signedInAs(ctx: PageContext): string {
  const role = ctx.role === 'admin' ? 'admin' : 'viewer (read only)';
  if (ctx.person === undefined || ctx.person === null) return role;
  return `${ctx.person} (${ctx.role === 'admin' ? 'admin' : 'viewer, read only'})`;
}

const NAV: readonly [NavKey, string, string][] = [
  ['overview', 'Overview', '/console'],
  ['proposals', 'Proposals', '/console/proposals'],
  ['events', 'Events', '/console/events'],
  ['deliveries', 'Deliveries', '/console/deliveries'],
  ['dead', 'Dead letters', '/console/dead'],
  ['averbacoes', 'Averbações', '/console/averbacoes'],
  ['forwards', 'Forwarding', '/console/forwards'],
  ['audit', 'Audit', '/console/audit'],
];

/** The pages only an admin may open (issue 45: one person's data, their erasure). */
const ADMIN_NAV: readonly [NavKey, string, string][] = [['subjects', 'Personal data', '/console/subjects']];

export const STYLESHEET_PATH = '/console/assets/console.css';
export const FAVICON_PATH = '/console/assets/favicon.svg';

function head(title: string, extra: HtmlValue = ''): SafeHtml {
  return html`<head>
    <meta charset="utf-8" />
    ${extra}
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="referrer" content="no-referrer" />
    <title>${title} · consig-receiver console</title>
    <link rel="stylesheet" href="${STYLESHEET_PATH}" />
    <link rel="icon" href="${FAVICON_PATH}" type="image/svg+xml" />
  </head>`;
}

function nav(current: NavKey | null, role: ConsoleRole): SafeHtml {
  const items = [...NAV, ...(role === 'admin' ? ADMIN_NAV : [])].map(
    ([key, label, href]) =>
      html`<li><a href="${href}" ${key === current ? html` aria-current="page"` : ''}>${label}</a></li>`,
  );
  return html`<nav aria-label="Console">
    <ul class="nav">
      ${items}
    </ul>
  </nav>`;
}

/** A signed-in page: header with navigation and sign-out, one `<h1>`, the body in `<main>`. */
export function page(o: {
  title: string;
  current: NavKey | null;
  ctx: PageContext;
  body: HtmlValue;
}): string {
  const who = html`<div class="who">
    <span>Signed in: ${signedInAs(o.ctx)}</span>
    <form method="post" action="/console/logout">
      ${csrfField(o.ctx)}<button type="submit">Sign out</button>
    </form>
  </div>`;
  return document(
    o.title,
    html`<header class="top">
        <p class="brand"><a href="/console">consig-receiver</a></p>
        ${nav(o.current, o.ctx.role)}${who}
      </header>
      <main id="main" tabindex="-1">
        <h1>${o.title}</h1>
        ${o.body}
      </main>`,
  );
}

/** A page outside a session (sign-in, errors before sign-in): no navigation. */
export function bareDocument(title: string, body: HtmlValue, extraHead: HtmlValue = ''): string {
  return document(
    title,
    html`<header class="top"><p class="brand">consig-receiver</p></header>
      <main id="main" tabindex="-1">
        <h1>${title}</h1>
        ${body}
      </main>`,
    extraHead,
  );
}

function document(title: string, content: SafeHtml, extraHead: HtmlValue = ''): string {
  return html`<!doctype html>
    <html lang="en">
      ${head(title, extraHead)}
      <body>
        <a class="skip-link" href="#main">Skip to content</a> ${content}
      </body>
    </html>`.value;
}

export function csrfField(ctx: Pick<PageContext, 'csrf'>): SafeHtml {
  return html`<input type="hidden" name="_csrf" value="${ctx.csrf}" />`;
}

/** `<span class="status status-dead">dead</span>` (the class names only what the stored status is). */
export function statusBadge(status: string): SafeHtml {
  const known = /^[a-z_]{1,40}$/.test(status) ? status : 'other';
  return html`<span class="status status-${known}">${status}</span>`;
}

/** `path?a=1&b=2` from the given parameters (undefined and empty ones left out). */
export function hrefWith(
  path: string,
  params: Record<string, string | number | boolean | undefined | null>,
): string {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params))
    if (v !== undefined && v !== null && v !== '') search.set(k, String(v));
  const qs = search.toString();
  return qs === '' ? path : `${path}?${qs}`;
}

/** The link to the next page, when there is one. */
export function pager(next: string | null, label = 'Older'): SafeHtml {
  if (next === null) return html``;
  return html`<nav aria-label="Pagination" class="pager"><a href="${next}" rel="next">${label} →</a></nav>`;
}

export interface Option {
  value: string;
  label?: string;
}

/** A labelled `<select>`; the first option (empty) means "any". */
export function selectField(
  name: string,
  label: string,
  options: readonly (string | Option)[],
  value: string | undefined,
): SafeHtml {
  const opts = options.map((o) => {
    const { value: v, label: l } = typeof o === 'string' ? { value: o, label: o } : o;
    return html`<option value="${v}" ${v === value ? html` selected` : ''}>${l ?? v}</option>`;
  });
  return html`<div class="field">
    <label for="f-${name}">${label}</label
    ><select id="f-${name}" name="${name}">
      <option value="">any</option>
      ${opts}
    </select>
  </div>`;
}

/** A labelled text `<input>`. */
export function textField(
  name: string,
  label: string,
  value: string | number | undefined,
  extra: { type?: string; placeholder?: string; hint?: string } = {},
): SafeHtml {
  const hint = extra.hint === undefined ? '' : html`<small id="f-${name}-hint">${extra.hint}</small>`;
  return html`<div class="field">
    <label for="f-${name}">${label}</label
    ><input
      id="f-${name}"
      name="${name}"
      type="${extra.type ?? 'text'}"
      value="${value ?? ''}"
      ${extra.placeholder === undefined ? '' : html` placeholder="${extra.placeholder}"`}${extra.hint === undefined ? '' : html` aria-describedby="f-${name}-hint"`}
    />${hint}
  </div>`;
}

/**
 * A filter form folded into a `<details>` above its list, so that on a phone the list (and its
 * actions) comes first; the summary names the filters in force.
 */
export function foldedFilters(what: string, active: readonly string[], form: SafeHtml): SafeHtml {
  const state = active.length === 0 ? 'none active' : `active: ${active.join(', ')}`;
  return html`<details class="filters-box">
    <summary>Filter ${what} (${state})</summary>
    ${form}
  </details>`;
}

/** A GET form that keeps its filters in the URL. */
export function filterForm(action: string, fields: HtmlValue, label = 'Filters'): SafeHtml {
  return html`<form method="get" action="${action}" class="filters" aria-label="${label}">
    ${fields}
    <div class="field actions"><button type="submit">Apply</button> <a href="${action}">Clear</a></div>
  </form>`;
}

/** A one-button POST form (an action), with the CSRF field and extra hidden fields. */
export function actionForm(
  ctx: PageContext,
  action: string,
  button: string,
  hidden: Record<string, string | number | undefined> = {},
): SafeHtml {
  const fields = Object.entries(hidden)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`);
  return html`<form method="post" action="${action}" class="inline">
    ${csrfField(ctx)}${fields}<button type="submit">${button}</button>
  </form>`;
}

/**
 * A table with a caption and `<th scope="col">` headings; an empty list says so. On a phone its rows
 * become cards, each cell a line labelled with its heading (the cells get `data-label`), so that
 * every column, the actions too, shows without scrolling sideways; `cards: false` keeps a narrow
 * table (a few numbers per row) as a table.
 */
export function table(
  caption: string,
  headings: readonly string[],
  rows: readonly SafeHtml[],
  empty = 'None.',
  options: { cards?: boolean } = {},
): SafeHtml {
  if (rows.length === 0) return html`<p class="empty">${caption}: ${empty}</p>`;
  const ths = headings.map((h) => html`<th scope="col">${h}</th>`);
  const cards = options.cards ?? true;
  const body = cards ? rows.map((r) => labelCells(r, headings)) : rows;
  return html`<div
    class="table-wrap${cards ? ' cards' : ''}"
    tabindex="0"
    role="region"
    aria-label="${caption}"
  >
    <table>
      <caption>
        ${caption}
      </caption>
      <thead>
        <tr>
          ${ths}
        </tr>
      </thead>
      <tbody>
        ${body}
      </tbody>
    </table>
  </div>`;
}
