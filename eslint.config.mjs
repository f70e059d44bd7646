// ESLint (flat config) with typescript-eslint; formatting is Prettier's job.
import js from '@eslint/js';
import jest from 'eslint-plugin-jest';
import tseslint from 'typescript-eslint';

// Layering (CONTRIBUTING.md, "Layout"): dependencies point one way,
//   cli → main → http, runtime → sqlite, postgres, forwarding, client → core → domain
// (the runtimes side by side, each on its store's adapter; the adapters side by side, each the only
// code that names its driver). Each block names what a layer must not import, with the reason in
// the message. One block per file: ESLint keeps only the last `no-restricted-imports` that matches a
// file, so every block lists all of its layer's patterns (the drivers' too).
const restrict = (...patterns) => ({
  'no-restricted-imports': ['error', { patterns: patterns.map(([regex, message]) => ({ regex, message })) }],
});

// The drivers: only the adapters name them (issue 47).
const NOT_PG = [
  '^pg$',
  'only postgres/ names node-postgres (pg): the rest reaches PostgreSQL through the adapter (postgres/connection.ts, the store port)',
];
const NOT_SQLITE = [
  '^better-sqlite3(-napi)?$|(^|/)sqlite-driver$',
  'only sqlite/ names better-sqlite3 (sqlite/sqlite-driver.ts picks the build): the rest reaches SQLite through the adapter (sqlite/database.ts, the store port)',
];

const OUTSIDE_DOMAIN = ['^\\.\\./', 'domain/ is pure: it imports nothing outside itself'];
const IO_MODULES = [
  '^(node:)?(fs|net|http|https|child_process|worker_threads|dgram)$|^(better-sqlite3|better-sqlite3-napi|pg|pg-boss|express|p-queue|pino|raw-body|undici)$',
  'domain/ is pure: no file system, network, database, queue or logger',
];
const CORE_ONLY_DOMAIN =
  'core/ is written once for both stores: it imports only domain/ and its own files, and the stores come in as StoreSql';
const SQLITE_IMPORTS =
  'sqlite/ is the SQLite adapter: it imports only domain/, core/ (written once for both stores), its own files, node: built-ins and better-sqlite3; never postgres/, a runtime or http/';
const POSTGRES_IMPORTS =
  'postgres/ is the PostgreSQL adapter: it imports only domain/, core/ (written once for both stores), its own files, node: built-ins, pg and pg-boss; never sqlite/, a runtime or http/';
const NOT_COMPOSITION = [
  '(^|/)(cli|simulator)(/|$)|/(main|receiver-mode|single-mode|cluster-mode)$',
  'only main and the commands compose the application (a mode is composed in src/runtime/, for main)',
];
// Issue 33: one store interface, opened in one place (src/open-store.ts for the commands, each mode
// in src/runtime/ for the server); http/ and cli/ see only the port (core/store-port.ts).
const THROUGH_PORT = [
  '(^|/)(sqlite|postgres|runtime)(/|$)',
  'http/ and cli/ reach the store only through its port (core/store-port.ts), opened by src/open-store.ts or the runtime, and never a runtime',
];
const RUNTIME_NOT_HTTP = [
  '(^|/)(http|cli|simulator)(/|$)|/main$',
  'a runtime runs the processing side: it never imports http/ (main wires HTTP to it) nor the commands',
];
const SINGLE_ALONE = [
  '(^|/)(cluster|postgres)(/|$)',
  "runtime/single/ is SQLite mode's runtime: it knows neither cluster mode's (runtime/cluster/) nor PostgreSQL",
];
const CLUSTER_ALONE = [
  '(^|/)single(/|$)',
  "runtime/cluster/ is cluster mode's runtime: it knows nothing of SQLite mode's (runtime/single/)",
];
const SHARED_NEITHER = [
  '^\\./(single|cluster)/',
  'what both runtimes use (src/runtime/*.ts) names neither runtime',
];

const layers = [
  { files: ['src/domain/*.ts'], rules: restrict(OUTSIDE_DOMAIN, IO_MODULES) },
  // A folder inside domain/ may use domain/'s own modules (one level up), nothing further out.
  {
    files: ['src/domain/*/*.ts'],
    rules: restrict(['^\\.\\./\\.\\./', OUTSIDE_DOMAIN[1]], IO_MODULES),
  },
  {
    // Code written once for both stores (issue 24): it reaches the log only through StoreSql
    // (domain/sql/store-sql.ts), whose adapters are sqlite/sqlite-statements.ts and postgres/pg-statements.ts.
    files: ['src/core/**/*.ts'],
    rules: restrict(['^\\.\\./(?!domain/)', CORE_ONLY_DOMAIN], ['^(?!\\.|node:)', CORE_ONLY_DOMAIN]),
  },
  {
    // The two adapters, side by side (issue 47): each on domain/ and core/ alone, and its own driver.
    files: ['src/sqlite/**/*.ts'],
    rules: restrict(
      ['^\\.\\./(?!domain/|core/)', SQLITE_IMPORTS],
      ['^(?!\\.|node:|better-sqlite3$)', SQLITE_IMPORTS],
    ),
  },
  {
    files: ['src/postgres/**/*.ts'],
    rules: restrict(
      ['^\\.\\./(?!domain/|core/)', POSTGRES_IMPORTS],
      ['^(?!\\.|node:|pg$|pg-boss$)', POSTGRES_IMPORTS],
    ),
  },
  {
    // The two runtimes, side by side (issue 47). SQLite mode's runs on the SQLite adapter; cluster
    // mode's on the PostgreSQL adapter and, for its spool, the SQLite one.
    files: ['src/runtime/single/**/*.ts'],
    rules: restrict(RUNTIME_NOT_HTTP, SINGLE_ALONE, NOT_PG, NOT_SQLITE),
  },
  {
    files: ['src/runtime/cluster/**/*.ts'],
    rules: restrict(RUNTIME_NOT_HTTP, CLUSTER_ALONE, NOT_PG, NOT_SQLITE),
  },
  {
    // What both use: the mode interface, answer-first, the retention schedule, the sender's thread.
    // The thread's worker (sender-worker.ts) is that thread's composition root: it runs SQLite
    // mode's sender or cluster mode's forwarder (runtime/cluster/forwarder.ts), whichever the store is.
    files: ['src/runtime/*.ts'],
    ignores: ['src/runtime/sender-worker.ts'],
    rules: restrict(RUNTIME_NOT_HTTP, SHARED_NEITHER, NOT_PG, NOT_SQLITE),
  },
  { files: ['src/runtime/sender-worker.ts'], rules: restrict(RUNTIME_NOT_HTTP, NOT_PG, NOT_SQLITE) },
  {
    files: ['src/http/**/*.ts'],
    rules: restrict(
      ['/core/event-step$', 'http/ never processes an event: the answer depends only on verify + store'],
      NOT_COMPOSITION,
      THROUGH_PORT,
      NOT_PG,
      NOT_SQLITE,
    ),
  },
  {
    // The commands open their store with src/open-store.ts (the one factory) and use the facade
    // built from the port.
    files: ['src/cli/**/*.ts'],
    ignores: ['src/cli/demo/**'],
    rules: restrict(THROUGH_PORT, NOT_PG, NOT_SQLITE),
  },
  {
    // The demo drives SQLite mode in process and reads the file it started with, synchronously: its
    // type imports of sqlite/store.ts (Receiver.store) are the exception to the port.
    files: ['src/cli/demo/**/*.ts'],
    rules: restrict(
      ['(^|/)(postgres|runtime)(/|$)|(^|/)sqlite/(?!store$)', THROUGH_PORT[1]],
      NOT_PG,
      NOT_SQLITE,
    ),
  },
  {
    // The sender and the service's client: the runtimes use them, never the other way round.
    files: ['src/client/**/*.ts', 'src/forwarding/**/*.ts', 'src/tracing/**/*.ts'],
    rules: restrict(
      [
        '(^|/)(http|runtime)(/|$)',
        'client/, forwarding/ and tracing/ sit below the runtimes and HTTP: only main and the runtimes wire them',
      ],
      NOT_COMPOSITION,
      NOT_PG,
      NOT_SQLITE,
    ),
  },
  {
    files: ['src/simulator/**/*.ts'],
    rules: restrict(
      [
        '^\\.\\./(sqlite|postgres|runtime|core|http|client|cli|forwarding)(/|$)|/(main|config|metrics)$',
        "simulator/ is the service's side of the wire: it shares nothing with the receiver's processing",
      ],
      [
        '/domain/(lifecycle|catalogue|registry|delivery|signature|normalize|event-status)$',
        "simulator/ keeps its own description of the service's flows: end-to-end tests prove something only if the two sides were written independently",
      ],
      NOT_PG,
      NOT_SQLITE,
    ),
  },
  {
    // The lender's side of the forwarding wire: an example a lender's engineer copies, verifying with
    // the standardwebhooks library. It imports nothing of the receiver (its store, processing,
    // forwarding, HTTP, configuration, nor domain/forwarding's signing), or the demo would only
    // check the receiver against itself.
    files: ['src/lender/**/*.ts'],
    rules: restrict([
      '^\\.\\./',
      "lender/ is the lender's side of the wire: it imports nothing of the receiver (only node: and standardwebhooks)",
    ]),
  },
  {
    // The composition root and what it shares with the commands (main.ts, open-store.ts, config, …).
    files: ['src/*.ts'],
    rules: restrict(['(^|/)cli(/|$)', 'only the commands (cli/) import the commands'], NOT_PG, NOT_SQLITE),
  },
];

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', 'data/', 'reports/', '.stryker-tmp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        Buffer: 'readonly',
        console: 'readonly',
        __dirname: 'readonly',
        require: 'readonly',
        module: 'writable',
        setImmediate: 'readonly',
        clearImmediate: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        performance: 'readonly',
        fetch: 'readonly',
        URL: 'readonly',
        TextDecoder: 'readonly',
        ReadableStream: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  ...layers,
  {
    // A committed `.only` (`fit`, `fdescribe`) would run one test and pass CI with the rest unrun;
    // a `.skip` (`xit`) hides a test the same way: neither is ours to commit (issue 37).
    files: ['test/**/*.ts'],
    plugins: { jest },
    rules: { 'jest/no-focused-tests': 'error', 'jest/no-disabled-tests': 'error' },
  },
  {
    // Which better-sqlite3 runs depends on the Node major (src/sqlite/sqlite-driver.ts: 13.x from Node
    // 22, 12.x on 20), and only the one in use is built: a test that loads the package itself fails
    // on the other Nodes (as one did in CI on Node 24 and 26). Types may come from it.
    files: ['src/**/*.ts', 'test/**/*.ts', 'bench/**/*.ts'],
    ignores: ['src/sqlite/sqlite-driver.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: ['better-sqlite3', 'better-sqlite3-napi'].map((name) => ({
            name,
            allowTypeImports: true,
            message:
              "load SQLite through src/sqlite/sqlite-driver.ts (its default export): it picks the package this Node's build has",
          })),
        },
      ],
    },
  },
  {
    // A reader sees a function's whole job on one screen; one that must stay longer says why in an
    // eslint-disable comment.
    files: ['src/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }] },
  },
);
