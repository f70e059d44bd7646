import type BetterSqlite3 from 'better-sqlite3';

/**
 * Which better-sqlite3 to load. 12.x wraps its objects in Node's raw `ObjectWrap`; on Node ≥ 24.19
 * the garbage collector finalising a statement or database can abort the process
 * (`RemoveEnvironmentCleanupHook: Assertion failed: (env) != nullptr`, WiseLibs/better-sqlite3#1515).
 * 13.x moved to Node-API and does not, but it crashes on Node 20, which this project still
 * supports. So: 13.x (installed as `better-sqlite3-napi`) on Node ≥ 22, 12.x on Node 20. Both have
 * the same API.
 */
const major = Number(process.versions.node.split('.')[0]);

export const SQLITE_DRIVER = major >= 22 ? 'better-sqlite3@13 (Node-API)' : 'better-sqlite3@12';

/** The package this Node loads (the Docker build removes the other: scripts/slim-node-modules.js). */
export const SQLITE_PACKAGE = major >= 22 ? 'better-sqlite3-napi' : 'better-sqlite3';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the module is chosen at run time
const Database: typeof BetterSqlite3 = require(SQLITE_PACKAGE);

export default Database;
