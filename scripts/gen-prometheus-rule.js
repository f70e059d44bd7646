#!/usr/bin/env node
/**
 * Writes deploy/kubernetes/prometheusrule.yaml, the Prometheus Operator's PrometheusRule, from
 * deploy/prometheus/alerts.yml, the rules file that promtool tests: one source for both.
 *
 *   node scripts/gen-prometheus-rule.js           write the file
 *   node scripts/gen-prometheus-rule.js --check   exit 1 if the file is not what alerts.yml gives
 *
 * A rules file (`groups: [...]`) is exactly a PrometheusRule's `spec`, so the rules file's text is
 * copied under `spec:`, each line indented by two spaces: its comments stay, and no YAML library is
 * needed (plain node from a checkout). Indenting every line of a YAML block by the same amount does
 * not change what it says, block scalars included. Only its leading comment (how to load the file
 * with promtool) is left out. test/unit/deploy-kubernetes.test.ts regenerates the file, compares,
 * and checks that the parsed `spec` equals the parsed alerts.yml.
 */
const { readFileSync, writeFileSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const SOURCE = 'deploy/prometheus/alerts.yml';
const TARGET = 'deploy/kubernetes/prometheusrule.yaml';

const HEADER = `# GENERATED from ${SOURCE} by scripts/gen-prometheus-rule.js: do not edit, run
#   node scripts/gen-prometheus-rule.js
# after changing the rules (test/unit/deploy-kubernetes.test.ts fails while they differ).
# The Prometheus Operator loads it when your Prometheus's ruleSelector selects it: add the label it
# asks for (with kube-prometheus-stack, \`release: <its release name>\`). What each alert means and
# what to do: docs/alert-runbook.md.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: consig-receiver
  labels:
    app.kubernetes.io/name: consig-receiver
spec:
`;

/** The PrometheusRule for the text of a rules file. */
function render(rulesText) {
  const lines = rulesText.replace(/\r\n/g, '\n').split('\n');
  // The leading comment block (and blank lines) is the rules file's own preamble.
  let start = 0;
  while (start < lines.length && /^\s*(#.*)?$/.test(lines[start])) start += 1;
  if (start === lines.length) throw new Error(`${SOURCE} has no rules`);
  if (lines[start].startsWith('---') || lines[start].startsWith('%'))
    throw new Error(`${SOURCE}: one YAML document without directives expected, got "${lines[start]}"`);
  const body = lines.slice(start);
  while (body.length > 0 && body[body.length - 1].trim() === '') body.pop();
  return HEADER + body.map((line) => (line === '' ? '' : `  ${line}`)).join('\n') + '\n';
}

function main(argv) {
  const wanted = render(readFileSync(join(root, SOURCE), 'utf8'));
  const target = join(root, TARGET);
  if (argv.includes('--check')) {
    let current = null;
    try {
      current = readFileSync(target, 'utf8');
    } catch {
      current = null;
    }
    if (current !== wanted) {
      console.error(`${TARGET} is not what ${SOURCE} gives: run node scripts/gen-prometheus-rule.js`);
      return 1;
    }
    return 0;
  }
  writeFileSync(target, wanted);
  console.log(`wrote ${TARGET} from ${SOURCE}`);
  return 0;
}

module.exports = { render, SOURCE, TARGET };

if (require.main === module) process.exitCode = main(process.argv.slice(2));
