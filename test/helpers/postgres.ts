import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { Client, Pool } from 'pg';
import {
  loadPgMigrations,
  migratePostgres,
  type MigratePostgresOptions,
  type PgMigration,
} from '../../src/postgres/pg-migrate';
import { migrationFolder } from '../../src/core/migration-folder';
import { migrationFileName } from '../../src/domain/migration-files';
import ts from 'typescript';
import { type LocalPostgres, type LocalPostgresOptions, startLocalPostgres } from '../../rigs/local-postgres';

/**
 * PostgreSQL for the tests (startLocalPostgres; never skipped — without the binaries it fails with
 * the install hint), one fresh database per test. A test file takes its jest worker's server
 * ({@link workerPostgres}), started at the worker's first use and kept until the end of the run;
 * a file that restarts or kills its server, or needs other settings, starts its own
 * ({@link startTestPostgres}).
 */

export const REPO = resolve(__dirname, '../..');

/**
 * Set by the postgres tiers' globalSetup (test/helpers/postgres-setup.ts): the folder where each
 * worker records its server, for the globalTeardown to stop them all. jest gives every test file a
 * fresh copy of the modules (and of `process`, whose exit listeners never run), so a worker finds
 * its server again through this record, named after its pid.
 */
export const RUN_DIR_ENV = 'CONSIG_TEST_PG_RUN';

interface WorkerServer {
  url: string;
  port: number;
  dir: string;
  dataDir: string;
  logFile: string;
}

/** A server of the file's own; `fast` (no fsync) unless the test needs durability. Stop it in afterAll. */
export function startTestPostgres(options: LocalPostgresOptions = { fast: true }): Promise<LocalPostgres> {
  return startLocalPostgres(options);
}

/**
 * The jest worker's server (fast: no fsync; test files run one at a time in a worker, so they never
 * share it at once). Its `stop()` keeps the server and drops the databases made since this call,
 * closing what connections the file left open; `restart` and `kill9` throw: a test that needs them
 * starts its own server. Outside a run with the globalSetup (no {@link RUN_DIR_ENV}), the server
 * is the file's and `stop()` stops it.
 */
export async function workerPostgres(): Promise<LocalPostgres> {
  const runDir = process.env[RUN_DIR_ENV];
  if (!runDir) return startLocalPostgres({ fast: true });
  const record = join(runDir, `worker-${process.pid}.json`);
  let server: WorkerServer;
  if (existsSync(record)) {
    server = JSON.parse(readFileSync(record, 'utf8')) as WorkerServer;
  } else {
    const pg = await startLocalPostgres({ fast: true, settings: { max_connections: 200 } });
    server = { url: pg.url, port: pg.port, dir: pg.dir, dataDir: pg.dataDir, logFile: pg.logFile };
    writeFileSync(record, JSON.stringify(server));
  }
  const before = new Set(await databaseNames(server.url));
  const refuse = (what: string) => () => {
    throw new Error(
      `${what} on the worker's shared PostgreSQL: start a server of the file's own (startTestPostgres)`,
    );
  };
  return {
    ...server,
    async stop() {
      const mine = (await databaseNames(server.url)).filter((name) => !before.has(name));
      await withClient(server.url, async (c) => {
        for (const name of mine) await c.query(`DROP DATABASE "${name}" WITH (FORCE)`);
      });
    },
    restart: refuse('restart'),
    kill9: refuse('kill9'),
    halt: refuse('halt'),
  };
}

async function databaseNames(url: string): Promise<string[]> {
  return withClient(url, async (c) =>
    (await c.query<{ datname: string }>('SELECT datname FROM pg_database')).rows.map((r) => r.datname),
  );
}

/** Creates an empty database on the server and returns its URL (a unique name: servers outlive files). */
export async function createTestDatabase(pg: LocalPostgres, prefix = 'test'): Promise<string> {
  const name = `${prefix}_${process.pid}_${randomInt(2 ** 40)}`;
  await withClient(pg.url, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(pg.url);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs `fn` on a connection of its own, closed afterwards. */
export async function withClient<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Transpiles `entry` (a path from the repository root) and the relative imports it reaches into
 * `outDir`, with the project's TypeScript, so a child `node` runs the sources under test (not a
 * possibly stale `dist/`) and starts in milliseconds (no TypeScript to load). Returns the entry's
 * `.js` path; packages resolve from the repository's node_modules through NODE_PATH (runNode).
 */
export function transpileForChild(entry: string, outDir: string): string {
  const seen = new Set<string>();
  const visit = (source: string): void => {
    if (seen.has(source)) return;
    seen.add(source);
    const { outputText } = ts.transpileModule(readFileSync(source, 'utf8'), {
      fileName: source,
      compilerOptions: {
        module: ts.ModuleKind.CommonJS,
        target: ts.ScriptTarget.ES2022,
        esModuleInterop: true,
      },
    });
    const target = join(outDir, relative(REPO, source)).replace(/\.ts$/, '.js');
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
    for (const [, spec] of outputText.matchAll(/require\("(\.{1,2}\/[^"]+)"\)/g))
      visit(resolve(dirname(source), `${spec}.ts`));
  };
  visit(resolve(REPO, entry));
  return join(outDir, entry).replace(/\.ts$/, '.js');
}

export interface ChildResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `script` (CommonJS) in a child node that finds the repository's packages. */
export function runNode(script: string, env: Record<string, string> = {}): Promise<ChildResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, ['-e', script], {
      cwd: REPO,
      env: { PATH: process.env.PATH ?? '', NODE_PATH: join(REPO, 'node_modules'), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolvePromise({ code, stdout, stderr }));
  });
}

/** A migrations folder in `dir`: the real files of migrations-pg/, then `extra` (file name → SQL). */
export function pgMigrationsWith(dir: string, extra: Record<string, string> = {}): string {
  const real = migrationFolder('migrations-pg');
  for (const m of loadPgMigrations(real))
    copyFileSync(join(real, migrationFileName(m)), join(dir, migrationFileName(m)));
  for (const [file, sql] of Object.entries(extra)) writeFileSync(join(dir, file), sql);
  return dir;
}

/** migratePostgres on a pool of its own to `url`, ended after it (a replica migrates on its pool). */
export async function migrateUrl(url: string, options?: MigratePostgresOptions): Promise<PgMigration[]> {
  const pool = new Pool({ connectionString: url, max: 1 });
  pool.on('error', () => {});
  try {
    return await migratePostgres(pool, options);
  } finally {
    await pool.end();
  }
}

/** What a migrator child prints: the versions it applied and what it logged. */
export interface MigratorReport {
  applied: number[];
  logged: string[];
}

/**
 * A separate process running migratePostgres on a pool of its own, as a replica does when it starts.
 * `module` is transpileForChild('src/postgres/pg-migrate.ts', …).
 */
export async function runMigratorProcess(module: string, url: string, dir: string): Promise<MigratorReport> {
  const result = await runNode(
    `
const { migratePostgres } = require(process.env.MIGRATE_MODULE);
const { Pool } = require('pg');
const logged = [];
const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
migratePostgres(pool, {
  dir: process.env.MIGRATIONS_DIR,
  logger: { info: (_fields, message) => logged.push(message), warn: (_fields, message) => logged.push(message) },
}).finally(() => pool.end()).then(
  (applied) => console.log(JSON.stringify({ applied: applied.map((m) => m.version), logged })),
  (err) => { console.error(err.message); process.exit(1); },
);
`,
    { DATABASE_URL: url, MIGRATIONS_DIR: dir, MIGRATE_MODULE: module },
  );
  if (result.code !== 0) throw new Error(`migrator exited ${result.code}: ${result.stderr}`);
  return JSON.parse(result.stdout) as MigratorReport;
}
