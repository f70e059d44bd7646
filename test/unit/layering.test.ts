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

/**
 * Each layer rule of eslint.config.mjs, shown to bite: a file of that layer (the path is all that
 * places it) with an import the rule forbids, and a word of the message that rule gives.
 */
const FORBIDDEN: [string, string, string][] = [
  // domain/ is pure.
  ['src/domain/x.ts', "import { openStore } from '../sqlite/store';", 'imports nothing outside itself'],
  ['src/domain/x.ts', "import { readFileSync } from 'node:fs';", 'no file system'],
  ['src/domain/x.ts', "import { Pool } from 'pg';", 'no file system, network, database'],
  [
    'src/domain/forwarding/x.ts',
    "import { openStore } from '../../sqlite/store';",
    'imports nothing outside itself',
  ],
  ['src/domain/forwarding/x.ts', "import { request } from 'node:http';", 'no file system'],
  // core/ is written once for both stores: domain/ only.
  ['src/core/x.ts', "import { openStore } from '../sqlite/store';", 'core/ is written once'],
  ['src/core/x.ts', "import { pgStoreSql } from '../postgres/pg-statements';", 'core/ is written once'],
  ['src/core/x.ts', "import { Pipeline } from '../runtime/single/pipeline';", 'core/ is written once'],
  ['src/core/x.ts', "import Database from 'better-sqlite3';", 'core/ is written once'],
  // The adapters, side by side: domain/, core/ and their own driver.
  [
    'src/sqlite/x.ts',
    "import { pgStoreSql } from '../postgres/pg-statements';",
    'sqlite/ is the SQLite adapter',
  ],
  [
    'src/sqlite/x.ts',
    "import { Pipeline } from '../runtime/single/pipeline';",
    'sqlite/ is the SQLite adapter',
  ],
  ['src/sqlite/x.ts', "import { createApp } from '../http/app';", 'sqlite/ is the SQLite adapter'],
  ['src/sqlite/x.ts', "import express from 'express';", 'sqlite/ is the SQLite adapter'],
  ['src/sqlite/x.ts', "import { Pool } from 'pg';", 'sqlite/ is the SQLite adapter'],
  [
    'src/postgres/x.ts',
    "import { openStore } from '../sqlite/store';",
    'postgres/ is the PostgreSQL adapter',
  ],
  [
    'src/postgres/x.ts',
    "import { Relay } from '../runtime/cluster/relay';",
    'postgres/ is the PostgreSQL adapter',
  ],
  [
    'src/postgres/x.ts',
    "import { adminRouter } from '../http/admin/admin-router';",
    'postgres/ is the PostgreSQL adapter',
  ],
  ['src/postgres/x.ts', "import Database from 'better-sqlite3';", 'postgres/ is the PostgreSQL adapter'],
  // The runtimes, side by side: neither imports the other, HTTP or a driver.
  ['src/runtime/single/x.ts', "import { ClusterNode } from '../cluster/node';", 'knows neither cluster mode'],
  [
    'src/runtime/single/x.ts',
    "import { pgPool } from '../../postgres/connection';",
    'knows neither cluster mode',
  ],
  ['src/runtime/single/x.ts', "import { createApp } from '../../http/app';", 'never imports http/'],
  [
    'src/runtime/single/x.ts',
    "import type { Transaction } from 'better-sqlite3';",
    'only sqlite/ names better-sqlite3',
  ],
  [
    'src/runtime/single/x.ts',
    "import Database from '../../sqlite/sqlite-driver';",
    'only sqlite/ names better-sqlite3',
  ],
  [
    'src/runtime/cluster/x.ts',
    "import { Pipeline } from '../single/pipeline';",
    'knows nothing of SQLite mode',
  ],
  [
    'src/runtime/cluster/x.ts',
    "import { InFlightAnswers } from '../../http/webhook-handler';",
    'never imports http/',
  ],
  ['src/runtime/cluster/x.ts', "import { Pool } from 'pg';", 'only postgres/ names node-postgres'],
  ['src/runtime/x.ts', "import { Pipeline } from './single/pipeline';", 'names neither runtime'],
  ['src/runtime/x.ts', "import { ClusterNode } from './cluster/node';", 'names neither runtime'],
  ['src/runtime/x.ts', "import type { AppDeps } from '../http/app-deps';", 'never imports http/'],
  ['src/runtime/x.ts', "import { program } from '../cli/bin';", 'never imports http/'],
  ['src/runtime/sender-worker.ts', "import { createApp } from '../http/app';", 'never imports http/'],
  ['src/runtime/sender-worker.ts', "import { Pool } from 'pg';", 'only postgres/ names node-postgres'],
  // http/ answers from verify + store, through the port: no runtime, adapter or event step.
  ['src/http/admin/x.ts', "import { eventStep } from '../../core/event-step';", 'never processes an event'],
  ['src/http/x.ts', "import { Pipeline } from '../runtime/single/pipeline';", 'only through its port'],
  ['src/http/x.ts', "import { openStore } from '../sqlite/store';", 'only through its port'],
  [
    'src/http/console/x.ts',
    "import { isLockBusy } from '../../sqlite/database-errors';",
    'only through its port',
  ],
  [
    'src/http/admin/x.ts',
    "import { pgPoolStorePort } from '../../postgres/pg-port';",
    'only through its port',
  ],
  ['src/http/x.ts', "import { startReceiver } from '../main';", 'only main and the commands compose'],
  [
    'src/http/x.ts',
    "import { sqliteMode } from '../runtime/single/single-mode';",
    'only main and the commands compose',
  ],
  ['src/http/x.ts', "import { Client } from 'pg';", 'only postgres/ names node-postgres'],
  // The commands: the port, opened by src/open-store.ts.
  ['src/cli/x.ts', "import { openStore } from '../sqlite/store';", 'only through its port'],
  ['src/cli/x.ts', "import { withPgCommandStore } from '../postgres/pg-port';", 'only through its port'],
  ['src/cli/x.ts', "import { ClusterNode } from '../runtime/cluster/node';", 'only through its port'],
  ['src/cli/x.ts', "import { Pool } from 'pg';", 'only postgres/ names node-postgres'],
  ['src/cli/demo/x.ts', "import { openSpool } from '../../sqlite/spool';", 'only through its port'],
  ['src/cli/demo/x.ts', "import { Pipeline } from '../../runtime/single/pipeline';", 'only through its port'],
  // What the runtimes use sits below them.
  [
    'src/forwarding/x.ts',
    "import { ClusterForwarder } from '../runtime/cluster/forwarder';",
    'sit below the runtimes',
  ],
  ['src/client/x.ts', "import { createApp } from '../http/app';", 'sit below the runtimes'],
  ['src/forwarding/x.ts', "import { startReceiver } from '../main';", 'only main and the commands compose'],
  ['src/tracing/x.ts', "import { Pool } from 'pg';", 'only postgres/ names node-postgres'],
  // The simulator and the lender are the other sides of the wires.
  ['src/simulator/x.ts', "import { HAPPY_PATH } from '../domain/lifecycle';", 'its own description'],
  ['src/simulator/x.ts', "import { EVENTOS } from '../domain/catalogue';", 'its own description'],
  ['src/simulator/x.ts', "import { sign } from '../domain/signature';", 'its own description'],
  ['src/simulator/x.ts', "import { openStore } from '../sqlite/store';", "the service's side of the wire"],
  ['src/simulator/x.ts', "import { eventStep } from '../core/event-step';", "the service's side of the wire"],
  ['src/lender/x.ts', "import { sign } from '../domain/forwarding/standard-webhooks';", "the lender's side"],
  // The composition root and its neighbours: no driver, no command.
  ['src/main.ts', "import Database from './sqlite/sqlite-driver';", 'only sqlite/ names better-sqlite3'],
  ['src/open-store.ts', "import { Pool } from 'pg';", 'only postgres/ names node-postgres'],
  ['src/main.ts', "import { program } from './cli/bin';", 'only the commands'],
  // Anywhere but src/sqlite/sqlite-driver.ts: the package built depends on the Node major.
  ['test/integration/x.test.ts', "import Database from 'better-sqlite3';", 'load SQLite through'],
  ['bench/x.ts', "import Database from 'better-sqlite3-napi';", 'load SQLite through'],
  ['src/sqlite/x.ts', "import Database from 'better-sqlite3';", 'load SQLite through'],
];

const ALLOWED: [string, string][] = [
  ['src/domain/x.ts', "import { isObject } from './json';"],
  ['src/domain/forwarding/x.ts', "import { isObject } from '../json';"],
  ['src/core/x.ts', "import type { StoreSql } from '../domain/sql/store-sql';"],
  ['src/sqlite/x.ts', "import { transition } from '../domain/lifecycle';"],
  ['src/sqlite/x.ts', "import { startTracking } from '../core/effects';"],
  ['src/sqlite/x.ts', "import type BetterSqlite3 from 'better-sqlite3';"],
  ['src/postgres/x.ts', "import { forwardAdmin } from '../core/forward-admin';"],
  ['src/postgres/x.ts', "import { Pool } from 'pg';"],
  ['src/postgres/x.ts', "import { PgBoss } from 'pg-boss';"],
  ['src/runtime/single/x.ts', "import { openDatabase } from '../../sqlite/database';"],
  ['src/runtime/single/x.ts', "import { AnswerFirst } from '../answer-first';"],
  ['src/runtime/cluster/x.ts', "import { pgPool } from '../../postgres/connection';"],
  ['src/runtime/cluster/x.ts', "import { openSpool } from '../../sqlite/spool';"],
  ['src/runtime/cluster/x.ts', "import type { Job } from 'pg-boss';"],
  ['src/runtime/x.ts', "import { ForwardSender } from '../forwarding/sender';"],
  ['src/runtime/sender-worker.ts', "import { ClusterForwarder } from './cluster/forwarder';"],
  ['src/http/x.ts', "import { adminStore } from '../core/store-port';"],
  ['src/cli/x.ts', "import { withCommandStore } from '../open-store';"],
  ['src/cli/demo/x.ts', "import type { Store } from '../../sqlite/store';"],
  ['src/simulator/x.ts', "import { isObject } from '../domain/json';"],
  ['src/simulator/x.ts', "import { type SimulatorCore } from './core';"],
  ['src/main.ts', "import { sqliteMode } from './runtime/single/single-mode';"],
  ['src/main.ts', "import { SQLITE_DRIVER } from './sqlite/database';"],
  ['src/open-store.ts', "import { pgPool } from './postgres/connection';"],
  ['test/integration/x.test.ts', "import Database from '../../src/sqlite/sqlite-driver';"],
  ['test/integration/x.test.ts', "import type BetterSqlite3 from 'better-sqlite3';"],
  ['rigs/x.ts', "import { Pool } from 'pg';"],
];

beforeAll(() => lintAll([...FORBIDDEN.map(([file, code]): [string, string] => [file, code]), ...ALLOWED]));

it.each(FORBIDDEN)('%s may not: %s', (file, code, because) => {
  expect(lintCache.has(`${file}\n${code}`)).toBe(true);
  // The rule of that layer bites (a layer may refuse an import twice: its own rule and a driver's).
  expect(restrictedImports(file, code).some((message) => message.includes(because))).toBe(true);
});

it.each(ALLOWED)('%s may: %s', (file, code) => {
  expect(lintCache.has(`${file}\n${code}`)).toBe(true);
  expect(restrictedImports(file, code)).toEqual([]);
});
