import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { clusterBed } from '../helpers/cluster-bed';
import { count, rows, sendSigned, waitFor } from '../helpers/cluster-db';
import { delivery, SECRET } from '../helpers/payloads';
import { spawnServe, startServe, type ServerProcess } from '../helpers/process';
import type { TestReceiver } from '../helpers/receiver';

/**
 * One spool, one replica, and a lost spool said aloud (issue 22, item 4):
 * - a replica restarted on an empty spool (its volume lost) logs an error naming the spool
 *   PostgreSQL knew for its REPLICA_ID and how far it had been relayed, and
 *   `consig_relay_spool_replaced` is 1;
 * - a second replica on a spool another one runs on refuses to start with one line naming it, and a
 *   replica SIGKILLed does not keep the next one out. Real `serve` processes (the built receiver).
 */

const bed = clusterBed({ prefix: 'spool_identity' });

async function metric(r: { url: string }, name: string): Promise<number | null> {
  const text = await (await fetch(`${r.url}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m?.[1] === undefined ? null : Number(m[1]);
}

const REPLACED =
  'cluster mode: this replica starts on a new spool; deliveries its previous spool acknowledged after previous_last_received_at and never relayed are lost unless that volume is recovered (docs/alert-runbook.md#consigspoolreplaced)';

it('a replica restarted with its spool deleted logs an error naming the previous spool and its last relayed position, and the metric says it', async () => {
  const spool = join(bed.dir.dir, 'replica-spool-1.db');
  const env = { REPLICA_ID: 'replica-spool-1', DATABASE_PATH: spool };
  const first = await bed.replica(env);
  for (const nu of [8801, 8802])
    expect(
      (await sendSigned(first.url, delivery('proposta.criada', { dados: { nu_proposta: nu } }))).status,
    ).toBe(200);
  await waitFor(async () => (await count(bed.pool, 'SELECT count(*) AS n FROM deliveries')) === 2, 'relayed');
  const [known] = await rows<{ spool: string }>(bed.pool, 'SELECT spool FROM relay_spools');
  const oldSpool = known!.spool;
  expect(await metric(first, 'consig_relay_spool_replaced')).toBe(0);
  expect(first.logs.lines.some((l) => l.msg === REPLACED)).toBe(false);
  await bed.stop(first);

  // The volume is lost: the spool and its companions are gone.
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${spool}${suffix}`, { force: true });
  const second: TestReceiver = await bed.replica(env);
  const line = second.logs.lines.find((l) => l.msg === REPLACED);
  expect(line).toMatchObject({
    level: 'error',
    replica: 'replica-spool-1',
    previous_spool: oldSpool,
    previous_relayed_through: 2,
  });
  expect(line?.spool).not.toBe(oldSpool);
  expect(typeof line?.previous_last_received_at).toBe('string');
  expect(await metric(second, 'consig_relay_spool_replaced')).toBe(1);

  // Another replica (its own REPLICA_ID, its first spool) is not taken for a replaced one.
  const other = await bed.replica({ REPLICA_ID: 'replica-spool-2' });
  expect(other.logs.lines.some((l) => l.msg === REPLACED)).toBe(false);
  expect(await metric(other, 'consig_relay_spool_replaced')).toBe(0);
}, 90_000);

describe('one spool, one replica (real serve processes)', () => {
  const children: ServerProcess['child'][] = [];
  afterEach(() => {
    for (const c of children.splice(0)) c.kill('SIGKILL');
  });
  const env = (replica: string, spool: string) => ({
    DATABASE_URL: bed.url,
    DATABASE_PATH: spool,
    REPLICA_ID: replica,
    WEBHOOK_SECRETS: SECRET,
    LOG_LEVEL: 'info',
  });

  it('a second replica on a spool another one runs on refuses to start, with one line naming the spool; after a SIGKILL of the holder a new one starts on it', async () => {
    const spool = join(bed.dir.dir, 'shared-spool.db');
    const holder = await startServe(env('replica-lock-1', spool));
    children.push(holder.child);

    const second = spawnServe(env('replica-lock-2', spool));
    children.push(second.child);
    await expect(second.ready).rejects.toThrow(/exited/);
    const { child } = second;
    const exit = await new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      else child.once('exit', (code) => resolve(code));
    });
    expect(exit).not.toBe(0);
    const stderr = (await second.ready.catch((err: Error) => err.message)) as string;
    const lines = stderr.split('\n').filter((l) => l.startsWith('consig-receiver:'));
    expect(lines).toEqual([
      `consig-receiver: the spool ${spool} is in use by another replica (its lock ${spool}.replica-lock is held): in cluster mode each replica needs a DATABASE_PATH of its own`,
    ]);
    // The holder never noticed: it still answers and relays. (On a loaded machine it may not have
    // read PostgreSQL's schema yet: 503 `schema_unread` until then, which the service retries; a CI
    // run saw it. Nothing else but 200 ends the wait.)
    await waitFor(
      async () =>
        (await sendSigned(holder.url, delivery('proposta.criada', { dados: { nu_proposta: 8901 } })))
          .status === 200,
      'the holder acknowledges',
    );

    // A holder that dies without a word (SIGKILL) gives the lock back with its process.
    holder.child.kill('SIGKILL');
    await holder.exited;
    const next = await startServe(env('replica-lock-1', spool));
    children.push(next.child);
    // Acknowledged once it has read PostgreSQL's schema (503 `schema_unread` before: the service retries).
    await waitFor(
      async () =>
        (await sendSigned(next.url, delivery('proposta.criada', { dados: { nu_proposta: 8902 } }))).status ===
        200,
      'the successor acknowledges',
    );
    await waitFor(
      // The acknowledged ones (the successor's 503s before it read the schema are audit rows too).
      async () =>
        (await count(bed.pool, 'SELECT count(*) AS n FROM deliveries WHERE http_status = 200')) === 2,
      'both deliveries relayed, the killed holder’s by its successor',
    );
  }, 90_000);
});
