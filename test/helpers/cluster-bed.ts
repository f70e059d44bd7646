import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import type { LocalPostgres } from '../../rigs/local-postgres';
import { openPool, waitFor } from './cluster-db';
import { createTestDatabase, startTestPostgres, workerPostgres } from './postgres';
import { startTestReceiver, type TestReceiver } from './receiver';
import { tempDir } from './tmp';

/**
 * PostgreSQL for a test file and a fresh database per test, with their Jest hooks: `url` and `pool`
 * are the current test's (read them inside tests or hooks, not at load time). The server is the jest
 * worker's (fast: no fsync), unless `ownServer`: a durable one of the file's own, for a file that
 * SIGKILLs or restarts it (a fast server loses its last commits then, and the others' files share
 * the worker's).
 */
export function pgBed(options: { prefix: string; ownServer?: boolean }) {
  const bed = {
    pg: undefined as unknown as LocalPostgres,
    url: '',
    pool: undefined as unknown as Pool,
  };
  beforeAll(async () => {
    bed.pg = options.ownServer ? await startTestPostgres({ fast: false }) : await workerPostgres();
  });
  afterAll(async () => {
    await bed.pg?.stop();
  });
  beforeEach(async () => {
    bed.url = await createTestDatabase(bed.pg, options.prefix);
    bed.pool = openPool(bed.url);
  });
  afterEach(async () => {
    await bed.pool.end();
  });
  return bed;
}

/** How a replica of a test starts beyond its environment. */
type ReplicaStart = Pick<
  Parameters<typeof startTestReceiver>[0] & object,
  'configureHandlers' | 'deferral' | 'clock'
>;

/**
 * What a test file of cluster mode's HTTP side needs, with its Jest hooks: PostgreSQL (see
 * {@link pgBed}: `ownServer` for a file that SIGKILLs or restarts it), a fresh database and temp
 * folder per test, and receivers — cluster replicas on that database, or one on
 * SQLite alone — stopped after each test. `env` goes to every receiver (tokens).
 */
export function clusterBed(options: { prefix: string; env?: Record<string, string>; ownServer?: boolean }) {
  const receivers: TestReceiver[] = [];
  const db = pgBed({ prefix: options.prefix, ownServer: options.ownServer });
  const bed = {
    get pg(): LocalPostgres {
      return db.pg;
    },
    get url(): string {
      return db.url;
    },
    get pool(): Pool {
      return db.pool;
    },
    dir: undefined as unknown as ReturnType<typeof tempDir>,
    /** A replica on this test's database (REPLICA_ID `replica-a` unless `env` names another), connected and ready. */
    async replica(env: Record<string, string> = {}, start: ReplicaStart = {}): Promise<TestReceiver> {
      const r = await startTestReceiver({
        ...start,
        env: {
          DATABASE_URL: bed.url,
          REPLICA_ID: 'replica-a',
          RELAY_INTERVAL_MS: '20',
          CLUSTER_CONCURRENCY: '2',
          ...(options.env ?? {}),
          ...env,
        },
      });
      receivers.push(r);
      // Connected, and its relay has published a heartbeat: what a load balancer waits for (/readyz).
      await waitFor(
        () => r.runtime.state === 'running' && r.runtime.readiness().ordered,
        'replica connected to PostgreSQL, its relay beating',
      );
      return r;
    },
    /** A receiver on SQLite alone. */
    async sqliteReceiver(env: Record<string, string> = {}, start: ReplicaStart = {}): Promise<TestReceiver> {
      const r = await startTestReceiver({ ...start, env: { ...(options.env ?? {}), ...env } });
      receivers.push(r);
      if (r.clustered) throw new Error('a SQLite receiver started in cluster mode');
      return r;
    },
    /** Any receiver, stopped after the test like the others. */
    async receiver(env: Record<string, string>): Promise<TestReceiver> {
      const r = await startTestReceiver({ env: { ...(options.env ?? {}), ...env } });
      receivers.push(r);
      return r;
    },
    /** Stops a receiver before the test ends (a restart). */
    async stop(r: TestReceiver): Promise<void> {
      receivers.splice(receivers.indexOf(r), 1);
      await r.stop();
    },
    /** A DESTINATIONS_FILE: `crm`, paused in it (its messages accumulate, none is sent), then `extra`. */
    destinationsFile(extra: Record<string, unknown>[] = []): string {
      const file = join(bed.dir.dir, `destinations-${extra.length}.json`);
      const crm = { name: 'crm', url: 'http://127.0.0.1:9/', secret: 'crm-secret', paused: true };
      writeFileSync(file, JSON.stringify({ destinations: [crm, ...extra] }));
      return file;
    },
  };
  beforeEach(() => {
    bed.dir = tempDir();
  });
  // The receivers have pools of their own: the order against pgBed's hook (the test's pool) does not matter.
  afterEach(async () => {
    for (const r of receivers.splice(0)) await r.stop();
    bed.dir.cleanup();
  });
  return bed;
}
