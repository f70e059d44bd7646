import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { alertExpressions, selectorsIn } from '../helpers/alert-series';
import { FakeDestination } from '../helpers/destination';
import { delivery, eventually, startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * The alerting that ships with the product (deploy/): the rules pass `promtool check rules` and
 * their unit tests; every metric the rules and the Grafana dashboard read is one a real receiver
 * exposes on GET /metrics (a renamed metric fails here, not silently in production); every alert
 * has a severity, a summary, a runbook_url and an entry in the alert runbook (docs/alert-runbook.md).
 *
 * promtool comes from Debian's `prometheus` package. Missing, this test fails: it is never skipped.
 */

const ROOT = join(__dirname, '..', '..');
const RULES = 'deploy/prometheus/alerts.yml';
const RULE_TESTS = 'deploy/prometheus/alerts.test.yml';
const DASHBOARD = 'deploy/grafana/consig-receiver.json';
const RUNBOOK = 'docs/alert-runbook.md';

const read = (path: string): string => readFileSync(join(ROOT, path), 'utf8');

/** Runs promtool; its absence is an error that says how to install it. */
function promtool(...args: string[]): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT')
    throw new Error(
      'promtool is not installed: `apt-get install prometheus` (Debian/Ubuntu) provides /usr/bin/promtool, ' +
        'which these alerting tests need (CI installs it)',
    );
  if (run.error) throw run.error;
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

// ---- alerts.yml, read line by line (no YAML dependency). promtool's own count of the rules is
// compared with ours below, so a layout this reader misses fails instead of passing unchecked.

interface AlertRule {
  name: string;
  expr: string;
  /** `key: value` lines of the rule (labels and annotations), values unquoted. */
  fields: Map<string, string>;
}

function unquote(value: string): string {
  const v = value.trim();
  if (v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1).replace(/''/g, "'");
  if (v.startsWith('"') && v.endsWith('"')) return JSON.parse(v) as string;
  return v;
}

const indentOf = (line: string): number => line.length - line.trimStart().length;

/** `expr:` on one line, or as a block scalar (`|`, `>`) on the more indented lines after it. */
function exprOf(lines: string[]): string {
  const at = lines.findIndex((l) => /^\s*expr:/.test(l));
  const key = lines[at];
  if (key === undefined) return '';
  const value = key.replace(/^\s*expr:\s*/, '');
  if (!/^[|>][+-]?$/.test(value.trim())) return unquote(value);
  const block: string[] = [];
  for (const line of lines.slice(at + 1)) {
    if (line.trim() !== '' && indentOf(line) <= indentOf(key)) break;
    block.push(line.trim());
  }
  return block.join(' ').trim();
}

function parseAlertRules(text: string): AlertRule[] {
  const blocks: { name: string; lines: string[] }[] = [];
  let current: { name: string; lines: string[] } | null = null;
  for (const line of text.split('\n')) {
    const name = /^\s*- alert:\s*(\S+)\s*$/.exec(line)?.[1];
    if (name !== undefined) {
      current = { name, lines: [] };
      blocks.push(current);
    } else if (/^\s*- (record|name):/.test(line)) current = null;
    else current?.lines.push(line);
  }
  return blocks.map(({ name, lines }) => {
    const fields = new Map<string, string>();
    for (const line of lines) {
      const [, key, value] = /^\s*([a-z_]+):\s*(\S.*)$/.exec(line) ?? [];
      if (key && value && key !== 'expr' && !fields.has(key)) fields.set(key, unquote(value));
    }
    return { name, expr: exprOf(lines), fields };
  });
}

// ---- PromQL: the metric names an expression reads.

const PROMQL_WORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/**
 * Metric names in a PromQL expression: identifiers left once strings, label matchers, ranges and
 * grouping clauses are removed, that are neither functions (followed by `(`) nor keywords. Grafana
 * variables (`$job`, `${x}`, `$__rate_interval`) are dropped first.
 */
function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/\$\{[^}]*\}|\$\w+/g, '')
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const [word] of bare.matchAll(/(?<![\w.:])[a-zA-Z_:][\w:]*(?![\w:]|\s*\()/g))
    if (!PROMQL_WORDS.has(word.toLowerCase())) names.add(word);
  return [...names];
}

/** The first capture group of each match of the global `re` in `text`. */
function firstGroups(text: string, re: RegExp): string[] {
  return [...text.matchAll(re)].map((m) => m[1] ?? '');
}

/** `metric{label="…"}` in an expression: the label names each metric is filtered on. */
function matchersIn(expr: string): { metric: string; labels: string[] }[] {
  return [...expr.matchAll(/([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}/g)].map(([, metric = '', body = '']) => ({
    metric,
    labels: firstGroups(body, /([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)/g),
  }));
}

// ---- The Grafana dashboard: every target's expr and every variable's metric.

interface Dashboard {
  schemaVersion: number;
  panels: { title?: string; targets?: { expr?: string; datasource?: { uid?: string } }[] }[];
  templating: { list: { name: string; type: string; query?: string | { query?: string } }[] };
}

function dashboardExprs(d: Dashboard): string[] {
  return d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr ?? ''));
}

function dashboardVariableMetrics(d: Dashboard): string[] {
  return d.templating.list.flatMap((v) => {
    const q = typeof v.query === 'string' ? v.query : (v.query?.query ?? '');
    return firstGroups(q, /label_values\(\s*([a-zA-Z_:][\w:]*)/g);
  });
}

// ---- /metrics, as a real receiver exposes it.

interface Exposition {
  /** `# TYPE` name → type. */
  types: Map<string, string>;
  /** Sample name → label names seen on its samples. */
  sampleLabels: Map<string, Set<string>>;
}

function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const sampleLabels = new Map<string, Set<string>>();
  for (const line of text.split('\n')) {
    const [, family, type] = /^# TYPE (\S+) (\S+)/.exec(line) ?? [];
    if (family && type) types.set(family, type);
    const [, name, labelText = ''] = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? /.exec(line) ?? [];
    if (!name) continue;
    const labels = sampleLabels.get(name) ?? new Set<string>();
    for (const label of firstGroups(labelText, /([a-zA-Z_]\w*)="/g)) labels.add(label);
    sampleLabels.set(name, labels);
  }
  return { types, sampleLabels };
}

/** The family a sample name belongs to (`x_bucket` of histogram `x` → `x`), or null if none. */
function familyOf(name: string, exposition: Exposition): string | null {
  if (exposition.types.has(name)) return name;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  const type = exposition.types.get(base);
  return type === 'histogram' || type === 'summary' ? base : null;
}

/** Scrape-time labels that come from Prometheus, not from the receiver. */
const TARGET_LABELS = new Set(['job', 'instance', 'pod']);
/** Series Prometheus itself writes. */
const PROMETHEUS_SERIES = new Set(['up']);

const rulesText = read(RULES);
const rules = parseAlertRules(rulesText);
const dashboard = JSON.parse(read(DASHBOARD)) as Dashboard;
const alertNames = [...new Set(rules.map((r) => r.name))];

describe('the alerting rules', () => {
  it('pass promtool check rules, which finds as many rules as this test reads', () => {
    const check = promtool('check', 'rules', RULES);
    expect(check).toEqual({ status: 0, output: expect.stringContaining('SUCCESS') });
    expect(check.output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(rules.length).toBeGreaterThan(15);
  });

  it('are read alike by test/helpers/alert-series.ts, whose selectors /metrics is checked against at startup', () => {
    // Two readers of the same file: the rules, and the metric names of their selectors, agree.
    expect(alertExpressions().map((r) => r.alert)).toEqual(rules.map((r) => r.name));
    const names = new Set(rules.flatMap((r) => metricNamesIn(r.expr)));
    const selected = new Set(alertExpressions().flatMap((r) => selectorsIn(r.expr).map((s) => s.metric)));
    expect([...selected].sort()).toEqual([...names].sort());
  });

  it('pass their promtool unit tests', () => {
    expect(promtool('test', 'rules', RULE_TESTS)).toEqual({
      status: 0,
      output: expect.stringContaining('SUCCESS'),
    });
  });

  it('are each tested firing and not firing', () => {
    const cases = [...read(RULE_TESTS).matchAll(/alertname: (\S+)\s*\n\s*exp_alerts:( \[\])?/g)];
    const firing = new Set(cases.filter((c) => c[2] === undefined).map((c) => c[1]));
    const quiet = new Set(cases.filter((c) => c[2] !== undefined).map((c) => c[1]));
    expect(alertNames.filter((n) => !firing.has(n))).toEqual([]);
    expect(alertNames.filter((n) => !quiet.has(n))).toEqual([]);
  });

  it('each have a severity, a summary, a description and a runbook_url to their runbook entry', () => {
    const problems = rules.flatMap((r) => {
      const out: string[] = [];
      if (!['critical', 'warning'].includes(r.fields.get('severity') ?? '')) out.push(`${r.name}: severity`);
      for (const key of ['summary', 'description'])
        if (!(r.fields.get(key) ?? '').trim()) out.push(`${r.name}: ${key}`);
      if (r.fields.get('runbook_url') !== `${RUNBOOK}#${r.name.toLowerCase()}`)
        out.push(`${r.name}: runbook_url ${r.fields.get('runbook_url')}`);
      if (!r.expr) out.push(`${r.name}: expr`);
      return out;
    });
    expect(problems).toEqual([]);
  });

  it('each have one entry in the runbook, and the runbook has no entry for an alert that is gone', () => {
    const runbook = read(RUNBOOK);
    expect(runbook).toMatch(/^# Alert runbook$/m);
    // One second-level heading per alert, named as the alert (its anchor is the runbook_url's).
    const headings = [...runbook.matchAll(/^## (\S+)\s*$/gm)].map((m) => m[1]);
    expect([...headings].sort()).toEqual([...alertNames].sort());
  });
});

describe('the Grafana dashboard', () => {
  it('is a dashboard on a templated Prometheus data source, with job and instance variables', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const variables = new Map(dashboard.templating.list.map((v) => [v.name, v]));
    expect(variables.get('DS_PROMETHEUS')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(variables.get('instance')).toMatchObject({ type: 'query' });
    const targets = dashboard.panels.flatMap((p) => p.targets ?? []);
    expect(targets.length).toBeGreaterThan(15);
    expect(targets.filter((t) => t.datasource?.uid !== '${DS_PROMETHEUS}' || !t.expr)).toEqual([]);
  });

  it('has only queries that parse as PromQL (checked by promtool as recording rules, the variables filled in)', () => {
    const fill = (expr: string): string =>
      expr.replace(/\$\{?(\w+)\}?/g, (_m, name: string) => (name === '__rate_interval' ? '5m' : '.*'));
    const tmp = tempDir('consig-dashboard-rules-');
    try {
      const file = join(tmp.dir, 'dashboard-rules.yml');
      const lines = dashboardExprs(dashboard).map(
        (expr, i) => `      - record: dashboard:expr_${i}\n        expr: ${JSON.stringify(fill(expr))}`,
      );
      writeFileSync(file, `groups:\n  - name: dashboard\n    rules:\n${lines.join('\n')}\n`);
      const check = promtool('check', 'rules', file);
      expect(check).toEqual({ status: 0, output: expect.stringContaining('SUCCESS') });
    } finally {
      tmp.cleanup();
    }
  });
});

describe('metrics read by the alerts and the dashboard', () => {
  let receiver: TestReceiver;
  let lender: FakeDestination;
  let exposition: Exposition;

  beforeAll(async () => {
    // A destination that accepts, so the forwarding series have samples (and their labels).
    lender = await FakeDestination.start();
    receiver = await startTestReceiver({
      env: { FORWARD_URL: lender.url, FORWARD_SECRET: 'alerts-test-forward-secret' },
    });
    expect((await receiver.send(delivery('proposta.criada'))).status).toBe(200);
    await eventually(() => lender.accepted().length > 0, 'a message forwarded to the destination');
    const res = await fetch(`${receiver.url}/metrics`);
    expect(res.status).toBe(200);
    exposition = parseExposition(await res.text());
  });

  afterAll(async () => {
    await lender?.close();
    await receiver?.stop();
  });

  it('reads names in expressions the way PromQL does', () => {
    expect(
      metricNamesIn(
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{job=~"$job"}[$__rate_interval]))) > 1e3 ' +
          'and on (job) b offset 5m unless ignoring (destination) max without (instance) (c) == bool 2',
      ).sort(),
    ).toEqual(['a_bucket', 'b', 'c']);
    expect(metricNamesIn('up == 0 and on (job) group by (job) (present_over_time(x[1d]))').sort()).toEqual([
      'up',
      'x',
    ]);
  });

  it('are all exposed by GET /metrics, with the labels the expressions filter on', () => {
    const sources = [
      ...rules.map((r) => ({ where: `${RULES} ${r.name}`, expr: r.expr })),
      ...dashboardExprs(dashboard).map((expr) => ({ where: DASHBOARD, expr })),
    ];
    const used = new Map<string, string>();
    for (const { where, expr } of sources) for (const name of metricNamesIn(expr)) used.set(name, where);
    for (const name of dashboardVariableMetrics(dashboard)) used.set(name, `${DASHBOARD} variables`);
    expect(used.size).toBeGreaterThan(20);

    const missing = [...used]
      .filter(([name]) => !PROMETHEUS_SERIES.has(name) && familyOf(name, exposition) === null)
      .map(([name, where]) => `${name} (used in ${where})`);
    expect(missing).toEqual([]);

    // A label is checked where the metric has samples to show its labels.
    const wrongLabels = sources.flatMap(({ where, expr }) =>
      matchersIn(expr).flatMap(({ metric, labels }) => {
        const seen = exposition.sampleLabels.get(metric);
        if (!seen || seen.size === 0) return [];
        return labels
          .filter((l) => !TARGET_LABELS.has(l) && !seen.has(l))
          .map((l) => `${metric}{${l}} (used in ${where})`);
      }),
    );
    expect(wrongLabels).toEqual([]);
  });
});
