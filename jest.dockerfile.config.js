/** The Dockerfile's build and start steps, run outside Docker (slow: a clean `npm ci`). */
const { projects } = require('./jest.config.js');
// The transform settings every tier shares (jest.config.js).
const { transform, transformIgnorePatterns, testEnvironment } = projects[0];
module.exports = {
  testEnvironment,
  transform,
  transformIgnorePatterns,
  roots: ['<rootDir>/test/dockerfile'],
  testMatch: ['**/*.test.ts'],
  testTimeout: 900000,
};
