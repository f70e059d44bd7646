import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

/**
 * The upgrade tier's balancer runs the HAProxy configuration this repository ships
 * (deploy/compose/haproxy.cfg), so that what it shows is what an operator who deploys that file
 * gets: the `/readyz` check and its intervals, the retries on a failed connection, an empty answer
 * or a 503, the redispatch. Only what cannot be the same on a test machine is replaced: the
 * frontend's `bind` (a loopback port) and the `server` lines (the test's replica slots, each with
 * the shipped server options). One line is added: a runtime-API socket in `global`, through which
 * the test reads each server's state (the shipped file has none; it changes no decision). Pure:
 * test/unit/upgrade-haproxy-config.test.ts checks the derivation on the shipped file.
 */

export const SHIPPED_HAPROXY_CFG = resolve(__dirname, '..', '..', 'deploy', 'compose', 'haproxy.cfg');

export interface DeriveOptions {
  /** The loopback port the frontend binds. */
  bindPort: number;
  /** The replica slots, in order: a server each, on 127.0.0.1. */
  servers: readonly { name: string; port: number }[];
  /** The runtime API's unix socket, for `show stat`. */
  statsSocket: string;
}

const BIND = /^(\s*)bind\s+\S+(.*)$/;
const SERVER = /^(\s*)server\s+\S+\s+\S+(.*)$/;
const GLOBAL = /^global\s*$/;

/** `shipped` with its bind and server lines replaced, and the stats socket added to `global`. */
export function deriveHaproxyConfig(shipped: string, options: DeriveOptions): string {
  const lines = shipped.split('\n');
  const binds = lines.filter((l) => BIND.test(l));
  const servers = lines.filter((l) => SERVER.test(l));
  if (binds.length !== 1 || servers.length === 0 || !lines.some((l) => GLOBAL.test(l)))
    throw new Error(
      `${SHIPPED_HAPROXY_CFG}: expected one bind line, server lines and a global section (found ${binds.length} bind, ${servers.length} server): the upgrade tier derives its balancer from that file, see test/helpers/haproxy-config.ts`,
    );
  const out: string[] = [];
  let serversWritten = false;
  for (const line of lines) {
    const bind = BIND.exec(line);
    const server = SERVER.exec(line);
    if (GLOBAL.test(line)) {
      out.push(line, `  stats socket ${options.statsSocket} mode 600 level admin`);
    } else if (bind) {
      out.push(`${bind[1]}bind 127.0.0.1:${options.bindPort}${bind[2]}`);
    } else if (server) {
      // The first shipped server line's indentation and options (`check`, …) for every slot.
      if (!serversWritten)
        for (const s of options.servers)
          out.push(`${server[1]}server ${s.name} 127.0.0.1:${s.port}${server[2]}`);
      serversWritten = true;
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
