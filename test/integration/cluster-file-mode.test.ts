import { existsSync, statSync } from 'node:fs';
import { sendSigned, waitFor } from '../helpers/cluster-db';
import { clusterBed } from '../helpers/cluster-bed';
import { delivery } from '../helpers/payloads';

/**
 * Issue 45 (LGPD): a replica's spool (DATABASE_PATH in cluster mode) holds the bodies it answered
 * for until they are relayed and pruned: owner only (0600) like SQLite mode's log, with its -wal and
 * -shm, whatever the umask (the usual 0022 here). Real replica, real PostgreSQL.
 */

const bed = clusterBed({ prefix: 'file_mode' });
let umask: number;
beforeEach(() => {
  umask = process.umask(0o022);
});
afterEach(() => {
  process.umask(umask);
});

it("a replica's spool, its -wal and -shm, and its lock file are 0600", async () => {
  const r = await bed.replica({ REPLICA_ID: 'a' });
  expect((await sendSigned(r.url, delivery('proposta.criada', { nu_proposta: 4502 }))).status).toBe(200);
  await waitFor(
    async () => (await bed.pool.query("SELECT 1 FROM events WHERE nu_proposta = '4502'")).rowCount === 1,
    'the delivery relayed',
  );
  expect(existsSync(`${r.dbPath}-wal`)).toBe(true);
  const modes = ['', '-wal', '-shm', '.replica-lock'].map((suffix) => [
    suffix,
    statSync(r.dbPath + suffix).mode & 0o777,
  ]);
  expect(modes).toEqual([
    ['', 0o600],
    ['-wal', 0o600],
    ['-shm', 0o600],
    ['.replica-lock', 0o600],
  ]);
});
