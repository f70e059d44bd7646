/**
 * The tests in tiers, one jest project each, by what they need beyond Node:
 *
 *   unit, integration, e2e   nothing (Node and its build tools)     `npm test`, the fast tier
 *   postgres                 PostgreSQL's server binaries            `npm run test:all`: every tier
 *   browser                  Chromium (and PostgreSQL for one file)
 *   promtool                 Prometheus's promtool
 *   upgrade                  PostgreSQL, HAProxy, and the previous release built (scripts/build-release.sh)
 *
 * One tier: `npx jest --selectProjects postgres` (build first for e2e: the child processes run
 * dist/). Which file needs what is checked by test/unit/tiers.test.ts. The patterns are regular
 * expressions on the file's path (testRegex), so that test applies them as jest does.
 */

/** The files on PostgreSQL: they take a server through test/helpers/postgres.ts. */
const POSTGRES = [
  '/test/integration/(cluster|pg)-[^/]*\\.test\\.ts$',
  '/test/e2e/cluster-[^/]*\\.test\\.ts$',
  // Both modes in one file: the same checks on SQLite and on PostgreSQL (store-conformance: every
  // store port's behaviours, run against each driver).
  '/test/integration/(console-security|cpf-admin-answers|store-conformance)\\.test\\.ts$',
];
const PROMTOOL = ['/test/integration/alerts\\.test\\.ts$'];
/** The upgrade tier (issue 46 item 5): the previous release built beside this one, HAProxy in front. */
const UPGRADE = ['/test/upgrade/.*\\.test\\.ts$'];

const base = {
  testEnvironment: 'node',
  // ts-jest transpiles only (type-checking is `npm run typecheck`); p-queue and p-timeout are
  // ESM-only, and so are pg-boss (cluster mode) and its ESM dependencies, and openid-client (the
  // console's sign-in through an identity provider) with oauth4webapi and jose: they are transformed
  // to CommonJS too.
  transform: {
    '^.+\\.(t|j)s$': ['ts-jest', { tsconfig: { allowJs: true, isolatedModules: true }, diagnostics: false }],
  },
  modulePathIgnorePatterns: ['<rootDir>/.stryker-tmp/'],
  transformIgnorePatterns: [
    '/node_modules/(?!(p-queue|p-timeout|pg-boss|cron-parser|rrule-temporal|temporal-spec|serialize-error|non-error|tagged-tag|openid-client|oauth4webapi|jose)/)',
  ],
};

/** Never tests of ours: Stryker's sandbox copies of the tree (`npm run test:mutation`, while it runs). */
const IGNORED = ['/node_modules/', '<rootDir>/\\.stryker-tmp/'];

/** A tier: the files under `dir` (or matching `only`), less those of the tiers that need more. */
function tier(displayName, testRegex, except = [], extra = {}) {
  return { ...base, displayName, testRegex, testPathIgnorePatterns: [...IGNORED, ...except], ...extra };
}

/** Each worker's PostgreSQL server, stopped at the end of the run (test/helpers/postgres.ts). */
const withPostgres = {
  globalSetup: '<rootDir>/test/helpers/postgres-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/postgres-teardown.ts',
};

/** @type {import('jest').Config} */
module.exports = {
  projects: [
    tier('unit', ['/test/unit/.*\\.test\\.ts$']),
    tier('integration', ['/test/integration/.*\\.test\\.ts$'], [...POSTGRES, ...PROMTOOL]),
    tier('e2e', ['/test/e2e/.*\\.test\\.ts$'], POSTGRES),
    tier('postgres', POSTGRES, [], withPostgres),
    tier('browser', ['/test/browser/.*\\.test\\.ts$'], [], withPostgres),
    tier('promtool', PROMTOOL),
    tier('upgrade', UPGRADE, [], withPostgres),
  ],
  testTimeout: 60000,
};
