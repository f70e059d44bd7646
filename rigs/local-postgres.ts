import { execFile, execFileSync } from 'node:child_process';
import {
  appendFileSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client } from 'pg';
import { ConsigError } from '../src/domain/errors';
import { freePort } from './harness';

/**
 * A throwaway PostgreSQL server on the machine's own binaries, for the tests, the benchmark and the
 * cluster demo: `initdb` in a fresh directory, started with `pg_ctl` on a free loopback port, with a
 * database `consig`. Nothing is downloaded; when the binaries are missing the error says how to get
 * them. Several jest workers may each start one at once: every instance has its own directory, port
 * and socket directory.
 */

/** Says how to get the binaries; part of every "missing binaries" message. */
export const INSTALL_HINT =
  "run `bash scripts/install-ci-packages.sh` (installs Debian's postgresql package: PostgreSQL 15 on Debian 12), or set PG_BIN to the directory holding initdb and pg_ctl";

export class LocalPostgresError extends ConsigError {
  constructor(code: 'POSTGRES_BINARIES_MISSING' | 'POSTGRES_START_FAILED', message: string) {
    super(code, message);
  }
}

export interface LocalPostgresOptions {
  /**
   * Directory that holds the cluster (`data/` and `server.log`); created if missing, must be empty.
   * @default a new directory under `os.tmpdir()`
   */
  dir?: string;
  /**
   * TCP port on 127.0.0.1. When it is not given, a free one is picked, and picked again if another
   * process takes it before the server binds it.
   * @default a free port
   */
  port?: number;
  /**
   * Turns off `fsync`, `synchronous_commit` and `full_page_writes`: fast, but a crash of the machine
   * (not of the server) may lose or corrupt data. Leave it off for crash and durability tests.
   * @default false
   */
  fast?: boolean;
  /** More server settings, written to the configuration file (`{ max_connections: 300 }`). @default {} */
  settings?: Readonly<Record<string, string | number | boolean>>;
  /** Leave the directory in place on `stop()`, to read the log or the data afterwards. @default false */
  keep?: boolean;
}

export interface LocalPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/consig` (trust authentication, loopback only). */
  readonly url: string;
  readonly port: number;
  /** The cluster's data directory (`PGDATA`). */
  readonly dataDir: string;
  /** The directory holding `dataDir` and `logFile`; removed by `stop()` unless `keep`. */
  readonly dir: string;
  /** The server's log. */
  readonly logFile: string;
  /** Stops the server (`pg_ctl stop -m fast`) and removes `dir`. Safe to call twice, or after `kill9()`. */
  stop(): Promise<void>;
  /**
   * `pg_ctl restart -m <mode>`: `immediate` is a crash as far as the data is concerned (no
   * checkpoint; the start replays the WAL), `fast` a clean shutdown. After `kill9()` it starts the
   * server again.
   */
  restart(options: { mode: 'immediate' | 'fast' }): Promise<void>;
  /**
   * `pg_ctl stop -m <mode>`, leaving the directory in place: an outage that lasts until `restart()`
   * starts the server again.
   */
  halt(options: { mode: 'immediate' | 'fast' }): Promise<void>;
  /** SIGKILLs the postmaster and its children, as a machine crash would stop them. */
  kill9(): void;
}

const DATABASE = 'consig';
const SUPERUSER = 'postgres';
/** Unix sockets have a path limit of 107 bytes on Linux; `.s.PGSQL.65535.lock` takes 20. */
const MAX_SOCKET_DIR = 80;
const PG_CTL_TIMEOUT_S = 60;
const live = new Set<() => void>();

/**
 * The directory holding `initdb` and `pg_ctl`: `PG_BIN`, else `pg_config --bindir`, else the highest
 * `/usr/lib/postgresql/<version>/bin` (Debian's layout).
 */
export function findPostgresBinaries(env: NodeJS.ProcessEnv = process.env): string {
  const hasServer = (dir: string): boolean =>
    existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'pg_ctl')) && existsSync(join(dir, 'postgres'));
  if (env.PG_BIN) {
    if (hasServer(env.PG_BIN)) return env.PG_BIN;
    throw new LocalPostgresError(
      'POSTGRES_BINARIES_MISSING',
      `PG_BIN=${env.PG_BIN} holds no initdb, pg_ctl and postgres; ${INSTALL_HINT}`,
    );
  }
  const candidates: string[] = [];
  try {
    // libpq-dev alone also ships pg_config; its bindir then has no server, hence the check below.
    candidates.push(execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: 'pipe' }).trim());
  } catch {
    // no pg_config on PATH
  }
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((v) => /^\d+(\.\d+)?$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((v) => join(debian, v, 'bin')));
  }
  const found = candidates.find((dir) => dir !== '' && hasServer(dir));
  if (found) return found;
  throw new LocalPostgresError(
    'POSTGRES_BINARIES_MISSING',
    `PostgreSQL server binaries (initdb, pg_ctl) not found (looked at PG_BIN, pg_config --bindir, ${debian}/<version>/bin); ${INSTALL_HINT}`,
  );
}

/** How the binaries are run: directly, or as `postgres` when we are root (the server refuses root). */
export interface Runner {
  run(file: string, args: string[], cwd: string): Promise<string>;
  owner: { uid: number; gid: number } | undefined;
}

export function makeRunner(): Runner {
  if (process.getuid?.() !== 0) return { run: (file, args, cwd) => exec(file, args, cwd), owner: undefined };
  let uid: number;
  let gid: number;
  try {
    uid = Number(execFileSync('id', ['-u', SUPERUSER], { encoding: 'utf8', stdio: 'pipe' }).trim());
    gid = Number(execFileSync('id', ['-g', SUPERUSER], { encoding: 'utf8', stdio: 'pipe' }).trim());
  } catch {
    throw new LocalPostgresError(
      'POSTGRES_BINARIES_MISSING',
      `running as root, but there is no "${SUPERUSER}" user to run the server as; ${INSTALL_HINT}`,
    );
  }
  const runuser = ['/usr/sbin/runuser', '/sbin/runuser', '/usr/bin/runuser'].find((p) => existsSync(p));
  return {
    owner: { uid, gid },
    run: (file, args, cwd) =>
      runuser
        ? exec(runuser, ['-u', SUPERUSER, '--', file, ...args], cwd)
        : exec('su', [SUPERUSER, '-s', '/bin/sh', '-c', [file, ...args].map(shellQuote).join(' ')], cwd),
  };
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function exec(file: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    execFile(file, args, { cwd, encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${[file, ...args].join(' ')}: ${(stderr || stdout || err.message).trim()}`));
      else resolvePromise(stdout);
    });
  });
}

function logTail(logFile: string, lines = 30): string {
  try {
    return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no server log)';
  }
}

function serverConfig(port: number, dataDir: string, options: LocalPostgresOptions): string {
  const settings: Record<string, string | number | boolean> = {
    listen_addresses: '127.0.0.1',
    port,
    // Our own socket directory: Debian's default /var/run/postgresql may be missing or shared.
    unix_socket_directories: dataDir.length <= MAX_SOCKET_DIR ? dataDir : '',
    ...(options.fast ? { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' } : {}),
    ...options.settings,
  };
  const quote = (v: string | number | boolean): string =>
    typeof v === 'string' ? `'${v.replace(/'/g, "''")}'` : String(v);
  return Object.entries(settings)
    .map(([k, v]) => `${k} = ${quote(v)}\n`)
    .join('');
}

/** Starts a fresh server; see {@link LocalPostgresOptions}. Throws {@link LocalPostgresError}. */
export async function startLocalPostgres(options: LocalPostgresOptions = {}): Promise<LocalPostgres> {
  const bin = findPostgresBinaries();
  const runner = makeRunner();
  const dir = options.dir ? resolve(options.dir) : mkdtempSync(join(tmpdir(), 'consig-pg-'));
  mkdirSync(dir, { recursive: true });
  if (readdirSync(dir).length > 0) {
    throw new LocalPostgresError(
      'POSTGRES_START_FAILED',
      `${dir} is not empty; give an empty or new directory`,
    );
  }
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  const pgCtl = (args: string[]): Promise<string> =>
    runner.run(
      join(bin, 'pg_ctl'),
      [...args, '-D', dataDir, '-w', '-t', String(PG_CTL_TIMEOUT_S), '-s'],
      dir,
    );
  try {
    await initCluster(runner, bin, dir, dataDir);
    const port = await startOnPort(options, logFile, (p) => {
      writeOwned(runner, join(dataDir, 'consig-local.conf'), serverConfig(p, dataDir, options));
      return pgCtl(['start', '-l', logFile]);
    });
    await createDatabase(port);
    return handle({ dir, dataDir, logFile, port, keep: options.keep ?? false, pgCtl });
  } catch (err) {
    killCluster(dataDir);
    const failure =
      err instanceof LocalPostgresError
        ? err
        : new LocalPostgresError(
            'POSTGRES_START_FAILED',
            `could not start PostgreSQL in ${dir}: ${(err as Error).message}` +
              (existsSync(logFile) ? `\n--- server log (tail) ---\n${logTail(logFile)}` : ''),
          );
    if (!options.keep) rmSync(dir, { recursive: true, force: true });
    throw failure;
  }
}

/** initdb into `dataDir`, and the include of our settings file (written before each start). */
async function initCluster(runner: Runner, bin: string, dir: string, dataDir: string): Promise<void> {
  if (runner.owner) {
    chownSync(dir, runner.owner.uid, runner.owner.gid);
    await runner.run('test', ['-w', dir, '-a', '-x', dir], dir).catch(() => {
      throw new LocalPostgresError(
        'POSTGRES_START_FAILED',
        `the ${SUPERUSER} user (who runs the server when we are root) cannot reach ${dir}: every directory above it must be searchable (o+x) by that user; give a dir under ${tmpdir()}`,
      );
    });
  }
  // --no-sync: initdb's own files need no fsync for a throwaway server; the server's writes keep
  // theirs (fsync on unless `fast`).
  const args = ['-D', dataDir, '-U', SUPERUSER, '--auth-local=trust', '--auth-host=trust'];
  await runner.run(
    join(bin, 'initdb'),
    [...args, '--encoding=UTF8', '--locale=C', '--no-sync', '--no-instructions'],
    dir,
  );
  appendFileSync(join(dataDir, 'postgresql.conf'), "\ninclude 'consig-local.conf'\n");
}

function writeOwned(runner: Runner, file: string, content: string): void {
  writeFileSync(file, content);
  if (runner.owner) chownSync(file, runner.owner.uid, runner.owner.gid);
}

/**
 * Starts on the given port, or on free ones: between our probe and the server's bind another process
 * (another jest worker) may take the port, and then the next one is tried.
 */
async function startOnPort(
  options: LocalPostgresOptions,
  logFile: string,
  start: (port: number) => Promise<string>,
): Promise<number> {
  const taken = /could not bind|Address already in use|could not create any TCP\/IP sockets/i;
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      await start(port);
      return port;
    } catch (err) {
      // pg_ctl only says "could not start server"; the reason is in the log.
      if (options.port !== undefined || attempt >= 5 || !taken.test(logTail(logFile, 10))) throw err;
      writeFileSync(logFile, '');
    }
  }
}

async function createDatabase(port: number): Promise<void> {
  const client = new Client({ host: '127.0.0.1', port, user: SUPERUSER, database: 'postgres' });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await client.end();
  }
}

interface Started {
  dir: string;
  dataDir: string;
  logFile: string;
  port: number;
  keep: boolean;
  pgCtl: (args: string[]) => Promise<string>;
}

function handle(s: Started): LocalPostgres {
  let stopped = false;
  let killed: number[] = [];
  const cleanupAtExit = (): void => {
    killCluster(s.dataDir);
    if (!s.keep) rmSync(s.dir, { recursive: true, force: true });
  };
  track(cleanupAtExit);
  return {
    url: `postgres://${SUPERUSER}@127.0.0.1:${s.port}/${DATABASE}`,
    port: s.port,
    dataDir: s.dataDir,
    dir: s.dir,
    logFile: s.logFile,
    async stop() {
      if (stopped) return;
      stopped = true;
      untrack(cleanupAtExit);
      try {
        if (postmasterAlive(s.dataDir)) await s.pgCtl(['stop', '-m', 'fast']);
      } catch {
        // Not stopping in time: make sure nothing is left behind.
        killCluster(s.dataDir);
      }
      if (!s.keep) rmSync(s.dir, { recursive: true, force: true });
    },
    async restart({ mode }) {
      await waitGone(killed);
      killed = [];
      try {
        if (postmasterAlive(s.dataDir)) {
          await s.pgCtl(['restart', '-m', mode, '-l', s.logFile]);
        } else {
          // After kill9 the dead postmaster may linger as a zombie (an init that does not reap, as in
          // some containers); pg_ctl and the server would take it for a running one. It is dead, and
          // its children with it (killCluster), so its lock files are stale.
          for (const lock of ['postmaster.pid', `.s.PGSQL.${s.port}.lock`, `.s.PGSQL.${s.port}`])
            rmSync(join(s.dataDir, lock), { force: true });
          await s.pgCtl(['start', '-l', s.logFile]);
        }
      } catch (err) {
        throw new LocalPostgresError(
          'POSTGRES_START_FAILED',
          `PostgreSQL restart (${mode}) failed: ${(err as Error).message}\n--- server log (tail) ---\n${logTail(s.logFile)}`,
        );
      }
    },
    async halt({ mode }) {
      if (postmasterAlive(s.dataDir)) await s.pgCtl(['stop', '-m', mode]);
    },
    kill9() {
      killed = killCluster(s.dataDir);
    },
  };
}

/**
 * Stops the server of a directory that {@link startLocalPostgres} made, from another process than the
 * one that started it (the tests keep one server per jest worker and stop them all at the end of the
 * run), and removes the directory. `immediate`: the server is thrown away, nothing needs a checkpoint.
 */
export async function stopLocalPostgresIn(dir: string): Promise<void> {
  const dataDir = join(dir, 'data');
  if (postmasterAlive(dataDir)) {
    try {
      await makeRunner().run(
        join(findPostgresBinaries(), 'pg_ctl'),
        ['stop', '-m', 'immediate', '-D', dataDir, '-w', '-t', String(PG_CTL_TIMEOUT_S), '-s'],
        dir,
      );
    } catch {
      killCluster(dataDir);
    }
  }
  rmSync(dir, { recursive: true, force: true });
}

/**
 * SIGKILLs the postmaster named in `postmaster.pid` and its children; returns their pids. Children
 * are listed before the postmaster dies (they are re-parented after); the shared memory they hold
 * would otherwise stop the next start ("pre-existing shared memory block is still in use").
 */
function killCluster(dataDir: string): number[] {
  const pid = postmasterPid(dataDir);
  if (pid === undefined || !running(pid)) return [];
  const pids = [pid, ...childrenOf(pid)];
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  return pids;
}

function childrenOf(pid: number): number[] {
  const children: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return children;
  }
  for (const e of entries) {
    try {
      // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split after the last ')'.
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  return children;
}

/** Whether the process is running: it exists and is not a zombie (which holds no memory or sockets). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    if (existsSync('/proc/self/stat')) return false;
    // No procfs (not Linux): ask the kernel, which cannot tell a zombie from a live process.
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
}

function postmasterAlive(dataDir: string): boolean {
  const pid = postmasterPid(dataDir);
  return pid !== undefined && running(pid);
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Waits until the killed processes are gone (or zombies). */
async function waitGone(pids: number[], timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (pids.some(running) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
}

// A test that forgets stop(), or a process ending on an error, must not leave servers behind. The
// listener is there only while servers are (a jest worker loads this module once per test file).
const cleanupAll = (): void => {
  for (const cleanup of live) cleanup();
};

function track(cleanup: () => void): void {
  if (live.size === 0) process.on('exit', cleanupAll);
  live.add(cleanup);
}

function untrack(cleanup: () => void): void {
  live.delete(cleanup);
  if (live.size === 0) process.off('exit', cleanupAll);
}
