import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * Mutation testing and module-level rules (CONTRIBUTING.md, "Mutation testing"; issue 44).
 *
 * What a module does when it loads (its tables, patterns, the functions of an object literal)
 * runs once, before any test. Stryker records which tests reach each mutant; a mutant reached
 * outside any test is "static", and `ignoreStatic` (stryker.config.mjs) leaves it out of the run.
 * A test file that calls {@link loadAgainInEachTest} has its module's top level run again inside
 * each of its tests: Stryker then counts those mutants as reached by these tests, and runs them
 * against these tests alone, as any other mutant.
 *
 * The copy loaded again is not used: Stryker activates a mutant for the whole run of the tests,
 * before any module loads, so the copy the test file imported is mutated the same (its classes
 * stay those the tests name). What matters is the load inside the test. Only the module itself
 * runs again: the modules it imports values from (read from its source) are handed over as the
 * test file has them, so that their own top level stays with their own tests.
 */

/** The relative modules `file` imports values from (`import type` is erased, so not loaded). */
function valueImports(file: string): string[] {
  const source = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of source.matchAll(/^import\s+(?!type\s)[^;]*?\sfrom\s+'(\.{1,2}\/[^']+)';/gm)) {
    found.push(resolve(dirname(file), m[1] as string));
  }
  return found;
}

/** Runs the module at `path` (absolute, without extension) again, now, its imports shared. */
function loadAgain(path: string): object {
  const file = require.resolve(path);
  const shared = valueImports(file).map((dep) => [dep, jest.requireActual<object>(dep)] as const);
  let loaded: object | undefined;
  jest.isolateModules(() => {
    for (const [dep, exports] of shared) jest.doMock(dep, () => exports);
    loaded = jest.requireActual<object>(file);
  });
  return loaded as object;
}

/**
 * Runs the module at `path` again before each test of the calling file. `atLoad` is that module
 * as the file imports it (`import * as x from …`): the import is what `jest --findRelatedTests`
 * follows (Stryker runs the tests related to the file it mutates, and a test file that imported
 * its module as a type only would run for none), and the two must have the same exports.
 */
export function loadAgainInEachTest(atLoad: object, path: string): void {
  beforeEach(() => {
    const again = loadAgain(path);
    if (Object.keys(again).join() !== Object.keys(atLoad).join()) {
      throw new Error(`${path} is not the module imported beside it`);
    }
  });
}
