import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * The test tiers of jest.config.js hold what they say: `npm test` (unit, integration, e2e) needs
 * nothing beyond Node, so no file there may reach PostgreSQL, Chromium or promtool; each file is in
 * exactly one tier, and the others' files need what their tier is named after. What a file needs
 * is read from what it imports, following test/'s own modules: test/helpers/postgres.ts or
 * rigs/local-postgres.ts (a PostgreSQL server), playwright-core (Chromium), a run of promtool, and
 * test/helpers/haproxy.ts (HAProxy: the upgrade tier, which also builds the previous release).
 */

const root = resolve(__dirname, '..', '..');
type Need = 'postgres' | 'browser' | 'promtool' | 'haproxy';

interface Tier {
  displayName: string;
  testRegex: string[];
  testPathIgnorePatterns: string[];
}
// eslint-disable-next-line @typescript-eslint/no-require-imports -- jest's own configuration, CommonJS
const { projects } = require(join(root, 'jest.config.js')) as { projects: Tier[] };

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testFiles(join(dir, e.name)) : e.name.endsWith('.test.ts') ? [join(dir, e.name)] : [],
  );
}

/** The tiers that take `file`, as jest selects them: a testRegex matches and no ignore pattern. */
function tiersOf(file: string): string[] {
  const matches = (patterns: string[]) => patterns.some((p) => new RegExp(p).test(file));
  return projects
    .filter((p) => matches(p.testRegex) && !matches(p.testPathIgnorePatterns))
    .map((p) => p.displayName);
}

const POSTGRES_MODULES = [join(root, 'test/helpers/postgres.ts'), join(root, 'rigs/local-postgres.ts')];
const HAPROXY_MODULE = join(root, 'test/helpers/haproxy.ts');

/** What `file` needs, through its imports of test/'s modules. */
function needsOf(file: string, seen = new Set<string>()): Set<Need> {
  const needs = new Set<Need>();
  if (seen.has(file)) return needs;
  seen.add(file);
  const text = readFileSync(file, 'utf8');
  if (/spawnSync\('promtool'/.test(text)) needs.add('promtool');
  // Import statements only (a line of its own, or the end of a multi-line one), not code in strings.
  const imports = [...text.matchAll(/^(?:import|\}) .*from '([^']+)';$/gm)].map((m) => m[1] as string);
  if (imports.includes('playwright-core')) needs.add('browser');
  for (const spec of imports.filter((i) => i.startsWith('.'))) {
    const target = resolve(dirname(file), `${spec}.ts`);
    if (POSTGRES_MODULES.includes(target)) needs.add('postgres');
    if (target === HAPROXY_MODULE) needs.add('haproxy');
    if (target.startsWith(join(root, 'test'))) for (const n of needsOf(target, seen)) needs.add(n);
  }
  return needs;
}

const files = testFiles(join(root, 'test')).filter((f) => !f.includes('/test/dockerfile/'));
const cases = files.map((f) => [relative(root, f), f] as const);

describe('the test tiers of jest.config.js', () => {
  it('knows every file of test/', () => {
    expect(files.length).toBeGreaterThan(90);
  });

  it.each(cases)('%s is in one tier, which provides what it needs', (_name, file) => {
    const tiers = tiersOf(file);
    expect(tiers).toHaveLength(1);
    const [tier] = tiers as [string];
    const needs = [...needsOf(file)].sort();
    const provides: Record<string, Need[]> = {
      unit: [],
      integration: [],
      e2e: [],
      postgres: ['postgres'],
      browser: ['browser', 'postgres'],
      promtool: ['promtool'],
      upgrade: ['postgres', 'haproxy'],
    };
    expect(needs.filter((n) => !provides[tier]?.includes(n))).toEqual([]);
    // A file is in a slow tier only for what that tier is named after (the upgrade tier: HAProxy).
    if (tier === 'postgres' || tier === 'browser' || tier === 'promtool') expect(needs).toContain(tier);
    if (tier === 'upgrade') expect(needs).toContain('haproxy');
  });
});
