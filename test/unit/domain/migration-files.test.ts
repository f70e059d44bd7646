import { join } from 'node:path';

import * as MigrationFiles from '../../../src/domain/migration-files';
import { loadAgainInEachTest } from './fresh-module';

// Loaded again in each test, so that Stryker runs these tests against its module-level tables and
// patterns too (fresh-module.ts).
loadAgainInEachTest(MigrationFiles, join(__dirname, '../../../src/domain/migration-files'));
const { migrationFileName, orderMigrationFiles, unknownVersions } = MigrationFiles;

const f = (file: string) => ({ file, sql: `-- ${file}` });

describe('orderMigrationFiles', () => {
  it('orders NNNN_name.sql files by number and ignores what is not .sql', () => {
    const out = orderMigrationFiles([f('0002_b.sql'), f('README.md'), f('0001_a.sql')], 'migrations');
    expect(out).toEqual([
      { version: 1, name: 'a', sql: '-- 0001_a.sql' },
      { version: 2, name: 'b', sql: '-- 0002_b.sql' },
    ]);
  });

  it.each([
    [['0001_a.sql', '2_b.sql'], /2_b\.sql is not named NNNN_name\.sql/],
    [['0001_a.sql', '0002_B.sql'], /0002_B\.sql is not named/],
    [['0001_a.sql', 'x0002_b.sql'], /x0002_b\.sql is not named/],
    [['0001_a.sql', '0002_b.sql.sql'], /0002_b\.sql\.sql is not named/],
    [['0001_a.sql', '0003_c.sql'], /migrations-pg must be numbered .* found 3 at position 2/],
    [['0002_b.sql'], /found 2 at position 1/],
    [['0001_a.sql', '0001_again.sql'], /found 1 at position 2/],
  ])('refuses %p', (files, error) => {
    expect(() => orderMigrationFiles(files.map(f), 'migrations-pg')).toThrow(error);
  });

  it('writes the file name back', () => {
    expect(migrationFileName({ version: 7, name: 'forwarding' })).toBe('0007_forwarding.sql');
  });
});

describe('unknownVersions', () => {
  const migrations = [{ version: 1 }, { version: 2 }, { version: 3 }];
  it.each<[string, (number | { version: number })[], (number | { version: number })[]]>([
    ['none applied', [], []],
    ['all known', [1, 2, 3], []],
    ['a newer one, as numbers', [1, 2, 3, 4, 7], [4, 7]],
    ['a newer one, as rows', [{ version: 1 }, { version: 9 }], [{ version: 9 }]],
  ])('%s', (_name, applied, unknown) => {
    expect(unknownVersions(applied, migrations)).toEqual(unknown);
  });
});
