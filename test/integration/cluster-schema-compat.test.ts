import { loadMigrations } from '../../src/sqlite/sqlite-migrate';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadPgMigrations } from '../../src/postgres/pg-migrate';
import { migrationFolder } from '../../src/core/migration-folder';
import { migrationFileName } from '../../src/domain/migration-files';
import { openStore } from '../../src/sqlite/store';
import { clusterBed } from '../helpers/cluster-bed';
import { count, sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery } from '../helpers/payloads';
import { migrateUrl } from '../helpers/postgres';
import { startTestReceiver, type TestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Mixed versions on one PostgreSQL (issue 46, items 1 and 3), on a real server with real replicas:
 * a schema newer than the replica's code (a "newer release" is the real migrations plus extra files
 * in a temp folder, applied with pg-migrate's `dir`), a breaking migration landing while a replica
 * runs, MIGRATE_ON_START=false on a database behind, and SIGTERM draining the spool.
 */

const bed = clusterBed({ prefix: 'schema_compat' });
const REAL = migrationFolder('migrations-pg');
const known = loadPgMigrations(REAL);
const codeAt = String(known.length).padStart(4, '0');
const next = String(known.length + 1).padStart(4, '0');

/** The real migrations and `extra`, in a folder of their own: a newer release's migrations-pg/. */
function newerRelease(extra: Record<string, string>): string {
  const dir = join(bed.dir.dir, `migrations-pg-${Object.keys(extra).join('-')}`);
  mkdirSync(dir);
  for (const m of known) copyFileSync(join(REAL, migrationFileName(m)), join(dir, migrationFileName(m)));
  for (const [file, sql] of Object.entries(extra)) writeFileSync(join(dir, file), sql);
  return dir;
}

/** Each log line's message and error, as one text. */
const said = (r: TestReceiver): string[] =>
  r.logs.lines.map((l) => `${String(l.msg)} ${String(l.err ?? '')}`);

async function readyz(r: TestReceiver): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${r.url}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function metric(r: TestReceiver, name: string): Promise<string | undefined> {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  return new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1];
}

it('a schema newer by a `previous` migration: the replica runs on it, and says so once', async () => {
  await migrateUrl(bed.url, {
    dir: newerRelease({ [`${next}_extra.sql`]: '-- compat: previous\nCREATE TABLE extra (n int);' }),
  });
  const r = await bed.replica();
  expect(await readyz(r)).toMatchObject({ status: 200, body: { status: 'ready' } });
  expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4601 }))).status).toBe(200);
  await waitFor(async () => (await count(bed.pool, 'SELECT count(*) AS n FROM events')) === 1, 'relayed');
  expect(await metric(r, 'consig_schema_compatible')).toBe('1');
  expect(said(r)).toContainEqual(
    expect.stringContaining(
      `the PostgreSQL schema is at ${next} (${next}_extra previous); this replica's code knows up to ${codeAt}`,
    ),
  );
});

it('a schema newer by a `breaking` migration: /readyz 503 with the reason, webhooks 503, metric 0, nothing relayed', async () => {
  await migrateUrl(bed.url, {
    dir: newerRelease({ [`${next}_contract.sql`]: '-- compat: breaking\nCREATE TABLE contract (n int);' }),
  });
  const r = await bed.receiver({ DATABASE_URL: bed.url, REPLICA_ID: 'replica-old' });
  const reason = `the PostgreSQL schema is at ${next} (${next}_contract breaking); this replica's code knows up to ${codeAt}`;
  let probe = await readyz(r);
  await waitFor(async () => (probe = await readyz(r)).body.status === 'refused', '/readyz refused');
  expect(probe).toEqual({
    status: 503,
    body: {
      status: 'refused',
      error: 'schema_incompatible',
      message: expect.stringContaining(reason),
      processing: false,
    },
  });
  const answer = await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4602 }));
  expect(answer.status).toBe(503);
  expect(answer.headers['retry-after']).toBe('5');
  expect(await metric(r, 'consig_schema_compatible')).toBe('0');
  expect(said(r)).toContainEqual(expect.stringContaining('refuses the PostgreSQL schema'));
  expect(await count(bed.pool, 'SELECT count(*) AS n FROM events')).toBe(0);
});

it('a breaking migration landing while a replica runs flips it to refused', async () => {
  const r = await bed.replica();
  expect((await readyz(r)).status).toBe(200);
  expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4603 }))).status).toBe(200);
  // Another, newer replica migrates.
  await migrateUrl(bed.url, {
    dir: newerRelease({ [`${next}_contract.sql`]: '-- compat: breaking\nCREATE TABLE contract (n int);' }),
  });
  await waitFor(async () => (await readyz(r)).status === 503, '/readyz 503 after the breaking migration');
  expect((await readyz(r)).body).toMatchObject({ status: 'refused', error: 'schema_incompatible' });
  expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4604 }))).status).toBe(503);
  expect(await metric(r, 'consig_schema_compatible')).toBe('0');
  expect(said(r)).toContainEqual(
    expect.stringContaining('a breaking migration landed while this replica ran'),
  );
});

it('MIGRATE_ON_START=false on a database behind: not ready naming what is missing and the command, ready once migrated', async () => {
  const dir = tempDir();
  try {
    // The spool migrated beforehand (MIGRATE_ON_START=false migrates neither store).
    openStore(join(dir.dir, 'consig.db'), { migrate: true }).close();
    const r = await startTestReceiver({
      dir: dir.dir,
      env: {
        DATABASE_URL: bed.url,
        REPLICA_ID: 'replica-gitops',
        MIGRATE_ON_START: 'false',
        RELAY_INTERVAL_MS: '20',
      },
    });
    try {
      let probe = await readyz(r);
      await waitFor(async () => (probe = await readyz(r)).body.status === 'refused', '/readyz refused');
      expect(probe.status).toBe(503);
      expect(probe.body.message).toMatch(
        /^the PostgreSQL schema lacks 0001_init, .*; run `consig-receiver migrate`/,
      );
      expect(await count(bed.pool, "SELECT count(*) AS n FROM pg_tables WHERE tablename = 'events'")).toBe(0);
      expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4605 }))).status).toBe(503);
      // The migrate Job runs late: the replica recovers by itself.
      await migrateUrl(bed.url);
      await waitFor(async () => (await readyz(r)).status === 200, 'ready once migrated');
    } finally {
      await r.stop();
    }
  } finally {
    dir.cleanup();
  }
});

it("MIGRATE_ON_START=false: a replica's own spool is migrated all the same (a new volume needs no step)", async () => {
  const dir = tempDir();
  try {
    const r = await startTestReceiver({
      dir: dir.dir,
      env: { DATABASE_URL: bed.url, REPLICA_ID: 'replica-gitops', MIGRATE_ON_START: 'false' },
    });
    try {
      const applied = r.store.db.prepare('SELECT count(*) AS n FROM schema_migrations').get() as {
        n: number;
      };
      expect(applied.n).toBe(loadMigrations().length);
    } finally {
      await r.close();
    }
  } finally {
    dir.cleanup();
  }
});

it('SIGTERM (close) relays what the spool holds before it stops', async () => {
  const r = await bed.replica({ SHUTDOWN_TIMEOUT_MS: '60000' });
  // Batches fail while relay_block has a row (inserts into deliveries raise): the spool fills.
  await bed.pool.query(`CREATE TABLE relay_block (x int); INSERT INTO relay_block VALUES (1);
    CREATE FUNCTION relay_blocked() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF EXISTS (SELECT 1 FROM relay_block) THEN RAISE EXCEPTION 'relay blocked by the test'; END IF; RETURN NEW; END $$;
    CREATE TRIGGER relay_blocked BEFORE INSERT ON deliveries FOR EACH ROW EXECUTE FUNCTION relay_blocked();`);
  for (let i = 0; i < 5; i++)
    expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4610 + i }))).status).toBe(
      200,
    );
  await waitFor(() => said(r).some((m) => m.includes('cannot write to PostgreSQL')), 'a relay batch failed');
  const closing = bed.stop(r);
  // The relay loop has stopped; the drain's first batch fails on the block, then it is lifted.
  await waitFor(() => said(r).some((m) => m.includes('while draining the spool')), 'the drain tried');
  await bed.pool.query('DELETE FROM relay_block');
  await closing;
  expect(await count(bed.pool, 'SELECT count(*) AS n FROM events')).toBe(5);
  expect(said(r)).not.toContainEqual(expect.stringContaining('stopping with deliveries not relayed'));
});
