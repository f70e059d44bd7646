import { join } from 'node:path';
import { sqliteStoreSql } from '../../src/sqlite/sqlite-statements';
import { openStore } from '../../src/sqlite/store';
import { tempDir } from '../helpers/tmp';

/**
 * SQLite's StoreSql adapter holds the file's one connection in a write: a write that awaits anything
 * but its statements would let other code (the ingest writer) run inside its transaction. The
 * adapter refuses it, rolled back, instead of committing whatever ran in between.
 */
it('refuses, rolled back, a write during which the event loop moved on', async () => {
  const dir = tempDir('consig-logsql-');
  const store = openStore(join(dir.dir, 'consig.db'), { migrate: true });
  try {
    const sql = sqliteStoreSql(store.db);
    await expect(
      sql.write(async (q) => {
        await q.run(`INSERT INTO console_audit (at, role, action, target) VALUES ($1, 'admin', 'x', 'y')`, [
          '2026-11-26T00:00:00.000Z',
        ]);
        await new Promise((resolve) => setImmediate(resolve));
      }),
    ).rejects.toThrow('awaited something other than its statements');
    expect(store.db.inTransaction).toBe(false);
    expect(store.db.prepare('SELECT count(*) AS n FROM console_audit').get()).toEqual({ n: 0 });
    // The connection is usable afterwards, and a write that awaits only its statements commits.
    await sql.write((q) =>
      q.run(`INSERT INTO console_audit (at, role, action, target) VALUES ($1, 'admin', 'x', 'y')`, [
        '2026-11-26T00:00:00.000Z',
      ]),
    );
    expect(store.db.prepare('SELECT count(*) AS n FROM console_audit').get()).toEqual({ n: 1 });
  } finally {
    store.close();
    dir.cleanup();
  }
});

it('reads in one snapshot: a commit of another connection between two reads is not seen by the second', async () => {
  const dir = tempDir('consig-logsql-');
  const path = join(dir.dir, 'consig.db');
  const store = openStore(path, { migrate: true });
  const other = openStore(path);
  try {
    const count = `SELECT count(*) AS n FROM console_audit`;
    const insert = `INSERT INTO console_audit (at, role, action, target) VALUES ('2026-11-26T00:00:00.000Z', 'admin', 'x', 'y')`;
    const seen = await sqliteStoreSql(store.db).read(async (q) => {
      const before = await q.rows<{ n: number }>(count);
      other.db.prepare(insert).run();
      const after = await q.rows<{ n: number }>(count);
      return [before[0]!.n, after[0]!.n];
    });
    expect(seen).toEqual([0, 0]);
    expect(store.db.prepare(count).get()).toEqual({ n: 1 });
  } finally {
    other.close();
    store.close();
    dir.cleanup();
  }
});
