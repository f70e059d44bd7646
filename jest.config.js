/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/', '/test/dockerfile/'],
  // ts-jest transpiles only (type-checking is `npm run typecheck`); p-queue and p-timeout are
  // ESM-only, and so are pg-boss (cluster mode) and its ESM dependencies: they are transformed to
  // CommonJS too.
  transform: {
    '^.+\\.(t|j)s$': ['ts-jest', { tsconfig: { allowJs: true, isolatedModules: true }, diagnostics: false }],
  },
  transformIgnorePatterns: [
    '/node_modules/(?!(p-queue|p-timeout|pg-boss|cron-parser|rrule-temporal|temporal-spec|serialize-error|non-error|tagged-tag)/)',
  ],
  testTimeout: 60000,
};
