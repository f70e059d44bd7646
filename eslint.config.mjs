// ESLint (flat config) with typescript-eslint; formatting is Prettier's job.
import js from '@eslint/js';
import jest from 'eslint-plugin-jest';
import tseslint from 'typescript-eslint';

// Layering (CONTRIBUTING.md, "Layout"): dependencies point one way,
// main → http, pipeline, registry, cli → store, client, domain. Each block names what a layer must
// not import, with the reason in the message.
const restrict = (...patterns) => ({
  'no-restricted-imports': ['error', { patterns: patterns.map(([regex, message]) => ({ regex, message })) }],
});
const OUTSIDE_DOMAIN = ['^\\.\\./', 'domain/ is pure: it imports nothing outside itself'];
const IO_MODULES = [
  '^(node:)?(fs|net|http|https|child_process|worker_threads|dgram)$|^(better-sqlite3|express|p-queue|pino|raw-body)$',
  'domain/ is pure: no file system, network, database, queue or logger',
];
const NOT_COMPOSITION = [
  '(^|/)(cli|simulator)(/|$)|/(main|receiver-mode)$',
  'only main and the commands compose the application',
];

// Issue 33: one store interface, opened in one place (src/open-store.ts for the commands,
// src/receiver-mode.ts for the server); http/ and cli/ see only the port (core/store-port.ts).
const STORE_THROUGH_PORT = [
  '(^|/)(sqlite|postgres|cluster)(/|$)',
  'http/ and cli/ reach the store only through its port (core/store-port.ts), opened by src/open-store.ts or src/receiver-mode.ts',
];

const POSTGRES_IMPORTS =
  'postgres/ imports only domain/, core/ (written once for both stores), its own files, node: built-ins, pg and pg-boss';
const CLUSTER_IMPORTS =
  'cluster/ imports only domain/, core/, the PostgreSQL adapter (postgres/), its own files, node: built-ins and pg-boss';

const layers = [
  { files: ['src/domain/*.ts'], rules: restrict(OUTSIDE_DOMAIN, IO_MODULES) },
  // A folder inside domain/ may use domain/'s own modules (one level up), nothing further out.
  {
    files: ['src/domain/*/*.ts'],
    rules: restrict(['^\\.\\./\\.\\./', OUTSIDE_DOMAIN[1]], IO_MODULES),
  },
  {
    files: ['src/sqlite/**/*.ts'],
    rules: restrict(
      [
        '(^|/)(http|pipeline|registry|client|cli|simulator)(/|$)|^\\.\\./forwarding(/|$)|/(main|metrics)$',
        'store/ knows no HTTP, queue, processing or client',
      ],
      ['^(express|p-queue|raw-body|node:http|http)$', 'store/ knows no HTTP or queue'],
    ),
  },
  {
    files: ['src/http/**/*.ts'],
    rules: restrict(
      [
        '(^|/)pipeline(/|$)|/core/event-step$',
        'http/ never processes an event: the answer depends only on verify + store',
      ],
      NOT_COMPOSITION,
      STORE_THROUGH_PORT,
    ),
  },
  {
    // The commands open their store with src/open-store.ts (the one factory) and use the facade
    // built from the port. The demo (cli/demo/) drives SQLite mode in process and reads the file it
    // started with, synchronously: its four type imports of sqlite/store.ts are the exception.
    files: ['src/cli/**/*.ts'],
    ignores: ['src/cli/demo/**'],
    rules: restrict(STORE_THROUGH_PORT),
  },
  {
    files: ['src/pipeline/**/*.ts', 'src/registry/**/*.ts', 'src/client/**/*.ts', 'src/forwarding/**/*.ts'],
    rules: restrict(['(^|/)http(/|$)', 'only main wires HTTP to the processing side'], NOT_COMPOSITION),
  },
  {
    files: ['src/simulator/**/*.ts'],
    rules: restrict(
      [
        '(^|/)(store|pipeline|registry|http|client|cli)(/|$)|^\\.\\./forwarding(/|$)|/(main|config|metrics)$',
        "simulator/ is the service's side of the wire: it shares nothing with the receiver's processing",
      ],
      [
        '/domain/(lifecycle|catalogue|registry|delivery|signature|normalize|event-status)$',
        "simulator/ keeps its own description of the service's flows: end-to-end tests prove something only if the two sides were written independently",
      ],
    ),
  },
  {
    // The PostgreSQL adapter (issue 47): beside sqlite/ (the SQLite adapter) as the other store. It
    // uses domain/ and core/ (the code written once for both stores, which knows only domain/) and
    // nothing else of the receiver, and reaches PostgreSQL through pg and pg-boss alone (node:
    // built-ins, always with the prefix).
    files: ['src/postgres/*.ts'],
    rules: restrict(
      ['^\\.\\./(?!domain/|core/)', POSTGRES_IMPORTS],
      ['^(?!\\.|node:|pg$|pg-boss$)', POSTGRES_IMPORTS],
    ),
  },
  {
    // Cluster mode's runtime (issue 13): the relay, the kicks, the node. It runs on the PostgreSQL
    // adapter (postgres/) and pg-boss, with domain/ and core/; main composes it with the SQLite spool
    // (sqlite/spool.ts), passed in as an interface.
    files: ['src/cluster/*.ts'],
    rules: restrict(
      ['^\\.\\./(?!domain/|core/|postgres/)', CLUSTER_IMPORTS],
      ['^(?!\\.|node:|pg-boss$)', CLUSTER_IMPORTS],
    ),
  },
  {
    // Code written once for both stores (issue 24): it reaches the log only through StoreSql
    // (domain/sql/store-sql.ts), whose adapters are sqlite/sqlite-statements.ts and postgres/pg-statements.ts.
    files: ['src/core/**/*.ts'],
    rules: restrict(
      ['^\\.\\./(?!domain/)', 'core/ imports only domain/ and its own files: the stores come in as StoreSql'],
      ['^(?!\\.|node:)', 'core/ imports only domain/ and its own files: the stores come in as StoreSql'],
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
