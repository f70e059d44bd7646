import { mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { tempDir } from '../helpers/tmp';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- a plain CommonJS script, run by `npm start`
const { staleness } = require('../../scripts/build-if-stale.js') as {
  staleness: (root: string) => string | null;
};

/**
 * `npm start` builds only a tree whose dist/ is missing or older than a source (issue 25): a built
 * tree starts at once. The times are set by hand (no clock involved): a build at T, sources before.
 */

let tmp: ReturnType<typeof tempDir>;
const T = new Date('2026-01-01T12:00:00Z');
const before = new Date(T.getTime() - 60_000);
const after = new Date(T.getTime() + 60_000);

function file(path: string, at: Date): void {
  const full = join(tmp.dir, path);
  mkdirSync(dirname(full), { recursive: true });
  writeFileSync(full, '');
  // The file and the folders mkdir made or changed: each has the time of this change.
  for (let p = full; p !== tmp.dir; p = dirname(p)) utimesSync(p, at, at);
}

beforeEach(() => {
  tmp = tempDir('consig-stale-');
  file('tsconfig.json', before);
  file('tsconfig.build.json', before);
  file('src/cli/bin.ts', before);
  file('bench/run.ts', before);
});
afterEach(() => tmp.cleanup());

it('builds when dist/ is missing', () => {
  expect(staleness(tmp.dir)).toBe('dist/src/cli/bin.js is missing');
});

it('does not build a tree built after its last change', () => {
  file('dist/src/cli/bin.js', T);
  expect(staleness(tmp.dir)).toBeNull();
});

it.each([
  ['a source edited', 'src/cli/bin.ts', 'src'],
  ['a source added', 'src/sqlite/new-table.ts', 'src'],
  ['a benchmark edited', 'bench/run.ts', 'bench'],
  ['the compiler settings', 'tsconfig.json', 'tsconfig.json'],
])('builds again after %s', (_what, path, named) => {
  file('dist/src/cli/bin.js', T);
  file(path, after);
  expect(staleness(tmp.dir)).toBe(`${named} is newer than the build`);
});
