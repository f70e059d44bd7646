#!/usr/bin/env node
/**
 * The Docker build stage runs this after `npm run build` and `npm prune --omit=dev`: it removes from
 * node_modules the native code this Node never loads, which pruning keeps (both are dependencies).
 * src/sqlite/sqlite-driver.ts says which better-sqlite3 this Node loads (13.x, `better-sqlite3-napi`,
 * from Node 22 on; 12.x on Node 20): the other one goes. Of the one kept, only the binary it loads
 * stays (its own compiled one, or the prebuilt one for this platform), without the SQLite sources,
 * the C++ sources, the build's objects or the prebuilt binaries for other platforms. It then loads
 * the driver in a fresh process and fails if it no longer opens a database.
 */
const { spawnSync } = require('node:child_process');
const { existsSync, readdirSync, rmSync, statSync } = require('node:fs');
const { join, relative, resolve } = require('node:path');

const root = resolve(__dirname, '..');
const modules = join(root, 'node_modules');

function size(path) {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (!stat) return 0;
  if (!stat.isDirectory()) return stat.size;
  return readdirSync(path).reduce((sum, entry) => sum + size(join(path, entry)), 0);
}

let removed = 0;
function remove(path) {
  if (!existsSync(path)) return;
  removed += size(path);
  console.log(`slim-node-modules: removing ${relative(root, path)}`);
  rmSync(path, { recursive: true, force: true });
}

/** The binary `dir` (a better-sqlite3) loads: its compiled one, else this platform's prebuilt one. */
function loadedBinary(dir) {
  const compiled = join(dir, 'build', 'Release', 'better_sqlite3.node');
  if (existsSync(compiled)) return compiled;
  const binding = join(dir, 'lib', 'binding.js');
  const prebuilt = existsSync(binding) ? require(binding).getPrebuildPath() : null;
  if (prebuilt) return prebuilt;
  throw new Error(`${relative(root, dir)} has no binary for ${process.platform}-${process.arch}`);
}

function main() {
  const { SQLITE_PACKAGE } = require(join(root, 'dist', 'src', 'sqlite', 'sqlite-driver.js'));
  for (const name of ['better-sqlite3', 'better-sqlite3-napi'])
    if (name !== SQLITE_PACKAGE) remove(join(modules, name));

  const dir = join(modules, SQLITE_PACKAGE);
  const binary = loadedBinary(dir);
  for (const part of ['deps', 'src', 'binding.gyp']) remove(join(dir, part));
  for (const folder of ['build', 'prebuilds']) {
    const walk = (path) => {
      if (!existsSync(path)) return;
      if (binary.startsWith(`${path}/`) && statSync(path).isDirectory())
        for (const entry of readdirSync(path)) walk(join(path, entry));
      else if (path !== binary) remove(path);
    };
    walk(join(dir, folder));
  }

  const check = spawnSync(
    process.execPath,
    [
      '-e',
      `const D = require(${JSON.stringify(SQLITE_PACKAGE)}); new D(':memory:').prepare('SELECT 1').get();`,
    ],
    { cwd: root, encoding: 'utf8' },
  );
  if (check.status !== 0) throw new Error(`${SQLITE_PACKAGE} no longer loads: ${check.stderr.trim()}`);
  console.log(`slim-node-modules: kept ${relative(root, binary)}; removed ${(removed / 1e6).toFixed(1)} MB`);
}

main();
