import { chmodSync, existsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { backupDatabase } from '../../src/open-store';
import { loadConfig } from '../../src/config';
import type { Db } from '../../src/sqlite/database';
import Database from '../../src/sqlite/sqlite-driver';
import type { ModeTightened } from '../../src/sqlite/file-mode';
import { openStore } from '../../src/sqlite/store';
import { delivery } from '../helpers/payloads';
import { startTestReceiver } from '../helpers/receiver';
import { tempDir } from '../helpers/tmp';

/**
 * Issue 45 (LGPD): the log, its -wal and -shm, and a backup are the owner's only (0600), whatever
 * the umask; the data directory the receiver creates is 0700; a file left readable by others is
 * tightened when it is opened for writing, with one notice naming the path. Real files, under the
 * usual umask 0022 (which would leave SQLite's own files 0644).
 */

const modeOf = (path: string) => statSync(path).mode & 0o777;

let tmp: ReturnType<typeof tempDir>;
let umask: number;
beforeEach(() => {
  tmp = tempDir('consig-mode-');
  umask = process.umask(0o022);
});
afterEach(() => {
  process.umask(umask);
  tmp.cleanup();
});

/** A database as an older version (or a hand) left it: 0644, with its -wal and -shm. */
function worldReadableDatabase(path: string): Db {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE t (x); INSERT INTO t VALUES (1)');
  for (const suffix of ['', '-wal', '-shm']) chmodSync(path + suffix, 0o644);
  return db;
}

it('a new log: its directory 0700, the file, -wal and -shm 0600', () => {
  const path = join(tmp.dir, 'data', 'deeper', 'consig.db');
  const store = openStore(path, { migrate: true });
  try {
    store.db.exec('CREATE TABLE probe (x); INSERT INTO probe VALUES (1)');
    expect(existsSync(`${path}-wal`)).toBe(true);
    for (const suffix of ['', '-wal', '-shm'])
      expect([suffix, modeOf(path + suffix)]).toEqual([suffix, 0o600]);
    expect(modeOf(join(tmp.dir, 'data'))).toBe(0o700);
    expect(modeOf(join(tmp.dir, 'data', 'deeper'))).toBe(0o700);
  } finally {
    store.close();
  }
});

it('an existing log readable by others is tightened to 0600 with its companions, each told once by path', () => {
  const path = join(tmp.dir, 'consig.db');
  const old = worldReadableDatabase(path);
  const notices: ModeTightened[] = [];
  const store = openStore(path, { migrate: true, modeNotice: (n) => notices.push(n) });
  try {
    for (const suffix of ['', '-wal', '-shm'])
      expect([suffix, modeOf(path + suffix)]).toEqual([suffix, 0o600]);
    expect(notices).toEqual(
      ['', '-wal', '-shm'].map((suffix) => ({ path: path + suffix, was: '0644', tightened: true })),
    );
    // The data is untouched, and the connection that was open goes on.
    expect(old.prepare('SELECT x FROM t').all()).toEqual([{ x: 1 }]);
  } finally {
    store.close();
    old.close();
  }
  // Already private: nothing to tell the next time.
  openStore(path, { modeNotice: (n) => notices.push(n) }).close();
  expect(notices).toHaveLength(3);
});

it('a read-only open changes no mode (the commands that only read)', () => {
  const path = join(tmp.dir, 'consig.db');
  openStore(path, { migrate: true }).close();
  chmodSync(path, 0o644);
  openStore(path, {
    readonly: true,
    modeNotice: (n) => {
      throw new Error(`told: ${n.path}`);
    },
  }).close();
  expect(modeOf(path)).toBe(0o644);
});

it('the receiver creates its directory 0700 and the log 0600; a 0644 log gets one warn line naming its path', async () => {
  const path = join(tmp.dir, 'data', 'consig.db');
  const r = await startTestReceiver({ dir: tmp.dir, env: { DATABASE_PATH: path } });
  try {
    expect((await r.send(delivery('proposta.criada', { nu_proposta: 4501 }))).status).toBe(200);
    expect(modeOf(join(tmp.dir, 'data'))).toBe(0o700);
    for (const suffix of ['', '-wal', '-shm'])
      expect([suffix, modeOf(path + suffix)]).toEqual([suffix, 0o600]);
    expect(r.logs.lines.filter((l) => String(l.msg).startsWith('database file'))).toEqual([]);
  } finally {
    await r.stop();
  }
  chmodSync(path, 0o644);
  const again = await startTestReceiver({ dir: tmp.dir, env: { DATABASE_PATH: path } });
  try {
    expect(modeOf(path)).toBe(0o600);
    expect(again.logs.lines.filter((l) => String(l.msg).startsWith('database file'))).toEqual([
      expect.objectContaining({
        level: 'warn',
        path,
        mode: '0644',
        msg: 'database file was readable by others: now 0600, owner only',
      }),
    ]);
  } finally {
    await again.stop();
  }
});

it('a backup is 0600, also when --force overwrites a file readable by others', async () => {
  const path = join(tmp.dir, 'consig.db');
  const store = openStore(path, { migrate: true });
  store.close();
  const config = loadConfig({ DATABASE_PATH: path });
  const copy = join(tmp.dir, 'backup.db');
  expect((await backupDatabase(config, copy)).totalPages).toBeGreaterThan(0);
  expect(modeOf(copy)).toBe(0o600);
  expect(existsSync(`${copy}-journal`)).toBe(false);
  const readable = join(tmp.dir, 'readable.db');
  writeFileSync(readable, '');
  chmodSync(readable, 0o644);
  await backupDatabase(config, readable);
  expect(modeOf(readable)).toBe(0o600);
  const backedUp = new Database(readable, { readonly: true });
  try {
    expect(backedUp.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'events'").get()).toEqual({
      n: 1,
    });
  } finally {
    backedUp.close();
  }
});
