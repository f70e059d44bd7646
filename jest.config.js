/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/', '/test/dockerfile/'],
  transform: { '^.+\\.(t|j)s$': ['@swc/jest', { jsc: { target: 'es2022' }, module: { type: 'commonjs' } }] },
  // p-queue and p-timeout are ESM-only; let swc turn them into CommonJS for jest.
  transformIgnorePatterns: ['/node_modules/(?!(p-queue|p-timeout)/)'],
  testTimeout: 60000,
};
