import { chownSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  freePort,
  HOST,
  httpGet,
  logTail,
  metricTotal,
  type Proc,
  sleep,
  spawnServe,
  stopProcess,
  waitReady,
} from '../../rigs/harness';
import {
  findPostgresBinaries,
  type LocalPostgres,
  makeRunner,
  startLocalPostgres,
  stopLocalPostgresIn,
} from '../../rigs/local-postgres';
import { type LatencyProxy, startLatencyProxy } from './latency-proxy';
import { withClient } from './postgres';

/**
 * A PostgreSQL failover bed (issue 32): a primary and a streaming standby on the machine's own
 * binaries, the standby's replication link through a pausable proxy (paused, the standby misses
 * commits: asynchronous replication), and one address the replicas reach PostgreSQL through, a
 * {@link SwitchProxy} that the test re-points from the primary to the promoted standby as a DNS
 * name or a virtual IP would. Plus the built receiver's replicas as child processes.
 */

/** A TCP proxy whose target can change: new connections go to the current one; a switch cuts the open ones. */
export interface SwitchProxy {
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  through(url: string): string;
  /** From now on connections go to `port`; every open connection is cut (as a VIP moving does). */
  switchTo(port: number): void;
  close(): Promise<void>;
}

export async function startSwitchProxy(targetPort: number): Promise<SwitchProxy> {
  let target = targetPort;
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  const server: Server = createServer((client) => {
    const upstream = connect(target, HOST);
    const pair = { client, upstream };
    pairs.add(pair);
    const cut = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', cut).on('close', cut);
    upstream.on('error', cut).on('close', cut);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const cutAll = () => {
    for (const { client, upstream } of [...pairs]) {
      client.destroy();
      upstream.destroy();
    }
    pairs.clear();
  };
  return {
    port,
    through: (url) => {
      const u = new URL(url);
      u.hostname = HOST;
      u.port = String(port);
      return u.toString();
    },
    switchTo: (p) => {
      target = p;
      cutAll();
    },
    close: async () => {
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A primary, its streaming standby behind a pausable replication proxy, and the replicas' switchable address. */
export interface PostgresPair {
  readonly primary: LocalPostgres;
  /** The standby's port and URL (`consig` database, trust on loopback). */
  readonly standbyPort: number;
  readonly standbyUrl: string;
  readonly standbyDir: string;
  /** The standby's link to the primary: pause() makes it miss commits; close() drops what it held. */
  readonly replication: LatencyProxy;
  /** What the replicas' DATABASE_URL names. */
  readonly proxy: SwitchProxy;
  /** DATABASE_URL for the replicas: the `consig` database through {@link proxy}. */
  readonly url: string;
  /** Waits until the standby has replayed everything the primary had written when the call began. */
  waitCaughtUp(timeoutMs?: number): Promise<void>;
  /** The standby's replay lag behind the primary in bytes (null when the primary does not answer). */
  lagBytes(): Promise<number | null>;
  /** `pg_ctl promote -w` on the standby: it accepts writes once this resolves. */
  promote(): Promise<void>;
  stop(): Promise<void>;
}

/** Settings of both servers: durable (fsync on, synchronous_commit on: no standby waited for), replication on. */
const SETTINGS = {
  wal_level: 'replica',
  max_wal_senders: 10,
  wal_keep_size: '1GB',
  max_connections: 200,
  hot_standby: 'on',
  // The standby reconnects at once once the link is back (not the default 5 s).
  wal_retrieve_retry_interval: '200ms',
};

export async function startPostgresPair(): Promise<PostgresPair> {
  const primary = await startLocalPostgres({ fast: false, settings: SETTINGS });
  const replication = await startLatencyProxy({ host: HOST, port: primary.port }, 0);
  const standbyDir = mkdtempSync(join(tmpdir(), 'consig-pg-standby-'));
  let standbyPort = 0;
  try {
    standbyPort = await startStandby(standbyDir, new URL(replication.through(primary.url)).port);
  } catch (err) {
    await replication.close();
    await primary.stop();
    await stopLocalPostgresIn(standbyDir);
    throw err;
  }
  const proxy = await startSwitchProxy(primary.port);
  const standbyUrl = `postgres://postgres@${HOST}:${standbyPort}/consig`;
  const lagBytes = () =>
    withClient(primary.url, async (c) => {
      const { rows } = await c.query<{ lag: string | null }>(
        'SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::text AS lag FROM pg_stat_replication',
      );
      return rows[0]?.lag == null ? null : Number(rows[0].lag);
    }).catch(() => null);
  return {
    primary,
    standbyPort,
    standbyUrl,
    standbyDir,
    replication,
    proxy,
    url: proxy.through(primary.url),
    lagBytes,
    waitCaughtUp: (timeoutMs = 30_000) => waitCaughtUp(primary.url, standbyUrl, timeoutMs),
    promote: async () => {
      const bin = findPostgresBinaries();
      await makeRunner().run(
        join(bin, 'pg_ctl'),
        ['promote', '-D', join(standbyDir, 'data'), '-w', '-t', '60', '-s'],
        standbyDir,
      );
    },
    stop: async () => {
      await proxy.close();
      await replication.close();
      await primary.stop();
      await stopLocalPostgresIn(standbyDir);
    },
  };
}

/** pg_basebackup -R through the replication proxy, the standby's own settings, pg_ctl start; its port. */
async function startStandby(dir: string, replicationPort: string): Promise<number> {
  const bin = findPostgresBinaries();
  const runner = makeRunner();
  if (runner.owner) chownSync(dir, runner.owner.uid, runner.owner.gid);
  const dataDir = join(dir, 'data');
  await runner.run(
    join(bin, 'pg_basebackup'),
    ['-h', HOST, '-p', replicationPort, '-U', 'postgres', '-D', dataDir, '-R', '-X', 'stream', '-c', 'fast'],
    dir,
  );
  const port = await freePort();
  const conf = {
    ...SETTINGS,
    listen_addresses: HOST,
    port,
    unix_socket_directories: dataDir.length <= 80 ? dataDir : '',
  };
  const file = join(dataDir, 'consig-local.conf');
  writeFileSync(
    file,
    Object.entries(conf)
      .map(([k, v]) => `${k} = ${typeof v === 'string' ? `'${v}'` : v}\n`)
      .join(''),
  );
  if (runner.owner) chownSync(file, runner.owner.uid, runner.owner.gid);
  await runner.run(
    join(bin, 'pg_ctl'),
    ['start', '-D', dataDir, '-l', join(dir, 'server.log'), '-w', '-t', '60', '-s'],
    dir,
  );
  return port;
}

async function waitCaughtUp(primaryUrl: string, standbyUrl: string, timeoutMs: number): Promise<void> {
  const target = await withClient(primaryUrl, async (c) => {
    const { rows } = await c.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    return rows[0]?.lsn as string;
  });
  const until = Date.now() + timeoutMs;
  for (;;) {
    const behind = await withClient(standbyUrl, async (c) => {
      const { rows } = await c.query<{ behind: boolean }>(
        'SELECT pg_last_wal_replay_lsn() < $1::pg_lsn AS behind',
        [target],
      );
      return rows[0]?.behind !== false;
    });
    if (!behind) return;
    if (Date.now() > until)
      throw new Error(`the standby did not replay up to ${target} within ${timeoutMs} ms`);
    await sleep(50);
  }
}

// ---------------------------------------------------------------------------------------------
// The replicas: the built receiver, `serve` in cluster mode
// ---------------------------------------------------------------------------------------------

export interface FailoverReplica extends Proc {
  readonly id: string;
  readonly port: number;
  readonly spool: string;
  readonly logPath: string;
}

/** Starts `node <bin> serve` with `env` on a free port, its output to `<dir>/<id>.log`; resolves once /readyz answers 200. */
export async function startReplica(
  bin: string,
  dir: string,
  id: string,
  env: Record<string, string>,
): Promise<FailoverReplica> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const logPath = join(dir, `${id}.log`);
  const spool = join(dir, `${id}.db`);
  const proc = spawnServe(
    bin,
    { HOST, PORT: String(port), DATABASE_PATH: spool, REPLICA_ID: id, ...env },
    logPath,
  );
  if (!(await waitReady(proc, port, logPath)))
    throw new Error(`${id} exited before it was ready:\n${logTail(logPath)}`);
  return { id, port, spool, logPath, ...proc };
}

/** SIGTERM, SIGKILL after 30 s; the exit code (null when killed). */
export const stopReplica = (r: FailoverReplica): Promise<number | null> => stopProcess(r.child);

/** The value of a counter or gauge (summed over its label sets) in a replica's /metrics; null when absent. */
export async function metricSum(port: number, name: string): Promise<number | null> {
  const res = await httpGet(port, '/metrics', 3000);
  return res === null || res.status !== 200 ? null : metricTotal(res.body, name);
}
