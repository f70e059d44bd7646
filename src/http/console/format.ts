import { formatAge } from '../../domain/duration';
import { bodyFor } from '../../domain/forwarding/messages';
import { maskCpfsInText } from '../../domain/privacy';
import { html, type SafeHtml } from './html';

/** How the console writes times, ages, counts and bodies. Pure. */

/**
 * Free text from the log (an error, a detail) as shown: any CPF in it masked, and cut at `max`
 * characters (the whole text is in the database).
 */
export function freeText(text: string | null | undefined, max = 300): string {
  if (text === null || text === undefined) return '';
  const masked = maskCpfsInText(text);
  return masked.length > max ? `${masked.slice(0, max)}…` : masked;
}

/** `2026-11-21 13:05:12 UTC` for an ISO instant; the text itself when it is not one. */
export function formatInstant(iso: string): string {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return iso;
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** A `<time>` element for an ISO instant (machine-readable `datetime`, readable text). */
export function timeTag(iso: string | null | undefined): SafeHtml {
  if (iso === null || iso === undefined || iso === '') return html`—`;
  const ms = Date.parse(iso);
  const datetime = Number.isNaN(ms) ? iso : new Date(ms).toISOString();
  return html`<time datetime="${datetime}">${formatInstant(iso)}</time>`;
}

export { formatAge };

/** A delay: `350 ms` under a second, otherwise as {@link formatAge} writes it. */
export function formatDelay(ms: number): string {
  return ms < 1000 ? `${Math.max(0, Math.round(ms))} ms` : formatAge(ms);
}

/** The age of `iso` at `now` (`3 h 5 min ago`), or `—` when there is no time. */
export function ageOf(iso: string | null | undefined, now: Date): string {
  if (iso === null || iso === undefined) return '—';
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? '—' : `${formatAge(now.getTime() - ms)} ago`;
}

/** `12 345`, or `100 000+` when a count stopped at its cap. */
export function formatCount(n: number, cap = Number.POSITIVE_INFINITY): string {
  const text = n.toLocaleString('en-US').replace(/,/g, ' ');
  return n >= cap ? `${text}+` : text;
}

/**
 * `1 attempt`, `2 attempts`, `0 attempts`: a count and its noun, singular for exactly one (English
 * plural rule). `many` for the nouns that do not just take an `s` (`delivery`, `deliveries`).
 */
export function countOf(n: number, one: string, many = `${one}s`): string {
  return `${formatCount(n)} ${n === 1 ? one : many}`;
}

/**
 * A stored body as the console shows it: pretty JSON with every `nu_cpf` / `cpf` value masked (the
 * rule forwarding applies for a destination without full CPF: domain/forwarding/messages bodyFor),
 * then any CPF-shaped number left in free text masked too (more than needed, never less). A body
 * that is not JSON is shown as text, CPFs masked; bytes that are not UTF-8 are not shown.
 */
export function prettyBody(body: string | Buffer | null): { text: string | null; note: string | null } {
  if (body === null) return { text: null, note: 'The body was removed by retention (RETENTION_DAYS).' };
  if (typeof body !== 'string')
    return { text: null, note: `The body is not UTF-8 text (${body.length} bytes): not shown.` };
  let pretty: string;
  try {
    pretty = JSON.stringify(JSON.parse(bodyFor(body, false)), null, 2);
  } catch {
    // Not JSON (a quarantined delivery), or nested too deep to print again.
    return { text: maskCpfsInText(body), note: 'Not valid JSON (or too deeply nested): shown as received.' };
  }
  return { text: maskCpfsInText(pretty), note: null };
}
