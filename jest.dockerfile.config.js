/** The Dockerfile's build and start steps, run outside Docker (slow: a clean `npm ci`). */
const base = require('./jest.config.js');
module.exports = {
  ...base,
  testPathIgnorePatterns: ['/node_modules/'],
  testMatch: ['**/test/dockerfile/*.test.ts'],
  testTimeout: 900000,
};
