import type { Client } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { loadPgMigrations } from '../../src/postgres/pg-migrate';
import { RELAY_LOCK_KEY } from '../../src/postgres/pg-locks';
import { migrationFolder } from '../../src/core/migration-folder';
import { waitFor } from '../helpers/cluster-db';
import {
  createTestDatabase,
  migrateUrl,
  pgMigrationsWith,
  workerPostgres,
  withClient,
} from '../helpers/postgres';
import { tempDir } from '../helpers/tmp';

/**
 * The PostgreSQL migration runner on a live database (issue 46, item 2), on a real server: a
 * migration behind a long read gives up its lock request after `lock_timeout` instead of queueing
 * the relays' writes behind it, and is tried again until it gets through; it takes the relays' own
 * lock first; a file marked `-- migrate: outside-transaction` builds an index CONCURRENTLY while
 * writes go on, and rebuilds one a cut-short build left INVALID.
 */

let pg: LocalPostgres;
let tmp: ReturnType<typeof tempDir>;
const REAL = migrationFolder('migrations-pg');
const realCount = loadPgMigrations(REAL).length;
const next = (n: number): string => String(realCount + n).padStart(4, '0');

beforeAll(async () => {
  pg = await workerPostgres();
});
afterAll(async () => {
  await pg?.stop();
});
beforeEach(() => {
  tmp = tempDir('consig-pg-live-');
});
afterEach(() => tmp.cleanup());

const folder = (extra: Record<string, string> = {}): string => pgMigrationsWith(tmp.dir, extra);

/** A database migrated with the real files, and a session of the test's on it. */
async function migratedDatabase(): Promise<string> {
  const url = await createTestDatabase(pg);
  await migrateUrl(url);
  return url;
}

/** An event row as the relay writes one (the columns without defaults). */
const insertEvent = (c: Client, key: string) =>
  c.query(
    `INSERT INTO events (dedup_key, webhook_id, kind, received_at, body, body_bytes, status, order_at)
     VALUES ($1, $1, 'event', now(), '\\x7b7d', 2, 'done', now())`,
    [key],
  );

interface Logged {
  fields: Record<string, unknown>;
  message: string;
}
const logger = (into: Logged[]) => ({
  info: (fields: Record<string, unknown>, message: string) => into.push({ fields, message }),
  warn: (fields: Record<string, unknown>, message: string) => into.push({ fields, message }),
});

async function recordedVersions(url: string): Promise<number[]> {
  return withClient(url, async (c) =>
    (await c.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')).rows.map(
      (r) => r.version,
    ),
  );
}

async function columnExists(url: string, table: string, column: string): Promise<boolean> {
  return withClient(
    url,
    async (c) =>
      (
        await c.query(
          'SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2',
          [table, column],
        )
      ).rowCount === 1,
  );
}

it('behind a long read: gives its lock request up and tries again, so writes to the table go on meanwhile; applies once the read ends', async () => {
  const url = await migratedDatabase();
  const dir = folder({
    [`${next(1)}_probe.sql`]: '-- compat: previous\nALTER TABLE events ADD COLUMN probe text;',
  });
  const logged: Logged[] = [];
  await withClient(url, async (reader) => {
    await withClient(url, async (writer) => {
      // A report: AccessShare on events, held until it ends.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM events');
      const migrating = migrateUrl(url, {
        dir,
        lockTimeoutMs: 100,
        retryForMs: 120_000,
        logger: logger(logged),
      });
      await waitFor(() => logged.some((l) => l.fields.attempt === 1), 'a first try given up');
      // The migration's ACCESS EXCLUSIVE request, were it queued, would hold this insert until the
      // read ends; it is not queued between tries, so the insert lands with the read still open.
      for (let i = 0; i < 5; i++) await insertEvent(writer, `during-read-${i}`);
      expect(await columnExists(url, 'events', 'probe')).toBe(false);
      await reader.query('COMMIT');
      expect((await migrating).map((m) => m.version)).toEqual([realCount + 1]);
    });
  });
  expect(await columnExists(url, 'events', 'probe')).toBe(true);
  const tries = logged.filter((l) => l.fields.attempt !== undefined);
  expect(tries[0]).toMatchObject({
    fields: { migration: `${next(1)}_probe.sql`, attempt: 1, err: expect.stringMatching(/lock timeout/) },
    message: expect.stringMatching(/rolled back whole, tried again after a pause/),
  });
  expect(await recordedVersions(url)).toEqual(Array.from({ length: realCount + 1 }, (_, i) => i + 1));
});

it('gives up after retryForMs, naming the file and the lock; nothing of it applied', async () => {
  const url = await migratedDatabase();
  const dir = folder({
    [`${next(1)}_probe.sql`]: '-- compat: previous\nALTER TABLE events ADD COLUMN probe text;',
  });
  await withClient(url, async (reader) => {
    await reader.query('BEGIN');
    await reader.query('SELECT count(*) FROM events');
    await expect(migrateUrl(url, { dir, lockTimeoutMs: 50, retryForMs: 1500 })).rejects.toThrow(
      new RegExp(`${next(1)}_probe\\.sql failed: canceling statement due to lock timeout`),
    );
    await reader.query('COMMIT');
  });
  expect(await columnExists(url, 'events', 'probe')).toBe(false);
  expect(await recordedVersions(url)).toHaveLength(realCount);
});

it("takes the relays' lock first: waits (and retries) while a relay's batch holds it, never holding a table the batch waits for", async () => {
  const url = await migratedDatabase();
  const dir = folder({
    [`${next(1)}_probe.sql`]: '-- compat: previous\nALTER TABLE deliveries ADD COLUMN probe text;',
  });
  const logged: Logged[] = [];
  await withClient(url, async (relay) => {
    await relay.query('BEGIN');
    await relay.query('SELECT pg_advisory_xact_lock($1)', [RELAY_LOCK_KEY.toString()]);
    const migrating = migrateUrl(url, {
      dir,
      lockTimeoutMs: 100,
      retryForMs: 120_000,
      logger: logger(logged),
    });
    await waitFor(() => logged.some((l) => l.fields.attempt === 1), 'a first try given up');
    // The batch goes on to write deliveries: the migration holds no lock on it while it waits.
    await relay.query(
      `INSERT INTO deliveries (replica, spool, spool_id, received_at, path, outcome, http_status, duration_ms, body_bytes)
       VALUES ('r', 's', 1, now(), '/webhooks', 'accepted', 200, 1, 2)`,
    );
    await relay.query('COMMIT');
    expect((await migrating).map((m) => m.version)).toEqual([realCount + 1]);
  });
  expect(await columnExists(url, 'deliveries', 'probe')).toBe(true);
});

it('outside a transaction: builds an index CONCURRENTLY while a writer holds a transaction open, and records it after', async () => {
  const url = await migratedDatabase();
  const file = `${next(1)}_probe_index.sql`;
  const dir = folder({
    [file]:
      '-- compat: previous\n-- migrate: outside-transaction\n-- why: a test\nCREATE INDEX CONCURRENTLY IF NOT EXISTS events_probe ON events (received_at);\n',
  });
  await withClient(url, async (writer) => {
    await writer.query('BEGIN');
    await insertEvent(writer, 'open-transaction');
    const migrating = migrateUrl(url, { dir });
    // CONCURRENTLY waits for the open transaction without blocking writes: more go in meanwhile.
    await withClient(url, async (other) => {
      for (let i = 0; i < 3; i++) await insertEvent(other, `while-building-${i}`);
    });
    await writer.query('COMMIT');
    expect((await migrating).map((m) => m.version)).toEqual([realCount + 1]);
  });
  expect(await indexState(url, 'events_probe')).toEqual({ valid: true });
  expect(await recordedVersions(url)).toHaveLength(realCount + 1);
});

it('outside a transaction: an index a cut-short build left INVALID is dropped and built again', async () => {
  const url = await migratedDatabase();
  // A build cut short (a stop, a lock timeout) leaves the index there, INVALID, and unrecorded.
  await withClient(url, async (c) => {
    await c.query('CREATE INDEX events_probe ON events (received_at)');
    await c.query("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'events_probe'::regclass");
  });
  expect(await indexState(url, 'events_probe')).toEqual({ valid: false });
  const dir = folder({
    [`${next(1)}_probe_index.sql`]:
      '-- compat: previous\n-- migrate: outside-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS Events_Probe ON events (received_at);',
  });
  expect((await migrateUrl(url, { dir })).map((m) => m.version)).toEqual([realCount + 1]);
  expect(await indexState(url, 'events_probe')).toEqual({ valid: true });
});

it('refuses an outside-transaction file of two statements before applying anything', async () => {
  const url = await createTestDatabase(pg);
  const dir = folder({
    [`${next(1)}_two.sql`]:
      '-- compat: previous\n-- migrate: outside-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON events (id);\nCREATE INDEX CONCURRENTLY IF NOT EXISTS b ON events (id);',
  });
  await expect(migrateUrl(url, { dir })).rejects.toThrow(/must hold exactly one statement/);
  expect(
    await withClient(
      url,
      async (c) => (await c.query("SELECT to_regclass('schema_migrations') AS t")).rows[0].t,
    ),
  ).toBeNull();
});

async function indexState(url: string, name: string): Promise<{ valid: boolean } | null> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ valid: boolean }>(
      'SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1',
      [name],
    );
    return rows[0] ?? null;
  });
}
