import type { ChildProcess } from 'node:child_process';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

/**
 * What the bench and the tests both need to run the built receiver and measure it: ports, a GET on
 * loopback, /metrics values, percentiles and medians, and process control (spawn `serve`, wait for
 * /readyz, SIGKILL, SIGTERM and wait). One home for bench/ and test/ (issue 33): bench/ is compiled
 * into dist/bench (tsconfig.build.json), and ts-jest compiles it for the tests.
 */

export const HOST = '127.0.0.1';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Ports

/** The port if 127.0.0.1:`port` can be listened on now (0: any free port), else null. */
export function canListen(port: number): Promise<number | null> {
  return new Promise((done) => {
    const probe = createServer();
    probe.once('error', () => done(null));
    probe.listen(port, HOST, () => {
      const address = probe.address();
      const got = typeof address === 'object' && address !== null ? address.port : null;
      probe.close(() => done(got));
    });
  });
}

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort(): Promise<number> {
  const port = await canListen(0);
  if (port === null) throw new Error('no free port on 127.0.0.1');
  return port;
}

/**
 * A free port kept across restarts of its process: below Linux's ephemeral range (32768–60999) when
 * possible, so that no outgoing connection made while the process is down can be given it.
 */
export async function stablePort(taken: readonly number[] = []): Promise<number> {
  for (let i = 0; i < 40; i++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (!taken.includes(port) && (await canListen(port)) !== null) return port;
  }
  return freePort();
}

// ---------------------------------------------------------------------------------------------
// HTTP and /metrics

/** A GET on loopback: status and body, or null when there was no answer in time. */
export function httpGet(
  port: number,
  path: string,
  timeoutMs = 2000,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string } | null> {
  return new Promise((done) => {
    const req = request({ host: HOST, port, path, headers, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => done({ status: res.statusCode ?? 0, body }));
      res.on('error', () => done(null));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => done(null));
    req.end();
  });
}

/** The first value of a counter or gauge in a /metrics text (any label set); null when absent. */
export function metric(text: string, name: string): number | null {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
  return m?.[1] === undefined ? null : Number(m[1]);
}

/** The sum of a counter or gauge over its label sets in a /metrics text; null when absent. */
export function metricTotal(text: string, name: string): number | null {
  const values = [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].map((m) =>
    Number(m[1]),
  );
  return values.length === 0 ? null : values.reduce((s, v) => s + v, 0);
}

// ---------------------------------------------------------------------------------------------
// Statistics

/** Nearest-rank percentile (`p` from 0 to 1) of ascending `sorted` samples; NaN when there are none. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil(p * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))] as number;
}

/** The item with the median `by` (the lower one of an even count); undefined when there is none. */
export function medianBy<T>(items: readonly T[], by: (t: T) => number): T | undefined {
  return [...items].sort((a, b) => by(a) - by(b))[Math.floor((items.length - 1) / 2)];
}

/** `n` with `digits` decimals; '-' for null or NaN. */
export function fixed(n: number | null, digits: number): string {
  return n === null || Number.isNaN(n) ? '-' : n.toFixed(digits);
}

/** The median of `xs` (the lower middle one of an even count); NaN when empty. */
export function median(xs: readonly number[]): number {
  return medianBy(xs, (x) => x) ?? Number.NaN;
}

// ---------------------------------------------------------------------------------------------
// Processes

/** The built receiver's CLI, from dist/bench (built) or bench/ (ts-jest). */
export function defaultBin(): string {
  const candidates = [
    resolve(__dirname, '..', 'src', 'cli', 'bin.js'),
    resolve(__dirname, '..', 'dist', 'src', 'cli', 'bin.js'),
  ];
  return candidates.find((c) => existsSync(c)) ?? (candidates[1] as string);
}

/** The last `chars` of a log file ('(no log)' when there is none). */
export function logTail(path: string, chars = 3000): string {
  try {
    return readFileSync(path, 'utf8').slice(-chars);
  } catch {
    return '(no log)';
  }
}

export type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** A child process and the promise of its exit. */
export interface Proc {
  child: ChildProcess;
  exited: Promise<Exit>;
}

export const isAlive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** `node <bin> serve` with only PATH of this process's environment and `env`, its output appended to `logPath`. */
export function spawnServe(bin: string, env: NodeJS.ProcessEnv, logPath: string): Proc {
  const fd = openSync(logPath, 'a');
  const child = spawn(process.execPath, [bin, 'serve'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  return { child, exited: exitOf(child) };
}

/** The promise of a child's exit (resolved at once when it has already exited). */
export function exitOf(child: ChildProcess): Promise<Exit> {
  if (!isAlive(child)) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((done) => child.once('exit', (code, signal) => done({ code, signal })));
}

/**
 * Resolves true once GET /readyz on `port` answers 200, false when the process exited first;
 * throws after `timeoutMs` with the log's tail.
 */
export async function waitReady(
  proc: Proc,
  port: number,
  logPath: string,
  timeoutMs = 60_000,
): Promise<boolean> {
  let gone = !isAlive(proc.child);
  void proc.exited.then(() => (gone = true));
  const until = Date.now() + timeoutMs;
  while (!gone && (await httpGet(port, '/readyz', 2000))?.status !== 200) {
    if (Date.now() > until) throw new Error(`not ready within ${timeoutMs / 1000} s:\n${logTail(logPath)}`);
    await sleep(25);
  }
  return !gone;
}

/**
 * Starts a process with `start` until GET /readyz on its fixed `port` answers 200; tried again (5
 * tries) when it exited because the port was taken for a moment by someone else.
 */
export async function startOnPort(
  start: () => Proc,
  port: number,
  logPath: string,
  timeoutMs = 60_000,
): Promise<Proc> {
  for (let tries = 1; ; tries++) {
    const proc = start();
    if (await waitReady(proc, port, logPath, timeoutMs)) return proc;
    if (!/EADDRINUSE/.test(logTail(logPath, 500)) || tries >= 5)
      throw new Error(`exited before it was ready:\n${logTail(logPath)}`);
    await sleep(200);
  }
}

/** Polls `check` every `everyMs` until it holds; throws when `alive` turns false or after `timeoutMs`. */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  alive: () => boolean,
  everyMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (!alive()) throw new Error(`${what}: the process died`);
    if (Date.now() > deadline) throw new Error(`${what}: not done in ${timeoutMs / 1000} s`);
    await sleep(everyMs);
  }
}

/** SIGTERM (the receiver drains and closes its store), SIGKILL after `graceMs`; the exit code (null when killed). */
export async function stopProcess(child: ChildProcess, graceMs = 30_000): Promise<number | null> {
  if (!isAlive(child)) return child.exitCode;
  const exited = exitOf(child);
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  const { code } = await exited;
  clearTimeout(timer);
  return code;
}

/** SIGKILL and wait for the exit; throws when it ended otherwise. */
export async function killProcess(proc: Proc, what = 'the process'): Promise<void> {
  proc.child.kill('SIGKILL');
  const { signal } = await proc.exited;
  if (signal !== 'SIGKILL') throw new Error(`${what} ended with ${signal ?? 'an exit'}, not SIGKILL`);
}

/** user + system CPU of a process in µs (its reaped children too, with `children`), from /proc (null elsewhere or when it is gone). */
export function cpuMicros(pid: number | undefined, children = false): number | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // proc_pid_stat(5): utime, stime, cutime, cstime are fields 14–17, in USER_HZ (100 on Linux).
    const ticks = Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0);
    return ticks * 10_000;
  } catch {
    return null;
  }
}

/** Peak resident set (VmHWM) of a process in MB, from /proc (null elsewhere). */
export function peakRss(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m?.[1] === undefined ? null : Number(m[1]) / 1024;
  } catch {
    return null;
  }
}

/** Pins processes, every thread of each, to `cpus` (taskset's list form); one that exited is skipped. */
export function pinToCpus(pids: readonly (number | undefined)[], cpus: string): void {
  for (const pid of pids) {
    if (pid === undefined) continue;
    try {
      execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    } catch {
      // exited meanwhile
    }
  }
}
