import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

/**
 * The layering rules of eslint.config.mjs, checked the way `npm run lint` applies them: a file
 * with a forbidden import, linted as if it lived in that layer, must fail, and an allowed one pass.
 * ESLint loads its .mjs config with a dynamic import, which Jest's sandbox refuses, so the cases
 * are linted by one real `node` process.
 */

const root = join(__dirname, '..', '..');

const LINT_CASES = `
import { ESLint } from 'eslint';
const cases = JSON.parse(await new Promise((resolve) => {
  let text = '';
  process.stdin.on('data', (c) => (text += c)).on('end', () => resolve(text));
}));
const eslint = new ESLint({ cwd: process.cwd() });
const out = [];
for (const [filePath, code] of cases) {
  const [result] = await eslint.lintText(code, { filePath });
  out.push(result.messages.filter((m) => m.ruleId?.endsWith('no-restricted-imports')).map((m) => m.message));
}
process.stdout.write(JSON.stringify(out));
`;

const lintCache = new Map<string, string[]>();

function restrictedImports(file: string, code: string): string[] {
  return lintCache.get(`${file}\n${code}`) ?? [];
}

function lintAll(cases: [string, string][]): void {
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', LINT_CASES], {
    cwd: root,
    input: JSON.stringify(cases.map(([file, code]) => [join(root, file), `${code}\nexport {};\n`])),
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`eslint failed: ${run.stderr}`);
  const results = JSON.parse(run.stdout) as string[][];
  cases.forEach(([file, code], i) => lintCache.set(`${file}\n${code}`, results[i] ?? []));
}

const FORBIDDEN: [string, string][] = [
  ['src/domain/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/domain/x.ts', "import { readFileSync } from 'node:fs';"],
  ['src/domain/x.ts', "import Database from 'better-sqlite3';"],
  ['src/domain/forwarding/x.ts', "import { openStore } from '../../sqlite/store';"],
  ['src/domain/forwarding/x.ts', "import { request } from 'node:http';"],
  ['src/sqlite/x.ts', "import { Pipeline } from '../pipeline/pipeline';"],
  ['src/sqlite/x.ts', "import express from 'express';"],
  ['src/sqlite/x.ts', "import { createApp } from '../http/app';"],
  ['src/http/x.ts', "import { Pipeline } from '../pipeline/pipeline';"],
  ['src/http/admin/x.ts', "import { eventStep } from '../../core/event-step';"],
  ['src/simulator/x.ts', "import { HAPPY_PATH } from '../domain/lifecycle';"],
  ['src/simulator/x.ts', "import { EVENTOS } from '../domain/catalogue';"],
  ['src/simulator/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/simulator/x.ts', "import { sign } from '../domain/signature';"],
  ['src/pipeline/x.ts', "import { createApp } from '../http/app';"],
  ['src/core/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/core/x.ts', "import { pgStoreSql } from '../postgres/pg-statements';"],
  ['src/core/x.ts', "import Database from 'better-sqlite3';"],
  ['src/cluster/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/cluster/x.ts', "import { Pool } from 'pg';"],
  ['src/postgres/x.ts', "import { Relay } from '../cluster/relay';"],
  ['src/postgres/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/registry/x.ts', "import { startReceiver } from '../main';"],
  ['src/http/x.ts', "import { sqliteMode } from '../receiver-mode';"],
  ['src/http/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/http/console/x.ts', "import { isLockBusy } from '../../sqlite/database-errors';"],
  ['src/http/admin/x.ts', "import { pgPoolStorePort } from '../../postgres/pg-port';"],
  ['src/cli/x.ts', "import { openStore } from '../sqlite/store';"],
  ['src/cli/x.ts', "import { withPgCommandStore } from '../postgres/pg-port';"],
  // Anywhere but src/sqlite/sqlite-driver.ts: the package built depends on the Node major.
  ['test/integration/x.test.ts', "import Database from 'better-sqlite3';"],
  ['bench/x.ts', "import Database from 'better-sqlite3-napi';"],
  ['src/sqlite/x.ts', "import Database from 'better-sqlite3';"],
];

const ALLOWED: [string, string][] = [
  ['src/domain/x.ts', "import { isObject } from './json';"],
  ['src/domain/forwarding/x.ts', "import { isObject } from '../json';"],
  ['src/sqlite/x.ts', "import { transition } from '../domain/lifecycle';"],
  ['src/http/x.ts', "import { adminStore } from '../core/store-port';"],
  ['src/cli/x.ts', "import { withCommandStore } from '../open-store';"],
  ['src/cli/demo/x.ts', "import type { Store } from '../../sqlite/store';"],
  ['src/simulator/x.ts', "import { isObject } from '../domain/json';"],
  ['src/main.ts', "import { Pipeline } from './pipeline/pipeline';"],
  ['src/sqlite/x.ts', "import { trackEffects } from '../core/effects';"],
  ['src/main.ts', "import { sqliteMode } from './receiver-mode';"],
  ['src/core/x.ts', "import type { StoreSql } from '../domain/sql/log-sql';"],
  ['src/cluster/x.ts', "import { forwardAdmin } from '../core/forward-admin';"],
  ['src/cluster/x.ts', "import { pgPool } from '../postgres/connection';"],
  ['src/postgres/x.ts', "import { Pool } from 'pg';"],
  ['test/integration/x.test.ts', "import Database from '../../src/sqlite/sqlite-driver';"],
  ['test/integration/x.test.ts', "import type BetterSqlite3 from 'better-sqlite3';"],
];

beforeAll(() => lintAll([...FORBIDDEN, ...ALLOWED]));

it.each(FORBIDDEN)('%s may not: %s', (file, code) => {
  // At least one: domain/ and core/ refuse better-sqlite3 twice (their layer's rule and the driver's).
  expect(restrictedImports(file, code).length).toBeGreaterThanOrEqual(1);
});

it.each(ALLOWED)('%s may: %s', (file, code) => {
  expect(lintCache.has(`${file}\n${code}`)).toBe(true);
  expect(restrictedImports(file, code)).toEqual([]);
});
