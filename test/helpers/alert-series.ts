import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Every series deploy/prometheus/alerts.yml reads, found by parsing its rule expressions (never a
 * hand-kept list: a new rule is covered the day it is written), and a check that a receiver's
 * GET /metrics has a sample for each (issue 44): a labelled counter that first appears at 1 is
 * never seen to increase by `increase()`/`rate()`, so the rule reading it cannot fire on the first
 * event; and a series missing from /metrics cannot be alerted on at all.
 *
 * No YAML or PromQL dependency: the rules file is read line by line and each `expr:` tokenized.
 * test/integration/alerts.test.ts (the promtool tier) checks this reader against promtool's own
 * count of the rules, and this module's selectors against expressions whose answer is known.
 */

const ROOT = join(__dirname, '..', '..');
export const RULES_FILE = 'deploy/prometheus/alerts.yml';

export interface LabelMatcher {
  label: string;
  op: '=' | '!=' | '=~' | '!~';
  value: string;
}

/** One vector selector of an expression: `name{label="value", …}`. */
export interface Selector {
  metric: string;
  matchers: LabelMatcher[];
}

/** The alerting rules' names and expressions, in file order (one-line or block-scalar `expr:`). */
export function alertExpressions(text = readFileSync(join(ROOT, RULES_FILE), 'utf8')): {
  alert: string;
  expr: string;
}[] {
  const out: { alert: string; expr: string }[] = [];
  const lines = text.split('\n');
  let alert: string | null = null;
  lines.forEach((line, i) => {
    const name = /^\s*- alert:\s*(\S+)\s*$/.exec(line)?.[1];
    if (name !== undefined) alert = name;
    else if (/^\s*- (record|name):/.test(line)) alert = null;
    const value = /^(\s*)expr:\s*(.*)$/.exec(line);
    if (alert === null || !value) return;
    const [, indent = '', rest = ''] = value;
    if (!/^[|>][+-]?$/.test(rest.trim())) {
      out.push({ alert, expr: unquote(rest) });
      return;
    }
    const block: string[] = [];
    for (const next of lines.slice(i + 1)) {
      if (next.trim() !== '' && next.length - next.trimStart().length <= indent.length) break;
      block.push(next.trim());
    }
    out.push({ alert, expr: block.join(' ').trim() });
  });
  return out;
}

function unquote(value: string): string {
  const v = value.trim();
  if (v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1).replace(/''/g, "'");
  if (v.startsWith('"') && v.endsWith('"')) return JSON.parse(v) as string;
  return v;
}

// ---- PromQL, tokenized just enough to find its vector selectors.

type Token = { kind: 'ident' | 'string' | 'number' | 'op'; text: string };

const TOKEN =
  /\s+|#[^\n]*|([a-zA-Z_:][\w:]*)|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)|(\d[\w.]*(?:[eE][+-]?\d+)?|\.\d+)|(=~|!~|!=|==|>=|<=|[-+*/%^=<>(){}[\],:@])/y;

function tokens(expr: string): Token[] {
  const out: Token[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < expr.length) {
    const at = TOKEN.lastIndex;
    const m = TOKEN.exec(expr);
    if (!m) throw new Error(`PromQL not understood at ${at}: ${expr.slice(at, at + 20)}`);
    const [, ident, string, number, op] = m;
    if (ident !== undefined) out.push({ kind: 'ident', text: ident });
    else if (string !== undefined) out.push({ kind: 'string', text: string });
    else if (number !== undefined) out.push({ kind: 'number', text: number });
    else if (op !== undefined) out.push({ kind: 'op', text: op });
  }
  return out;
}

function stringValue(token: Token | undefined): string {
  if (token?.kind !== 'string') throw new Error(`a label value expected, got ${token?.text}`);
  const t = token.text;
  if (t.startsWith('`')) return t.slice(1, -1);
  if (t.startsWith("'"))
    return JSON.parse(`"${t.slice(1, -1).replace(/\\'/g, "'").replace(/"/g, '\\"')}"`) as string;
  return JSON.parse(t) as string;
}

/** Words that are never metric names: operators, modifiers, and `inf`/`nan`. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);
/** Modifiers followed by a parenthesized list of label names (not selectors). */
const LABEL_LISTS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);

/** A function or an aggregation (`max without (pod) (x)`), not a selector. */
function calls(t: Token, next: Token | undefined): boolean {
  return (
    next?.text === '(' || (next?.kind === 'ident' && /^(by|without)$/i.test(next.text) && t.kind === 'ident')
  );
}

/** Index just past the bracket that closes the one at `open`. */
function closing(ts: Token[], open: number): number {
  const pairs: Record<string, string> = { '(': ')', '[': ']', '{': '}' };
  const want = pairs[ts[open]?.text ?? ''];
  let depth = 0;
  for (let i = open; i < ts.length; i++) {
    const t = ts[i]?.text;
    if (t === ts[open]?.text) depth++;
    else if (t === want && --depth === 0) return i + 1;
  }
  throw new Error('unbalanced brackets');
}

function matchersAt(ts: Token[], open: number): LabelMatcher[] {
  const matchers: LabelMatcher[] = [];
  for (let i = open + 1; ts[i]?.text !== '}';) {
    const label = ts[i]?.text ?? '';
    const op = ts[i + 1]?.text as LabelMatcher['op'];
    if (!['=', '!=', '=~', '!~'].includes(op)) throw new Error(`a label matcher expected at ${label}`);
    matchers.push({ label, op, value: stringValue(ts[i + 2]) });
    i += 3;
    if (ts[i]?.text === ',') i++;
  }
  return matchers;
}

/**
 * The vector selectors of a PromQL expression, as PromQL reads them: an identifier that is not a
 * function call, a keyword, a label of a `by`/`without`/`on`/`ignoring` list or an `offset`'s
 * duration, with its `{…}` matchers; a bare `{__name__="x"}` too. Ranges and subqueries (`[5m]`,
 * `[1h:1m]`) are skipped.
 */
export function selectorsIn(expr: string): Selector[] {
  const ts = tokens(expr);
  const out: Selector[] = [];
  for (let i = 0; i < ts.length;) {
    const t = ts[i] as Token;
    const next = ts[i + 1];
    if (t.text === '[') {
      i = closing(ts, i);
    } else if (t.kind === 'ident' && LABEL_LISTS.has(t.text.toLowerCase())) {
      i = next?.text === '(' ? closing(ts, i + 1) : i + 1;
    } else if (t.kind === 'ident' && t.text.toLowerCase() === 'offset') {
      i += 2;
    } else if (t.kind === 'ident' && (KEYWORDS.has(t.text.toLowerCase()) || calls(t, next))) {
      i += 1;
    } else if (t.kind === 'ident') {
      const matchers = next?.text === '{' ? matchersAt(ts, i + 1) : [];
      out.push({ metric: t.text, matchers });
      i = next?.text === '{' ? closing(ts, i + 1) : i + 1;
    } else if (t.text === '{') {
      const matchers = matchersAt(ts, i);
      const name = matchers.find((m) => m.label === '__name__' && m.op === '=');
      if (!name) throw new Error(`a selector without a metric name: ${expr}`);
      out.push({ metric: name.value, matchers: matchers.filter((m) => m !== name) });
      i = closing(ts, i);
    } else i += 1;
  }
  return out;
}

export function formatSelector(s: Selector): string {
  const body = s.matchers.map((m) => `${m.label}${m.op}${JSON.stringify(m.value)}`).join(',');
  return body ? `${s.metric}{${body}}` : s.metric;
}

// ---- /metrics (the Prometheus text format), sample by sample.

export interface Sample {
  name: string;
  labels: Record<string, string>;
}

export function parseSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const [, name, body = ''] = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+\S+/.exec(line) ?? [];
    if (!name) throw new Error(`a sample line not understood: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, label = '', value = ''] of body.matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g))
      labels[label] = JSON.parse(`"${value}"`) as string;
    samples.push({ name, labels });
  }
  return samples;
}

/** Labels Prometheus adds when it scrapes (the target's), never the receiver's. */
const TARGET_LABELS = new Set(['job', 'instance', 'pod']);
/** Series Prometheus writes itself. */
const PROMETHEUS_SERIES = new Set(['up']);

function matches(m: LabelMatcher, value: string): boolean {
  switch (m.op) {
    case '=':
      return value === m.value;
    case '!=':
      return value !== m.value;
    case '=~':
      return new RegExp(`^(?:${m.value})$`).test(value);
    case '!~':
      return !new RegExp(`^(?:${m.value})$`).test(value);
  }
}

/** Whether `sample` is one `selector` selects, its target labels aside. */
export function selects(selector: Selector, sample: Sample): boolean {
  return (
    sample.name === selector.metric &&
    selector.matchers
      .filter((m) => !TARGET_LABELS.has(m.label))
      .every((m) => matches(m, sample.labels[m.label] ?? ''))
  );
}

/**
 * The selectors of alerts.yml with no sample in `metricsText`, each with the alerts that read it:
 * `[]` when every series an alert reads is exported.
 */
export function seriesWithoutSample(metricsText: string, rulesText?: string): string[] {
  const samples = parseSamples(metricsText);
  const readers = new Map<string, Set<string>>();
  const selectors = new Map<string, Selector>();
  for (const { alert, expr } of alertExpressions(rulesText))
    for (const s of selectorsIn(expr)) {
      if (PROMETHEUS_SERIES.has(s.metric)) continue;
      const key = formatSelector(s);
      selectors.set(key, s);
      readers.set(key, (readers.get(key) ?? new Set()).add(alert));
    }
  return [...selectors]
    .filter(([, s]) => !samples.some((sample) => selects(s, sample)))
    .map(([key]) => `${key} (read by ${[...(readers.get(key) ?? [])].join(', ')})`);
}
