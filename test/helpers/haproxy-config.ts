import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

/**
 * The upgrade tier's balancer runs the HAProxy configuration this repository ships
 * (deploy/compose/haproxy.cfg), so that what it shows is what an operator who deploys that file
 * gets: the `/readyz` check and its intervals, the retries on a failed connection, an empty answer
 * or a 503, the redispatch. Only what cannot be the same on a test machine is replaced: the
 * binds (loopback ports) and the replicas' `server` lines (the test's replica slots, each with
 * the shipped server options), in each section that has them. One line is added: a runtime-API socket in `global`, through which
 * the test reads each server's state (the shipped file has none; it changes no decision). Pure:
 * test/unit/upgrade-haproxy-config.test.ts checks the derivation on the shipped file.
 */

export const SHIPPED_HAPROXY_CFG = resolve(__dirname, '..', '..', 'deploy', 'compose', 'haproxy.cfg');

export interface DeriveOptions {
  /** The loopback port the frontend binds. */
  bindPort: number;
  /**
   * The loopback port for each listener the shipped file binds on 127.0.0.1 (`last-resort`), by
   * its shipped port: its bind and the server lines that point at it move there.
   */
  internalPorts: Readonly<Record<number, number>>;
  /** The replica slots, in order: a server each, on 127.0.0.1. */
  servers: readonly { name: string; port: number }[];
  /** The runtime API's unix socket, for `show stat`. */
  statsSocket: string;
}

const BIND = /^(\s*)bind\s+(\S+)(.*)$/;
const SERVER = /^(\s*)server\s+(\S+)\s+(\S+)(.*)$/;
const LOOPBACK = /^127\.0\.0\.1:(\d+)$/;
const SECTION = /^(global|defaults|frontend|backend|listen|resolvers)\b/;
const GLOBAL = /^global\s*$/;

/**
 * `shipped` with its binds and server lines moved to the test's ports, and the stats socket added
 * to `global`. The frontend's public bind goes to `bindPort`; a bind on 127.0.0.1 (the
 * `last-resort` listener) to its `internalPorts` entry, and so does a server line pointing at it.
 * In each section, the server lines of the replicas (any other address) become one line per slot,
 * with the first such line's options.
 */
export function deriveHaproxyConfig(shipped: string, options: DeriveOptions): string {
  const lines = shipped.split('\n');
  const publicBinds = lines.filter((l) => BIND.test(l) && !LOOPBACK.test(BIND.exec(l)?.[2] ?? ''));
  const replicaServers = lines.filter((l) => SERVER.test(l) && !LOOPBACK.test(SERVER.exec(l)?.[3] ?? ''));
  if (publicBinds.length !== 1 || replicaServers.length === 0 || !lines.some((l) => GLOBAL.test(l)))
    throw new Error(
      `${SHIPPED_HAPROXY_CFG}: expected one public bind line, server lines and a global section (found ${publicBinds.length} public bind, ${replicaServers.length} replica server lines): the upgrade tier derives its balancer from that file, see test/helpers/haproxy-config.ts`,
    );
  const internal = (address: string): string => {
    const port = Number(LOOPBACK.exec(address)?.[1]);
    const moved = options.internalPorts[port];
    if (moved === undefined)
      throw new Error(
        `${SHIPPED_HAPROXY_CFG}: 127.0.0.1:${port} has no test port (DeriveOptions.internalPorts): see test/helpers/haproxy-config.ts`,
      );
    return `127.0.0.1:${moved}`;
  };
  const out: string[] = [];
  let serversWritten = false;
  for (const line of lines) {
    const bind = BIND.exec(line);
    const server = SERVER.exec(line);
    if (SECTION.test(line)) serversWritten = false;
    if (GLOBAL.test(line)) {
      out.push(line, `  stats socket ${options.statsSocket} mode 600 level admin`);
    } else if (bind) {
      const [, indent, address, rest] = bind as unknown as [string, string, string, string];
      out.push(
        `${indent}bind ${LOOPBACK.test(address) ? internal(address) : `127.0.0.1:${options.bindPort}`}${rest}`,
      );
    } else if (server) {
      const [, indent, name, address, rest] = server as unknown as [string, string, string, string, string];
      if (LOOPBACK.test(address)) out.push(`${indent}server ${name} ${internal(address)}${rest}`);
      // The section's first replica line's indentation and options (`check`, …) for every slot.
      else if (!serversWritten) {
        for (const s of options.servers) out.push(`${indent}server ${s.name} 127.0.0.1:${s.port}${rest}`);
        serversWritten = true;
      }
    } else out.push(line);
  }
  return out.join('\n');
}

/** The shipped file's text. */
export function shippedHaproxyConfig(): string {
  return readFileSync(SHIPPED_HAPROXY_CFG, 'utf8');
}

/** The lines of a configuration, trimmed, without blanks and comments: what HAProxy reads. */
export function directives(cfg: string): string[] {
  return cfg
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}

export const STATS_SOCKET_LINE = /^stats socket /;
