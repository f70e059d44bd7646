import { join } from 'node:path';
import { type Db, openDatabase } from '../../src/sqlite/database';
import { appliedVersions, loadMigrations, type Migration, migrate } from '../../src/sqlite/sqlite-migrate';
import { tempDir } from '../helpers/tmp';

/**
 * Two connections on one file, interleaved deterministically: the second runs its whole migrate()
 * in the window where the first has read which versions are applied and not yet started applying
 * them, the window in which two processes starting together once failed with
 * `UNIQUE constraint failed: schema_migrations.version` (issue 10, item 5).
 */

let tmp: ReturnType<typeof tempDir>;
let first: Db;
let second: Db;
const migrations = loadMigrations();

beforeEach(() => {
  tmp = tempDir();
  const path = join(tmp.dir, 'race.db');
  first = openDatabase(path);
  second = openDatabase(path);
});
afterEach(() => {
  first.close();
  second.close();
  tmp.cleanup();
});

/**
 * The migrations as `first` sees them: migrate() reads the applied versions, then the list's
 * versions (assertKnown); the first read of a version lets `second` migrate the file completely.
 */
function racedBy(other: () => void): { list: Migration[]; raced: () => boolean } {
  let raced = false;
  const list = migrations.map((m, i) => {
    if (i !== 0) return m;
    return {
      name: m.name,
      sql: m.sql,
      get version() {
        if (!raced) {
          raced = true;
          other();
        }
        return m.version;
      },
    };
  });
  return { list, raced: () => raced };
}

function versionRows(db: Db): { version: number; n: number }[] {
  return db
    .prepare('SELECT version, count(*) AS n FROM schema_migrations GROUP BY version ORDER BY version')
    .all() as { version: number; n: number }[];
}

describe('migrate() started by two processes at once', () => {
  it('on a fresh file: the one that looked first skips what the other applied meanwhile', () => {
    let appliedBySecond: Migration[] = [];
    const { list, raced } = racedBy(() => (appliedBySecond = migrate(second, migrations)));

    const appliedByFirst = migrate(first, list);

    expect(raced()).toBe(true);
    expect(appliedBySecond.map((m) => m.version)).toEqual(migrations.map((m) => m.version));
    expect(appliedByFirst).toEqual([]);
    expect(versionRows(first)).toEqual(migrations.map((m) => ({ version: m.version, n: 1 })));
  });

  it('on an old file (some migrations applied): each pending one is applied exactly once', () => {
    const old = migrations.slice(0, 2);
    migrate(first, old);
    expect(appliedVersions(first)).toEqual([1, 2]);
    let appliedBySecond: Migration[] = [];
    const { list, raced } = racedBy(() => (appliedBySecond = migrate(second, migrations)));

    const appliedByFirst = migrate(first, list);

    expect(raced()).toBe(true);
    expect(appliedBySecond.map((m) => m.version)).toEqual(migrations.slice(2).map((m) => m.version));
    expect(appliedByFirst).toEqual([]);
    expect(versionRows(second)).toEqual(migrations.map((m) => ({ version: m.version, n: 1 })));
  });

  it('when the other applied only some of them, applies the rest', () => {
    const { list } = racedBy(() => migrate(second, migrations.slice(0, 3)));

    const appliedByFirst = migrate(first, list);

    expect(appliedByFirst.map((m) => m.version)).toEqual(migrations.slice(3).map((m) => m.version));
    expect(versionRows(first)).toEqual(migrations.map((m) => ({ version: m.version, n: 1 })));
  });
});
