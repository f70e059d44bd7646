import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as Compat from '../../../src/domain/migration-compat';
import {
  declaredCompat,
  LAST_UNMARKED,
  migrationCompat,
  RELEASED_COMPAT,
  schemaHold,
  schemaVerdict,
  type AppliedCompat,
  type SchemaState,
} from '../../../src/domain/migration-compat';
import { MigrationError } from '../../../src/domain/errors';
import { migrationFolder } from '../../../src/core/migration-folder';
import { orderMigrationFiles } from '../../../src/domain/migration-files';
import { loadAgainInEachTest } from './fresh-module';

/** Mixed versions on one PostgreSQL (issue 46, item 1): each migration's compat, and run or refuse. */

loadAgainInEachTest(Compat, join(__dirname, '../../../src/domain/migration-compat'));

describe('declaredCompat: the first line', () => {
  it.each([
    ['-- compat: previous\nCREATE TABLE a (n int);', 'previous'],
    ['-- compat: breaking\nALTER TABLE a DROP n;', 'breaking'],
    ['-- compat: previous', 'previous'],
    ['-- compat: previous  \nx', 'previous'],
    ['-- compat: previous\r\nx', 'previous'],
    ['-- compat: breaking\r\n', 'breaking'],
    ['-- 0013: a comment first\n-- compat: previous\n', null],
    ['\n-- compat: previous\n', null],
    [' -- compat: previous\n', null],
    ['-- compat: Previous\n', null],
    ['-- compat: compatible\n', null],
    ['-- compat:previous\n', null],
    ['-- compat: previous, mostly\n', null],
    ['-- compat: previous breaking\n', null],
    ['', null],
  ])('%j → %s', (sql, expected) => {
    expect(declaredCompat(sql)).toBe(expected);
  });
});

describe('migrationCompat: the list for 0001–0011, the first line after them', () => {
  it.each([
    [{ version: 1, name: 'init', sql: 'CREATE TABLE …' }, 'breaking'],
    [{ version: 2, name: 'relay', sql: '' }, 'breaking'],
    [{ version: 4, name: 'console', sql: '' }, 'previous'],
    [{ version: 8, name: 'order_time', sql: '' }, 'breaking'],
    [{ version: 11, name: 'console_keys', sql: '' }, 'previous'],
    // A released file is the list's, whatever it says (it cannot say anything: it never changes).
    [{ version: 8, name: 'order_time', sql: '-- compat: previous\n' }, 'breaking'],
    [{ version: 12, name: 'subjects', sql: '-- compat: previous\n…' }, 'previous'],
    [{ version: 13, name: 'x', sql: '-- compat: breaking\n…' }, 'breaking'],
  ])('%j → %s', (m, expected) => {
    expect(migrationCompat(m)).toBe(expected);
  });

  it.each([
    [{ version: 12, name: 'subjects', sql: 'CREATE TABLE x (n int);' }, '0012_subjects.sql'],
    [{ version: 13, name: 'x', sql: '-- 0013\n-- compat: previous\n' }, '0013_x.sql'],
  ])('refuses %j without the line, naming the file and what it must say', (m, file) => {
    expect(() => migrationCompat(m)).toThrow(MigrationError);
    expect(() => migrationCompat(m)).toThrow(
      `migrations-pg/${file} must start with the line "-- compat: previous" (the previous release runs on this schema) or "-- compat: breaking"`,
    );
  });

  it('lists 0001–0011, each with a reason of one line', () => {
    expect(LAST_UNMARKED).toBe(11);
    expect(Object.keys(RELEASED_COMPAT).map(Number)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    for (const { compat, reason } of Object.values(RELEASED_COMPAT)) {
      expect(['previous', 'breaking']).toContain(compat);
      expect(reason).toMatch(/^[^\n]{20,}$/);
    }
  });

  // What CI runs: a new file of migrations-pg/ without its first line fails here.
  it('every file in migrations-pg/ has a compat (after 0011, on its first line)', () => {
    const dir = migrationFolder('migrations-pg');
    const files = readdirSync(dir).map((file) => ({ file, sql: readFileSync(join(dir, file), 'utf8') }));
    const migrations = orderMigrationFiles(files, 'migrations-pg');
    for (const m of migrations) {
      if (m.version > LAST_UNMARKED)
        expect({ version: m.version, line: declaredCompat(m.sql) }).not.toEqual({
          version: m.version,
          line: null,
        });
      expect(['previous', 'breaking']).toContain(migrationCompat(m));
    }
  });
});

const known = (n: number) => Array.from({ length: n }, (_, i) => ({ version: i + 1, name: `m${i + 1}` }));
const applied = (n: number, extra: AppliedCompat[] = []): AppliedCompat[] => [
  ...known(n).map((m) => ({ ...m, compat: 'breaking' })),
  ...extra,
];

describe('schemaVerdict: run or refuse, given the rows applied and the files known', () => {
  it.each<[string, AppliedCompat[], number, ReturnType<typeof schemaVerdict>]>([
    ['the same migrations', applied(12), 12, { kind: 'current' }],
    [
      'the same, compat not recorded (an older runner)',
      known(12).map((m) => ({ ...m, compat: null })),
      12,
      { kind: 'current' },
    ],
    [
      'one newer, previous',
      applied(12, [{ version: 13, name: 'x', compat: 'previous' }]),
      12,
      {
        kind: 'newer',
        message:
          "the PostgreSQL schema is at 0013 (0013_x previous); this replica's code knows up to 0012: running on it, as every newer migration says the previous release runs on it",
      },
    ],
    [
      'two newer, both previous',
      applied(12, [
        { version: 13, name: 'x', compat: 'previous' },
        { version: 14, name: 'y', compat: 'previous' },
      ]),
      12,
      expect.objectContaining({
        kind: 'newer',
        message: expect.stringMatching(/^the PostgreSQL schema is at 0014 \(0013_x, 0014_y previous\)/),
      }),
    ],
    [
      'two newer, the last breaking',
      applied(12, [
        { version: 13, name: 'x', compat: 'previous' },
        { version: 14, name: 'y', compat: 'breaking' },
      ]),
      12,
      {
        kind: 'refused',
        message:
          "the PostgreSQL schema is at 0014 (0014_y breaking); this replica's code knows up to 0012: this replica refuses it (not ready, webhooks 503) — run the release that migrated it",
      },
    ],
    [
      'two newer, the first breaking',
      applied(12, [
        { version: 13, name: 'x', compat: 'breaking' },
        { version: 14, name: 'y', compat: 'previous' },
      ]),
      12,
      expect.objectContaining({
        kind: 'refused',
        message: expect.stringMatching(/^the PostgreSQL schema is at 0014 \(0013_x breaking\)/),
      }),
    ],
    [
      'two newer, both breaking',
      applied(12, [
        { version: 13, name: 'x', compat: 'breaking' },
        { version: 14, name: 'y', compat: 'breaking' },
      ]),
      12,
      expect.objectContaining({
        kind: 'refused',
        message: expect.stringMatching(/\(0013_x, 0014_y breaking\); this replica's code knows up to 0012/),
      }),
    ],
    [
      'a newer one whose compat was not recorded',
      applied(11, [{ version: 12, name: 'z', compat: null }]),
      11,
      expect.objectContaining({
        kind: 'refused',
        message: expect.stringMatching(
          /^the PostgreSQL schema is at 0012 \(0012_z breaking\); this replica's code knows up to 0011/,
        ),
      }),
    ],
    [
      'a newer one with a compat this code does not know',
      applied(11, [{ version: 12, name: 'z', compat: 'maybe' }]),
      11,
      expect.objectContaining({ kind: 'refused' }),
    ],
    [
      'one behind',
      applied(11),
      12,
      {
        kind: 'behind',
        missing: ['0012_m12'],
        message:
          'the PostgreSQL schema lacks 0012_m12, which this replica needs; run `consig-receiver migrate` (MIGRATE_ON_START=false: replicas do not migrate)',
      },
    ],
    [
      'a fresh database',
      [],
      2,
      expect.objectContaining({
        kind: 'behind',
        missing: ['0001_m1', '0002_m2'],
        message: expect.stringContaining('lacks 0001_m1, 0002_m2, which'),
      }),
    ],
  ])('%s', (_what, rows, knownCount, expected) => {
    expect(schemaVerdict(rows, known(knownCount))).toEqual(expected);
  });
});

describe('schemaHold: when the webhook routes answer 503 instead of acknowledging', () => {
  const base: SchemaState = {
    refusal: null,
    migrating: false,
    read: true,
    unreachable: false,
    sinceStartMs: 10,
    holdbackMaxMs: 5000,
  };
  it.each<[string, Partial<SchemaState>, string | null]>([
    ['running on the schema', {}, null],
    ['refused', { refusal: 'the schema is at 0014 (0014_x breaking)' }, 'schema_incompatible'],
    [
      'refused, whatever else holds',
      { refusal: 'r', migrating: true, read: false, sinceStartMs: 9e9 },
      'schema_incompatible',
    ],
    ['migrating', { migrating: true }, 'schema_migrating'],
    ['migrating past the bound', { migrating: true, read: false, sinceStartMs: 9e9 }, 'schema_migrating'],
    ['migrating with PostgreSQL gone since', { migrating: true, unreachable: true }, 'schema_migrating'],
    ['not read yet', { read: false }, 'schema_unread'],
    ['not read yet, just before the bound', { read: false, sinceStartMs: 4999 }, 'schema_unread'],
    ['not read yet, at the bound', { read: false, sinceStartMs: 5000 }, null],
    ['not read: PostgreSQL cannot be reached', { read: false, unreachable: true }, null],
  ])('%s → %s', (_what, state, error) => {
    expect(schemaHold({ ...base, ...state })?.error ?? null).toBe(error);
  });

  it('says why, the refusal in its own words', () => {
    expect(schemaHold({ ...base, refusal: 'the schema is at 0014' })).toEqual({
      error: 'schema_incompatible',
      message: 'the schema is at 0014',
    });
    expect(schemaHold({ ...base, migrating: true })?.message).toMatch(/migrating PostgreSQL's schema/);
    expect(schemaHold({ ...base, read: false })?.message).toMatch(/has not read PostgreSQL's schema yet/);
  });
});
