import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { SECRET } from './payloads';
import { tempDir } from './tmp';

/** The built command-line entry point (`npm test` builds before jest runs). */
export const BIN = resolve(__dirname, '../../dist/src/cli/bin.js');

export interface RunResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion. */
export function runCli(args: string[], env: Record<string, string> = {}): RunResult {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export interface ServerProcess {
  child: ChildProcess;
  url: string;
  output: () => string;
  /** Resolves once the process has exited and its output has been read to the end. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `serve` as a real child process and resolves once it logs its URL. */
export function startServe(env: Record<string, string>, timeoutMs = 30_000): Promise<ServerProcess> {
  return spawnServe(env, timeoutMs).ready;
}

/** Like startServe, but hands out the child at once (to kill it before it even listens). */
export function spawnServe(
  env: Record<string, string>,
  timeoutMs = 30_000,
): { child: ChildProcess; ready: Promise<ServerProcess> } {
  const child = spawn(process.execPath, [BIN, 'serve'], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  // 'close', not 'exit': the child has exited and its stdout and stderr are read to their end, so
  // that output() holds every line it wrote (a line written just before the exit can arrive after
  // 'exit').
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) =>
    child.once('close', (code, signal) => res({ code, signal })),
  );
  const ready = new Promise<ServerProcess>((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not start within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const match = /"url":"(http:\/\/[^"]+)".*"msg":"consig-receiver listening"/.exec(out);
      if (match?.[1]) {
        clearTimeout(timer);
        resolvePromise({ child, url: match[1], output: () => out, exited });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${code ?? signal}) before listening:\n${out}`));
    });
  });
  ready.catch(() => undefined);
  return { child, ready };
}

/** Runs a command without blocking the event loop (for commands that talk to a fake in this process). */
export function runCliAsync(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/**
 * For e2e tests of `serve` on one database file: a fresh temp file per test, and every process
 * started with `serve()` SIGKILLed after it. Registers its own beforeEach/afterEach.
 */
export function serveOnOneFile(baseEnv: Record<string, string> = {}, fileInDir = 'data/consig.db') {
  let tmp: ReturnType<typeof tempDir> | undefined;
  let dbPath = '';
  let servers: ServerProcess[] = [];
  beforeEach(() => {
    tmp = tempDir('consig-e2e-');
    dbPath = join(tmp.dir, fileInDir);
    servers = [];
  });
  afterEach(() => {
    for (const s of servers) s.child.kill('SIGKILL');
    tmp?.cleanup();
  });
  return {
    /** This test's database file. */
    get dbPath(): string {
      return dbPath;
    },
    /** Starts `serve` on the file (signed with SECRET, info logs) once it listens. */
    async serve(extra: Record<string, string> = {}): Promise<ServerProcess> {
      const s = await startServe({
        DATABASE_PATH: dbPath,
        WEBHOOK_SECRETS: SECRET,
        LOG_LEVEL: 'info',
        ...baseEnv,
        ...extra,
      });
      servers.push(s);
      return s;
    },
  };
}
