import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { exitOf, freePort, HOST, isAlive, logTail, type Proc, sleep, stopProcess } from '../../rigs/harness';
import { deriveHaproxyConfig, shippedHaproxyConfig } from './haproxy-config';

/**
 * A real HAProxy in front of the replicas (the upgrade tier, issue 46 item 5), started from the
 * machine's own binary (Debian's `haproxy`, which scripts/install-ci-packages.sh installs) on the
 * configuration derived from deploy/compose/haproxy.cfg (haproxy-config.ts). Never skipped: without
 * the binary the error says how to get it.
 */

export interface ServerStat {
  /** HAProxy's status: `UP`, `DOWN`, `UP 1/2` (going down), `DOWN 1/2` (coming up), `MAINT`, … */
  status: string;
  /** Answers 2xx and 5xx this server gave through the balancer. */
  http2xx: number;
  http5xx: number;
}

export interface Haproxy {
  /** The frontend's port on 127.0.0.1: where the service's deliveries go. */
  readonly port: number;
  readonly logPath: string;
  /** Each server's state, from the runtime API's `show stat`. */
  stats(): Promise<Map<string, ServerStat>>;
  /** Resolves once HAProxy has `server` UP (its /readyz passed `rise` checks in a row). */
  waitUp(server: string, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

const INSTALL_HINT =
  "run `bash scripts/install-ci-packages.sh` (installs Debian's haproxy), or set HAPROXY_BIN";

/** HAPROXY_BIN, /usr/sbin/haproxy (Debian), or `haproxy` on PATH. */
export function findHaproxy(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HAPROXY_BIN) {
    if (existsSync(env.HAPROXY_BIN)) return env.HAPROXY_BIN;
    throw new Error(`HAPROXY_BIN=${env.HAPROXY_BIN} does not exist; ${INSTALL_HINT}`);
  }
  if (existsSync('/usr/sbin/haproxy')) return '/usr/sbin/haproxy';
  const which = spawnSync('sh', ['-c', 'command -v haproxy'], { encoding: 'utf8' });
  const found = which.stdout.trim();
  if (which.status === 0 && found !== '') return found;
  throw new Error(`HAProxy not found (looked at HAPROXY_BIN, /usr/sbin/haproxy, PATH); ${INSTALL_HINT}`);
}

/** Starts HAProxy in the foreground (`-db`) with the derived configuration in `dir`; resolves once it listens. */
export async function startHaproxy(
  dir: string,
  servers: readonly { name: string; port: number }[],
): Promise<Haproxy> {
  const bin = findHaproxy();
  const port = await freePort();
  const socket = join(dir, 'haproxy.sock');
  const configPath = join(dir, 'haproxy.cfg');
  // A free port for each listener the shipped file binds on 127.0.0.1 (`last-resort`).
  const internalPorts: Record<number, number> = {};
  for (const [, shippedPort] of shippedHaproxyConfig().matchAll(/^\s*bind\s+127\.0\.0\.1:(\d+)/gm))
    internalPorts[Number(shippedPort)] = await freePort();
  writeFileSync(
    configPath,
    deriveHaproxyConfig(shippedHaproxyConfig(), {
      bindPort: port,
      internalPorts,
      servers,
      statsSocket: socket,
    }),
  );
  const check = spawnSync(bin, ['-c', '-q', '-f', configPath], { encoding: 'utf8' });
  if (check.status !== 0)
    throw new Error(`haproxy -c refused the derived configuration:\n${check.stdout}${check.stderr}`);
  const logPath = join(dir, 'haproxy.log');
  const fd = openSync(logPath, 'a');
  const child = spawn(bin, ['-db', '-f', configPath], { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const proc: Proc = { child, exited: exitOf(child) };
  const backend = /^backend\s+(\S+)/m.exec(shippedHaproxyConfig())?.[1] ?? '';
  const stats = () => showStat(socket, backend);
  await waitListening(proc, port, logPath);
  return {
    port,
    logPath,
    stats,
    waitUp: async (server, timeoutMs = 30_000) => {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const s = (await stats().catch(() => new Map<string, ServerStat>())).get(server);
        if (s?.status === 'UP') return;
        if (!isAlive(child)) throw new Error(`haproxy exited:\n${logTail(logPath)}`);
        if (Date.now() > until)
          throw new Error(
            `haproxy: ${server} not UP within ${timeoutMs / 1000} s (${s?.status ?? 'unknown'})`,
          );
        await sleep(100);
      }
    },
    stop: async () => {
      await stopProcess(child, 5000);
    },
  };
}

async function waitListening(proc: Proc, port: number, logPath: string): Promise<void> {
  const until = Date.now() + 10_000;
  for (;;) {
    const open = await new Promise<boolean>((done) => {
      const s = connect(port, HOST);
      s.once('connect', () => {
        s.destroy();
        done(true);
      });
      s.once('error', () => done(false));
    });
    if (open) return;
    if (!isAlive(proc.child) || Date.now() > until)
      throw new Error(`haproxy did not listen on ${port}:\n${logTail(logPath)}`);
    await sleep(50);
  }
}

/** The servers of `backend` in `show stat` (CSV, its header naming the columns). */
function showStat(socket: string, backend: string): Promise<Map<string, ServerStat>> {
  return new Promise((done, fail) => {
    const s = connect(socket);
    let text = '';
    s.setEncoding('utf8');
    s.on('data', (c: string) => (text += c));
    s.once('error', fail);
    s.once('end', () => {
      const [header, ...rows] = text.split('\n').filter((l) => l.trim() !== '');
      const names = (header ?? '').replace(/^# /, '').split(',');
      const col = (row: string[], name: string) => row[names.indexOf(name)] ?? '';
      const out = new Map<string, ServerStat>();
      for (const row of rows.map((r) => r.split(','))) {
        const sv = col(row, 'svname');
        if (col(row, 'pxname') !== backend || sv === 'BACKEND') continue;
        out.set(sv, {
          status: col(row, 'status'),
          http2xx: Number(col(row, 'hrsp_2xx')),
          http5xx: Number(col(row, 'hrsp_5xx')),
        });
      }
      done(out);
    });
    s.end('show stat\n');
  });
}
