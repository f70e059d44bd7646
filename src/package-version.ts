import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/** The package's version, from the package.json above this file: src/ (tests) or dist/src/ (built); the server and the commands both report it. */
export function packageVersion(): string {
  let dir = __dirname;
  for (let i = 0; i < 5; i++) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'consig-receiver' && pkg.version) return pkg.version;
    }
    dir = resolve(dir, '..');
  }
  return 'unknown';
}
