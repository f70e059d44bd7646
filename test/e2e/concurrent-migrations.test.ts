import { join } from 'node:path';
import { openDatabase } from '../../src/sqlite/database';
import { loadMigrations, migrate } from '../../src/sqlite/sqlite-migrate';
import { runCliAsync } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * Concurrent first starts (issue 10, item 5): several real `migrate` processes started together on
 * one file, fresh or left behind by an older version, round after round. Before the fix one start
 * in eight failed with `UNIQUE constraint failed: schema_migrations.version`.
 */

const PROCESSES = 8;
const ROUNDS = 3;
const migrations = loadMigrations();

let tmp: ReturnType<typeof tempDir>;
beforeAll(() => (tmp = tempDir('consig-migrate-race-')));
afterAll(() => tmp.cleanup());

/** Starts PROCESSES `migrate` at once; returns which versions each one says it applied. */
async function raceMigrate(path: string): Promise<number[][]> {
  const runs = await Promise.all(
    // With the default settings: a migration waits up to MIGRATION_BUSY_TIMEOUT_MS (30 s) for the
    // write lock another holds (src/open-store.ts). At SQLITE_BUSY_TIMEOUT_MS's 1 s a loaded machine
    // failed one with 'database is locked'.
    Array.from({ length: PROCESSES }, () => runCliAsync(['--database', path, 'migrate'])),
  );
  for (const run of runs) {
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
  }
  return runs.map((run) => {
    const applied = /: applied (.*)$/m.exec(run.stdout)?.[1];
    return applied ? applied.split(', ').map((m) => Number(m.slice(0, 4))) : [];
  });
}

function recordedVersions(path: string): { version: number; n: number }[] {
  const db = openDatabase(path, { readonly: true });
  try {
    return db
      .prepare('SELECT version, count(*) AS n FROM schema_migrations GROUP BY version ORDER BY version')
      .all() as { version: number; n: number }[];
  } finally {
    db.close();
  }
}

const cases: [string, number][] = [
  ['a fresh file', 0],
  ['a file at 0002 (an older version ran on it)', 2],
];

describe.each(cases)(`${PROCESSES} migrate processes started at once on %s`, (_name, alreadyApplied) => {
  it.each(Array.from({ length: ROUNDS }, (_, i) => i + 1))(
    'round %i: all exit 0, each migration applied once',
    async (round) => {
      const path = join(tmp.dir, `race-${alreadyApplied}-${round}.db`);
      if (alreadyApplied > 0) {
        const db = openDatabase(path);
        migrate(db, migrations.slice(0, alreadyApplied));
        db.close();
      }

      const appliedByEach = await raceMigrate(path);

      const pending = migrations.slice(alreadyApplied).map((m) => m.version);
      // Every pending migration was applied by exactly one of the processes.
      expect(appliedByEach.flat().sort((a, b) => a - b)).toEqual(pending);
      expect(recordedVersions(path)).toEqual(migrations.map((m) => ({ version: m.version, n: 1 })));
    },
  );
});
