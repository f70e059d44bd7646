import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * Mutation testing and module-level rules (CONTRIBUTING.md, "Mutation testing"; issue 44). What a
 * module does when it loads — its tables, patterns, the functions of an object literal — runs once,
 * before any test: Stryker counts the mutants there as covered by no test ("static") and leaves
 * them out of the run (`ignoreStatic` in stryker.config.mjs). A test file that loads its module
 * again inside each test, with {@link loadedInEachTest}, runs that code inside the test: Stryker
 * then counts those mutants as covered by the file's tests, runs them against those tests only,
 * and each must be killed there.
 *
 * Only the module under test is loaded again: the modules it imports (its value imports, read from
 * its source) are handed over as the test file already has them, so that their own mutants stay
 * with their own tests.
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

/** The module at `path` (absolute, without extension) loaded again, now, its imports shared. */
export function freshModule<T extends object>(path: string): T {
  const file = require.resolve(path);
  const shared = valueImports(file).map((dep) => [dep, jest.requireActual<object>(dep)] as const);
  let loaded: T | undefined;
  jest.isolateModules(() => {
    for (const [dep, exports] of shared) jest.doMock(dep, () => exports);
    loaded = jest.requireActual<T>(file);
  });
  return loaded as T;
}

/**
 * The module at `path` loaded again before each test of the calling file ({@link freshModule});
 * the function answers the running test's copy (outside a test, the one imported). `atLoad` is the same module as the test file
 * imports it (`import * as x from …`): that import is what `jest --findRelatedTests` follows (Stryker
 * runs the tests related to the mutated file, and a file that imports its module only as a type
 * would run for none), and the two must have the same exports.
 */
export function loadedInEachTest<T extends object>(atLoad: T, path: string): () => T {
  let current: T | undefined;
  beforeEach(() => {
    current = freshModule<T>(path);
    if (Object.keys(current).join() !== Object.keys(atLoad).join()) {
      throw new Error(`${path} is not the module imported beside it`);
    }
  });
  // Outside a test (a fixture built when the file loads), the copy imported.
  return () => current ?? atLoad;
}

/**
 * The functions of the module {@link loadedInEachTest} loads, each calling the running test's copy:
 * `const { transition } = callsTo(lifecycle)` reads as an import.
 */
export function callsTo<T extends object>(module: () => T): T {
  return new Proxy({} as T, {
    get:
      (_target, name) =>
      (...args: unknown[]) =>
        (Reflect.get(module(), name) as (...a: unknown[]) => unknown)(...args),
  });
}
