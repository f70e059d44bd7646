import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadPgMigrations, MIGRATION_LOCK_KEY } from '../../src/postgres/pg-migrate';
import { loadMigrations } from '../../src/sqlite/sqlite-migrate';
import { pgBed } from '../helpers/cluster-bed';
import { count, waitFor } from '../helpers/cluster-db';
import { runCliAsync } from '../helpers/process';
import { tempDir } from '../helpers/tmp';

/**
 * `consig-receiver migrate` with DATABASE_URL (issue 46, item 3), as a process (dist/: build
 * first) on a real PostgreSQL: PostgreSQL then the spool, `--dry-run` reading only, `--json`.
 */

const bed = pgBed({ prefix: 'migrate_cmd' });
const pgCount = loadPgMigrations().length;
const sqliteCount = loadMigrations().length;
let tmp: ReturnType<typeof tempDir>;
beforeEach(() => {
  tmp = tempDir();
});
afterEach(() => tmp.cleanup());

const env = (extra: Record<string, string> = {}) => ({
  DATABASE_URL: bed.url,
  DATABASE_PATH: join(tmp.dir, 'spool.db'),
  ...extra,
});

it('--dry-run lists what it would apply (files and compat) and changes nothing', async () => {
  const run = await runCliAsync(['migrate', '--dry-run'], env());
  expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
  const lines = run.stdout.trim().split('\n');
  expect(lines).toHaveLength(2);
  expect(lines[0]).toMatch(
    /^PostgreSQL postgres:\/\/[^ ]+: would apply 0001_init\.sql \(breaking\), .*0012_subjects\.sql \(breaking\)$/,
  );
  expect(lines[1]).toMatch(/^SQLite .*spool\.db: skipped, no spool there/);
  expect(
    await count(
      bed.pool,
      "SELECT count(*) AS n FROM pg_tables WHERE tablename IN ('events', 'schema_migrations')",
    ),
  ).toBe(0);
  expect(existsSync(join(tmp.dir, 'spool.db'))).toBe(false);

  const json = await runCliAsync(['migrate', '--dry-run', '--json'], env());
  const parsed = JSON.parse(json.stdout) as {
    dryRun: boolean;
    stores: { store: string; applied: unknown[] }[];
  };
  expect(parsed.dryRun).toBe(true);
  expect(parsed.stores.map((s) => [s.store, s.applied.length])).toEqual([
    ['postgres', pgCount],
    ['sqlite', 0],
  ]);
  expect(parsed.stores[0]?.applied[0]).toEqual({ file: '0001_init.sql', compat: 'breaking' });
});

it('migrates PostgreSQL, then the spool when it exists; a second run is up to date', async () => {
  // The spool, as a replica's volume holds it (created by `migrate` without DATABASE_URL, behind by none).
  const spool = await runCliAsync(['migrate'], { DATABASE_PATH: join(tmp.dir, 'spool.db') });
  expect(spool.status).toBe(0);
  const run = await runCliAsync(['migrate', '--json'], env());
  expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
  const parsed = JSON.parse(run.stdout) as { stores: { store: string; applied: unknown[] }[] };
  expect(parsed.stores.map((s) => [s.store, s.applied.length])).toEqual([
    ['postgres', pgCount],
    ['sqlite', 0],
  ]);
  expect(await count(bed.pool, 'SELECT count(*) AS n FROM schema_migrations WHERE compat IS NOT NULL')).toBe(
    pgCount,
  );
  const again = await runCliAsync(['migrate'], env());
  expect(again.stdout.trim().split('\n')).toEqual([
    expect.stringMatching(/^PostgreSQL postgres:\/\/.*: up to date$/),
    expect.stringMatching(/^SQLite .*spool\.db: up to date$/),
  ]);
  expect(sqliteCount).toBeGreaterThan(0);
});

it('a spool behind is migrated with PostgreSQL; --dry-run on it reads only', async () => {
  // An empty SQLite file: every migration pending.
  const path = join(tmp.dir, 'spool.db');
  writeFileSync(path, '');
  const dry = await runCliAsync(['migrate', '--dry-run'], env());
  expect(dry.stdout).toMatch(/SQLite .*spool\.db: would apply 0001_init\.sql, /);
  const run = await runCliAsync(['migrate'], env());
  expect(run.stdout).toMatch(/SQLite .*spool\.db: applied 0001_init\.sql, /);
});

it('says on stderr why it waits (another runner holds the lock), and migrates once it is let go', async () => {
  const holder = await bed.pool.connect();
  const key = MIGRATION_LOCK_KEY.toString();
  try {
    await holder.query('SELECT pg_advisory_lock($1)', [key]);
    const running = runCliAsync(['migrate', '--json'], env());
    // The command is at the lock once PostgreSQL shows its session waiting on the advisory lock.
    await waitFor(
      () => count(bed.pool, "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"),
      'migrate waiting for the lock',
    );
    await holder.query('SELECT pg_advisory_unlock($1)', [key]);
    const run = await running;
    expect(run.status).toBe(0);
    expect(run.stderr).toBe(
      'consig-receiver migrate: another process is migrating the PostgreSQL database; waiting for it\n',
    );
    const parsed = JSON.parse(run.stdout) as { stores: { store: string; applied: unknown[] }[] };
    expect(parsed.stores[0]?.applied).toHaveLength(pgCount);
  } finally {
    holder.release();
  }
});
