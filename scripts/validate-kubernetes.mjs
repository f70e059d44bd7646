#!/usr/bin/env node
/**
 * Validates Kubernetes manifests against the Kubernetes API schemas, without a cluster:
 *
 *   node scripts/validate-kubernetes.mjs                 every *.yaml of deploy/kubernetes/
 *   node scripts/validate-kubernetes.mjs a.yaml b.yaml   those files
 *   ... --json                                           one JSON array of results on stdout
 *
 * Each YAML document is parsed as Kubernetes parses it (YAML 1.1: an unquoted `yes` or `on` is a
 * boolean, and then fails where a string is wanted), and checked with the model of its apiVersion
 * and kind: `kubernetes-models` (the API's OpenAPI schemas, validated by @kubernetes-models/validate)
 * and `@kubernetes-models/prometheus-operator` for the ServiceMonitor and PrometheusRule (the
 * operator's CRD schemas). A kind with no model is an error, not a pass. The schemas say nothing of
 * fields they do not know (`readinesProbe` passes them), which the API server refuses: those are
 * found by TypeScript, the object written as a literal of the model's type (`IStatefulSet`, ...),
 * whose excess-property check names the first unknown field of each object.
 *
 * These packages are ES modules only, which jest (CommonJS here) does not load: the unit test runs
 * this script in a child process. Exit code 1 when any document is invalid.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const DEFAULT_DIR = join(root, 'deploy', 'kubernetes');

/** The module of a model, from apiVersion and kind; null when none is known. */
function modelModule(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z]+$/.test(kind)) return null;
  if (apiVersion.startsWith('monitoring.coreos.com/'))
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion)) return null;
  return `kubernetes-models/${apiVersion}/${kind}`;
}

/**
 * For each [object, model module] entry, TypeScript's complaints about the object as a literal of
 * the model's type (unknown fields first of all); one program for all of them.
 */
function typeProblems(entries) {
  const ts = createRequire(import.meta.url)('typescript');
  // A file that does not exist, in the repository so that its imports resolve from node_modules.
  const file = join(root, 'scripts', '.validate-kubernetes-types.mts');
  const spans = [];
  let text = '';
  entries.forEach(([object, module], i) => {
    const start = text.length;
    text += `import type { I${object.kind} as T${i} } from '${module}';\n`;
    text += `export const x${i}: T${i} = ${JSON.stringify(object, null, 1)};\n`;
    spans.push([start, text.length]);
  });
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  host.getSourceFile = (name, version, ...rest) =>
    name === file ? ts.createSourceFile(name, text, version) : getSourceFile(name, version, ...rest);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  const problems = entries.map(() => []);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, ' ');
    const i = d.file?.fileName === file ? spans.findIndex(([a, b]) => d.start >= a && d.start < b) : -1;
    if (i >= 0) problems[i].push(message);
    else for (const p of problems) p.push(`TypeScript: ${message}`);
  }
  return problems;
}

async function check(object) {
  const spec = modelModule(object?.apiVersion, object?.kind);
  if (spec === null) return `no schema known for apiVersion ${object?.apiVersion} kind ${object?.kind}`;
  let Model;
  try {
    Model = (await import(spec))[object.kind];
  } catch {
    Model = undefined;
  }
  if (typeof Model !== 'function')
    return `no schema known for apiVersion ${object.apiVersion} kind ${object.kind}`;
  try {
    new Model(object).validate();
    return { error: null, module: spec };
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

async function validateFile(file) {
  const results = [];
  const name = relative(root, file);
  const docs = parseAllDocuments(readFileSync(file, 'utf8'), { version: '1.1', prettyErrors: true });
  for (const [index, doc] of (Array.isArray(docs) ? docs : [docs]).entries()) {
    const problems = [...doc.errors, ...doc.warnings].map((e) => e.message);
    const object = doc.toJS({ maxAliasCount: 100 });
    if (object === null || object === undefined) continue;
    const checked = problems.length > 0 ? `YAML: ${problems.join('; ')}` : await check(object);
    results.push({
      file: name,
      document: index,
      kind: object.kind ?? null,
      name: object.metadata?.name ?? null,
      error: typeof checked === 'string' ? checked : null,
      // Valid against the schema: its fields are checked by TypeScript next (main).
      typed: typeof checked === 'string' ? null : [object, checked.module],
    });
  }
  if (results.length === 0)
    results.push({ file: name, document: 0, kind: null, name: null, error: 'no object' });
  return results;
}

async function main(argv) {
  const json = argv.includes('--json');
  const given = argv.filter((a) => a !== '--json');
  const files =
    given.length > 0
      ? given
      : readdirSync(DEFAULT_DIR)
          .filter((f) => f.endsWith('.yaml') || f.endsWith('.yml'))
          .sort()
          .map((f) => join(DEFAULT_DIR, f));
  const results = (await Promise.all(files.map(validateFile))).flat();
  const typed = results.filter((r) => r.typed !== null);
  typeProblems(typed.map((r) => r.typed)).forEach((found, i) => {
    if (found.length > 0) typed[i].error = `unknown or mistyped field: ${found.join('; ')}`;
  });
  for (const r of results) delete r.typed;
  if (json) console.log(JSON.stringify(results, null, 2));
  else
    for (const r of results)
      console.log(
        `${r.error === null ? 'ok     ' : 'INVALID'} ${r.file}#${r.document} ${r.kind}/${r.name}${r.error ? `: ${r.error}` : ''}`,
      );
  return results.some((r) => r.error !== null) ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
