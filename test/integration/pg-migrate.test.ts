import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from '../../src/sqlite/sqlite-driver';
import { Pool } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { loadPgMigrations, migratePostgres } from '../../src/postgres/pg-migrate';
import { migrationFolder } from '../../src/core/migration-folder';
import { MigrationError } from '../../src/domain/errors';
import { migrate } from '../../src/sqlite/sqlite-migrate';
import {
  createTestDatabase,
  runMigratorProcess,
  workerPostgres,
  transpileForChild,
  withClient,
  migrateUrl,
  pgMigrationsWith,
} from '../helpers/postgres';
import { tempDir } from '../helpers/tmp';

/**
 * The PostgreSQL migration runner on a real server (one per file, a database per test): forward-only,
 * one transaction per file, checksums, and replicas starting together.
 */

let pg: LocalPostgres;
let tmp: ReturnType<typeof tempDir>;
const REAL = migrationFolder('migrations-pg');
const realCount = loadPgMigrations(REAL).length;

beforeAll(async () => {
  pg = await workerPostgres();
});
afterAll(async () => {
  await pg?.stop();
});
beforeEach(() => {
  tmp = tempDir('consig-pg-migrations-');
});
afterEach(() => tmp.cleanup());

const folder = (extra: Record<string, string> = {}): string => pgMigrationsWith(tmp.dir, extra);

const next = (n: number): string => String(realCount + n).padStart(4, '0');

async function recorded(url: string): Promise<{ version: number; name: string }[]> {
  return withClient(
    url,
    async (c) => (await c.query('SELECT version, name FROM schema_migrations ORDER BY version')).rows,
  );
}

async function tableExists(url: string, table: string): Promise<boolean> {
  return withClient(
    url,
    async (c) => (await c.query('SELECT to_regclass($1) AS t', [table])).rows[0].t !== null,
  );
}

describe('migratePostgres', () => {
  it('applies every migration on a fresh database, and none on the second run', async () => {
    const url = await createTestDatabase(pg);
    const first = await migrateUrl(url);
    expect(first.map((m) => m.version)).toEqual(loadPgMigrations(REAL).map((m) => m.version));
    expect(await migrateUrl(url)).toEqual([]);
    const rows = await withClient(url, async (c) => (await c.query('SELECT * FROM schema_migrations')).rows);
    expect(rows).toHaveLength(realCount);
    expect(rows[0]).toEqual({
      version: 1,
      name: 'init',
      applied_at: expect.any(Date),
      checksum: expect.stringMatching(/^[0-9a-f]{64}$/),
      compat: 'breaking',
    });
  });

  it('keeps the names of the SQLite tables and columns (contract §10)', async () => {
    const url = await createTestDatabase(pg);
    await migrateUrl(url);
    const sqlite = new Database(':memory:');
    migrate(sqlite);
    for (const table of [
      'events',
      'deliveries',
      'proposals',
      'proposal_transitions',
      'averbacoes',
      'forward_messages',
      'forward_deliveries',
      'forward_attempts',
      'forward_destinations',
      'console_sessions',
      'console_audit',
      'console_delivery_hours',
      'console_rollup_state',
    ]) {
      const sqliteColumns = (sqlite.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map(
        (c) => c.name,
      );
      const pgColumns = await withClient(url, async (c) =>
        (
          await c.query<{ column_name: string }>(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1",
            [table],
          )
        ).rows.map((r) => r.column_name),
      );
      expect({ table, missing: sqliteColumns.filter((c) => !pgColumns.includes(c)) }).toEqual({
        table,
        missing: [],
      });
    }
    sqlite.close();
  });

  it('runs on a pool: borrows one connection, gives it back without the lock', async () => {
    const url = await createTestDatabase(pg);
    const pool = new Pool({ connectionString: url, max: 1 });
    try {
      expect(await migratePostgres(pool)).toHaveLength(realCount);
      const { rows } = await pool.query(
        "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'",
      );
      expect(rows[0]).toEqual({ n: 0 });
    } finally {
      await pool.end();
    }
  });

  it('three replicas starting together: one migrates, the others wait, each migration runs once', async () => {
    const url = await createTestDatabase(pg);
    // 0002 holds the lock until the two other runners are blocked on it, so the race is certain,
    // not a matter of timing; each migration logs its run in migration_runs.
    const dir = folder({
      [`${next(1)}_runs.sql`]: `-- compat: previous
        CREATE TABLE migration_runs (version int, pid int);
        INSERT INTO migration_runs VALUES (${realCount + 1}, pg_backend_pid());
        DO $$ BEGIN
          FOR i IN 1..400 LOOP
            EXIT WHEN (SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                       WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()) >= 2;
            PERFORM pg_sleep(0.025);
          END LOOP;
        END $$;`,
      [`${next(2)}_more.sql`]: `-- compat: previous\nINSERT INTO migration_runs VALUES (${realCount + 2}, pg_backend_pid());`,
    });
    const build = tempDir('consig-pg-child-');
    const module = transpileForChild('src/postgres/pg-migrate.ts', build.dir);
    const reports = await Promise.all([1, 2, 3].map(() => runMigratorProcess(module, url, dir))).finally(
      build.cleanup,
    );

    const all = Array.from({ length: realCount + 2 }, (_, i) => i + 1);
    const appliers = reports.filter((r) => r.applied.length > 0);
    expect(appliers).toHaveLength(1);
    expect(appliers[0]?.applied).toEqual(all);
    const waiters = reports.filter((r) => r.applied.length === 0);
    expect(waiters).toHaveLength(2);
    for (const w of waiters)
      expect(w.logged).toEqual([expect.stringMatching(/another process is migrating/)]);

    expect((await recorded(url)).map((r) => r.version)).toEqual(all);
    const runs = await withClient(
      url,
      async (c) => (await c.query('SELECT version FROM migration_runs')).rows,
    );
    expect(runs.map((r) => Number(r.version)).sort((a, b) => a - b)).toEqual([realCount + 1, realCount + 2]);
  });

  it('refuses a database with a version this code does not know, naming it', async () => {
    const url = await createTestDatabase(pg);
    await migrateUrl(url);
    await withClient(url, (c) =>
      c.query("INSERT INTO schema_migrations (version, name, checksum) VALUES (42, 'from_newer_code', 'x')"),
    );
    const refused = migrateUrl(url, {
      dir: folder({ [`${next(1)}_pending.sql`]: '-- compat: previous\nCREATE TABLE pending (n int);' }),
    });
    await expect(refused).rejects.toThrow(MigrationError);
    // Recorded by no runner that knew compat: read as breaking (issue 46).
    await expect(refused).rejects.toThrow(
      /schema is at 0042 \(0042_from_newer_code breaking\); this replica's code knows up to/,
    );
    expect(await tableExists(url, 'pending')).toBe(false);
  });

  it('refuses a released migration that was edited, naming the file', async () => {
    const url = await createTestDatabase(pg);
    const dir = folder();
    await migrateUrl(url, { dir });
    appendFileSync(join(dir, '0001_init.sql'), '\n-- a comment is an edit too\n');
    await expect(migrateUrl(url, { dir })).rejects.toThrow(
      /migrations-pg\/0001_init\.sql differs from the 0001_init\.sql applied.*never edited/,
    );
  });

  it('takes CRLF line ends for the same file (a Windows checkout is not an edit)', async () => {
    const url = await createTestDatabase(pg);
    const dir = folder();
    await migrateUrl(url, { dir });
    const { sql } = loadPgMigrations(dir)[0]!;
    writeFileSync(join(dir, '0001_init.sql'), sql.replace(/\n/g, '\r\n'));
    expect(await migrateUrl(url, { dir })).toEqual([]);
  });

  it('rolls a failing migration back entirely: nothing of it stays, its version is not recorded', async () => {
    const url = await createTestDatabase(pg);
    const broken = `${next(1)}_broken.sql`;
    const dir = folder({
      [broken]:
        '-- compat: previous\nCREATE TABLE half_done (n int);\nINSERT INTO half_done VALUES (1);\nSELECT 1 / 0;',
    });
    await expect(migrateUrl(url, { dir })).rejects.toThrow(
      new RegExp(`${broken.replace('.', '\\.')} failed: division by zero`),
    );
    expect(await tableExists(url, 'half_done')).toBe(false);
    expect((await recorded(url)).map((r) => r.version)).toEqual(
      Array.from({ length: realCount }, (_, i) => i + 1),
    );

    // Fixed before release: it applies, and only it.
    writeFileSync(join(dir, broken), '-- compat: previous\nCREATE TABLE half_done (n int);');
    expect((await migrateUrl(url, { dir })).map((m) => m.version)).toEqual([realCount + 1]);
    const locks = await withClient(
      url,
      async (c) =>
        (await c.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'")).rows,
    );
    expect(locks[0]).toEqual({ n: 0 });
  });

  it('refuses a folder with a gap or a badly named file', () => {
    writeFileSync(join(tmp.dir, '0001_a.sql'), '');
    writeFileSync(join(tmp.dir, '0003_c.sql'), '');
    expect(() => loadPgMigrations(tmp.dir)).toThrow(/without gaps; found 3 at position 2/);
    writeFileSync(join(tmp.dir, '2_b.sql'), '');
    expect(() => loadPgMigrations(tmp.dir)).toThrow(/2_b\.sql is not named NNNN_name\.sql/);
  });
});
