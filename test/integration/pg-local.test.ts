import { chmodSync, existsSync, readFileSync } from 'node:fs';
import { Client } from 'pg';
import {
  findPostgresBinaries,
  INSTALL_HINT,
  type LocalPostgres,
  LocalPostgresError,
  startLocalPostgres,
} from '../../rigs/local-postgres';
import { tempDir } from '../helpers/tmp';

/**
 * The throwaway server the cluster tests, the benchmark and the demo stand on. Never skipped: when
 * the binaries are missing, startLocalPostgres fails with the install hint.
 */

let pg: LocalPostgres;

beforeAll(async () => {
  pg = await startLocalPostgres();
});
afterAll(async () => {
  await pg?.stop();
});

async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new Client({ connectionString: pg.url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

describe('startLocalPostgres', () => {
  it('serves the consig database on loopback, UTF8, durable by default', async () => {
    expect(pg.url).toBe(`postgres://postgres@127.0.0.1:${pg.port}/consig`);
    const [row] = await query<{ db: string; enc: string; fsync: string; addr: string }>(
      "SELECT current_database() AS db, pg_encoding_to_char(encoding) AS enc, current_setting('fsync') AS fsync, current_setting('listen_addresses') AS addr FROM pg_database WHERE datname = current_database()",
    );
    expect(row).toEqual({ db: 'consig', enc: 'UTF8', fsync: 'on', addr: '127.0.0.1' });
    expect(existsSync(`${pg.dataDir}/PG_VERSION`)).toBe(true);
  });

  it('keeps committed rows across an immediate restart (crash recovery from the WAL)', async () => {
    await query('CREATE TABLE kept (n int)');
    await query('INSERT INTO kept SELECT generate_series(1, 1000)');
    await pg.restart({ mode: 'immediate' });
    const [row] = await query<{ n: string }>('SELECT count(*) AS n FROM kept');
    expect(row?.n).toBe('1000');
    expect(readFileSync(pg.logFile, 'utf8')).toMatch(/database system was not properly shut down|redo/);
  });

  it('comes back after kill9 through restart, with the committed rows', async () => {
    await query('INSERT INTO kept VALUES (1001)');
    const client = new Client({ connectionString: pg.url });
    await client.connect();
    client.on('error', () => {});
    pg.kill9();
    await expect(client.query('SELECT 1')).rejects.toThrow();
    await pg.restart({ mode: 'fast' });
    const [row] = await query<{ n: string }>('SELECT count(*) AS n FROM kept');
    expect(row?.n).toBe('1001');
  });

  it('runs several at once on distinct ports and directories; stop removes the directory', async () => {
    const [a, b] = await Promise.all([
      startLocalPostgres({ fast: true }),
      startLocalPostgres({ fast: true }),
    ]);
    try {
      expect(a.port).not.toBe(b.port);
      expect(a.dir).not.toBe(b.dir);
      const client = new Client({ connectionString: a.url });
      await client.connect();
      const { rows } = await client.query("SELECT current_setting('fsync') AS fsync");
      await client.end();
      expect(rows[0]).toEqual({ fsync: 'off' });
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    expect(existsSync(a.dir)).toBe(false);
    expect(existsSync(b.dir)).toBe(false);
    await a.stop(); // twice is fine
  });

  it('fails with the tail of the server log when the server does not start, and leaves nothing', async () => {
    const tmp = tempDir('consig-pg-bad-');
    chmodSync(tmp.dir, 0o755); // the server's user (postgres, when tests run as root) must reach it
    const dir = `${tmp.dir}/pg`;
    try {
      const started = startLocalPostgres({ dir, fast: true, settings: { shared_buffers: 'plenty' } });
      await expect(started).rejects.toThrow(LocalPostgresError);
      await expect(started).rejects.toThrow(
        /server log \(tail\)[\s\S]*invalid value for parameter "shared_buffers"/,
      );
      expect(existsSync(dir)).toBe(false);
    } finally {
      tmp.cleanup();
    }
  });

  it('names the way to install the binaries when they are missing', () => {
    expect(() => findPostgresBinaries({ PG_BIN: '/nonexistent' })).toThrow(INSTALL_HINT);
    expect(INSTALL_HINT).toMatch(/bash scripts\/install-ci-packages\.sh/);
    expect(findPostgresBinaries({})).toMatch(/bin$/);
  });
});
