/**
 * The console's one escaping rule. Pages are built with the {@link html} tag: every interpolated
 * value is escaped for HTML text and quoted attribute values, unless it is already {@link SafeHtml}
 * (built by this tag, so escaped at its own level). Nothing else makes SafeHtml from a string:
 * there is no way to put unescaped text into a page by accident. Pure.
 */

/** Only this module holds it, so only this module can make SafeHtml. */
const BRAND: unique symbol = Symbol('SafeHtml');

/** Markup built by {@link html}: safe to put into a page as it is. */
export class SafeHtml {
  /** Use the {@link html} tag: the constructor takes a token only this module has. */
  constructor(
    token: typeof BRAND,
    readonly value: string,
  ) {
    if (token !== BRAND) throw new TypeError('SafeHtml is made by the html tag only');
  }
  toString(): string {
    return this.value;
  }
}

/** What a template may interpolate: text and numbers (escaped), markup, lists of them, or nothing. */
export type HtmlValue = SafeHtml | string | number | boolean | null | undefined | readonly HtmlValue[];

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

/**
 * Text made safe for an HTML text node or a quoted attribute value: `& < > " ' \``. Control
 * characters HTML forbids (C0 except tab, newline, carriage return, and DEL) become U+FFFD, so
 * stored bytes can never break the document.
 */
export function escapeHtml(text: string): string {
  return (
    text
      .replace(/[&<>"'`]/g, (c) => ESCAPES[c] as string)
      // eslint-disable-next-line no-control-regex -- finding the control characters is the point
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, '\ufffd')
  );
}

function render(value: HtmlValue): string {
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map((v: HtmlValue) => render(v)).join('');
  if (value === null || value === undefined || value === false) return '';
  return escapeHtml(String(value));
}

/** The template tag: `html\`<td>${text}</td>\`` escapes `text`; nested `html` stays as it is. */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0] ?? '';
  values.forEach((value, i) => {
    out += render(value) + (strings[i + 1] ?? '');
  });
  return new SafeHtml(BRAND, out);
}

/** Joins markup (or escaped text) with a separator. */
export function joinHtml(parts: readonly HtmlValue[], separator = ''): SafeHtml {
  return new SafeHtml(BRAND, parts.map(render).join(escapeHtml(separator)));
}

/** The opening of a cell's tag: in built markup every `<` of text is escaped, so each match is a tag. */
const CELL_TAG = /<t[dh](?=[\s>])/g;

/**
 * A table row with a `data-label` on each of its cells, in order (console.css draws the phone's
 * card layout from it). A row whose cells do not match the labels one for one is left as it is.
 */
export function labelCells(row: SafeHtml, labels: readonly string[]): SafeHtml {
  if ((row.value.match(CELL_TAG) ?? []).length !== labels.length) return row;
  let i = 0;
  return new SafeHtml(
    BRAND,
    row.value.replace(CELL_TAG, (tag) => `${tag} data-label="${escapeHtml(labels[i++] ?? '')}"`),
  );
}
