#!/usr/bin/env node
/**
 * `npm start` and `npm run demo` run this first: it builds (`npm run build`'s tsc) only when dist/ is
 * missing or older than a source, so a built tree starts at once, and a configuration error shows
 * at once instead of after a build. The build's age is that of dist/src/cli/bin.js: tsc rewrites
 * every output on each build, and a failed build removes it, so the next start builds again rather
 * than run what a broken build emitted.
 */
const { spawnSync } = require('node:child_process');
const { existsSync, readdirSync, rmSync, statSync } = require('node:fs');
const { join, resolve } = require('node:path');

/** What the build reads: tsconfig.build.json's `include`, and the configuration it extends. */
const INPUTS = ['src', 'bench', 'tsconfig.json', 'tsconfig.build.json'];
const OUTPUT = join('dist', 'src', 'cli', 'bin.js');

function newestMtime(path) {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs; // a file removed or renamed changes its directory
  for (const entry of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, entry)));
  return newest;
}

/** Why `root` needs a build, or null when dist/ is up to date. */
function staleness(root) {
  const output = join(root, OUTPUT);
  if (!existsSync(output)) return `${OUTPUT} is missing`;
  const built = statSync(output).mtimeMs;
  const changed = INPUTS.map((p) => join(root, p)).find((p) => existsSync(p) && newestMtime(p) > built);
  return changed === undefined ? null : `${changed.slice(root.length + 1)} is newer than the build`;
}

function main() {
  const root = resolve(__dirname, '..');
  const reason = staleness(root);
  if (reason === null) return 0;
  process.stderr.write(`build-if-stale: ${reason}; building\n`);
  const tsc = require.resolve('typescript/bin/tsc', { paths: [root] });
  const build = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], {
    cwd: root,
    stdio: 'inherit',
  });
  if (build.status === 0) return 0;
  rmSync(join(root, OUTPUT), { force: true });
  return build.status ?? 1;
}

module.exports = { staleness };

if (require.main === module) process.exitCode = main();
