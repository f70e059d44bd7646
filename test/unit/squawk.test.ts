import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { loadPgMigrations } from '../../src/postgres/pg-migrate';
import { migrationFolder } from '../../src/core/migration-folder';
import { migrationFileName } from '../../src/domain/migration-files';
import { tempDir } from '../helpers/tmp';

/**
 * squawk, the PostgreSQL migration linter, over migrations-pg/ with the repository's .squawk.toml
 * (issue 46, item 2): every file clean, files in a transaction linted as such and
 * `-- migrate: outside-transaction` files as run alone. The config's exceptions are the files
 * released before squawk ran, each with its reason; a new file gets none.
 */

const ROOT = join(__dirname, '..', '..');
const CONFIG = join(ROOT, '.squawk.toml');
const SQUAWK = join(ROOT, 'node_modules', '.bin', 'squawk');
/** The first migration written to pass squawk: the ones before it are released and never edited. */
const FIRST_LINTED = 13;

/** squawk's findings, one `file:line:col: warning: rule …` line each; [] when clean. */
function squawk(files: readonly string[], inTransaction: boolean): string[] {
  if (files.length === 0) return [];
  const args = [
    '-c',
    CONFIG,
    '--reporter',
    'gcc',
    ...(inTransaction ? ['--assume-in-transaction'] : []),
    ...files,
  ];
  try {
    execFileSync(SQUAWK, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return [];
  } catch (err) {
    const { stdout, status } = err as { stdout: string; status: number };
    if (status !== 1) throw err;
    return stdout.split('\n').filter((line) => /: (warning|error): /.test(line));
  }
}

/** Lints a folder as the runner applies it: each file by its mode. */
function lintFolder(dir: string): string[] {
  const files = loadPgMigrations(dir).map((m) => ({
    path: relative(ROOT, join(dir, migrationFileName(m))),
    mode: m.mode,
  }));
  return [
    ...squawk(
      files.filter((f) => f.mode === 'transaction').map((f) => f.path),
      true,
    ),
    ...squawk(
      files.filter((f) => f.mode === 'outside-transaction').map((f) => f.path),
      false,
    ),
  ];
}

/** The paths .squawk.toml excludes, each with the comment lines above it. */
function exclusions(): { path: string; reason: string }[] {
  const text = readFileSync(CONFIG, 'utf8');
  const list = /excluded_paths = \[\n([\s\S]*?)\n\]/.exec(text)?.[1] ?? '';
  const out: { path: string; reason: string }[] = [];
  let reason: string[] = [];
  for (const line of list.split('\n').map((l) => l.trim())) {
    if (line.startsWith('#')) reason.push(line.slice(1).trim());
    else if (line.startsWith('"')) {
      out.push({ path: JSON.parse(line.replace(/,$/, '')) as string, reason: reason.join(' ') });
      reason = [];
    }
  }
  return out;
}

it('migrations-pg/ is clean under .squawk.toml', () => {
  expect(lintFolder(migrationFolder('migrations-pg'))).toEqual([]);
});

it('excludes released files only, each with its reason', () => {
  const excluded = exclusions();
  expect(excluded.length).toBeGreaterThan(0);
  for (const { path, reason } of excluded) {
    expect({ path, version: Number(/\/(\d{4})_/.exec(path)?.[1]) < FIRST_LINTED }).toEqual({
      path,
      version: true,
    });
    expect({ path, reasoned: reason.length >= 40 }).toEqual({ path, reasoned: true });
  }
  // The runner's released list ends before squawk began; the first linted file is the next one.
  expect(
    loadPgMigrations()
      .filter((m) => m.version >= FIRST_LINTED)
      .every((m) => !excluded.some((e) => e.path.endsWith(migrationFileName(m)))),
  ).toBe(true);
});

describe('bites on a new file', () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir('consig-squawk-');
  });
  afterEach(() => tmp.cleanup());

  /** A folder of one migration numbered past the linted bound, as a new file would be. */
  function lintOne(sql: string): string[] {
    for (let v = 1; v < FIRST_LINTED; v++)
      writeFileSync(join(tmp.dir, `${String(v).padStart(4, '0')}_x.sql`), '-- compat: previous\nSELECT 1;\n');
    writeFileSync(join(tmp.dir, `${String(FIRST_LINTED).padStart(4, '0')}_new.sql`), sql);
    return lintFolder(tmp.dir).filter((line) => line.includes(`${FIRST_LINTED}_new.sql`));
  }

  it.each([
    [
      'an index built in a transaction',
      '-- compat: previous\nCREATE INDEX events_x ON events (id);',
      'require-concurrent-index-creation',
    ],
    [
      'a column type changed (a rewrite under ACCESS EXCLUSIVE)',
      '-- compat: breaking\nALTER TABLE events ALTER COLUMN kind TYPE varchar(20);',
      'changing-column-type',
    ],
    [
      'a NOT NULL column added to a live table',
      '-- compat: breaking\nALTER TABLE events ADD COLUMN x text NOT NULL;',
      'adding-required-field',
    ],
    [
      'a constraint validated under the lock',
      '-- compat: previous\nALTER TABLE events ADD CONSTRAINT x CHECK (id > 0);',
      'constraint-missing-not-valid',
    ],
  ])('%s', (_what, sql, rule) => {
    expect(lintOne(sql).join('\n')).toContain(rule);
  });

  it.each([
    [
      'an index CONCURRENTLY, outside a transaction',
      '-- compat: previous\n-- migrate: outside-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS events_x ON events (id);',
    ],
    ['a nullable column', '-- compat: previous\nALTER TABLE events ADD COLUMN x text;'],
    [
      'a constraint NOT VALID',
      '-- compat: previous\nALTER TABLE events ADD CONSTRAINT x CHECK (id > 0) NOT VALID;',
    ],
  ])('passes %s', (_what, sql) => {
    expect(lintOne(sql)).toEqual([]);
  });
});
