/**
 * The jest configuration Stryker runs (stryker.config.mjs): the `unit` tier of jest.config.js alone,
 * with the same transform. The mutants are in src/domain/, whose rules the unit tier pins; the
 * other tiers start processes, PostgreSQL or Chromium and would make each mutant cost seconds.
 */
const { projects, testTimeout } = require('./jest.config.js');

const unit = projects.find((p) => p.displayName === 'unit');

/** @type {import('jest').Config} */
module.exports = { ...unit, rootDir: __dirname, testTimeout };
