import {
  deriveHaproxyConfig,
  directives,
  shippedHaproxyConfig,
  STATS_SOCKET_LINE,
} from '../helpers/haproxy-config';

/**
 * The upgrade tier's balancer follows the HAProxy configuration the repository ships
 * (deploy/compose/haproxy.cfg; test/helpers/haproxy-config.ts): every directive of the shipped file
 * is in the derived one, in its order, but the frontend's bind and the server lines; the backend's
 * decisions (the /readyz check and its intervals, the retries, the redispatch) are there word for
 * word. A change to the shipped file is a change to what the tier runs.
 */

const shipped = shippedHaproxyConfig();
const servers = [
  { name: 's1', port: 20001 },
  { name: 's2', port: 20002 },
  { name: 's3', port: 20003 },
];
const derived = deriveHaproxyConfig(shipped, {
  bindPort: 18080,
  servers,
  statsSocket: '/tmp/x/haproxy.sock',
});
const isBind = (d: string) => d.startsWith('bind ');
const isServer = (d: string) => d.startsWith('server ');

describe('the upgrade tier’s HAProxy configuration, derived from deploy/compose/haproxy.cfg', () => {
  it('keeps every shipped directive but bind and server, in order, and adds only the stats socket', () => {
    const kept = directives(shipped).filter((d) => !isBind(d) && !isServer(d));
    const rest = directives(derived).filter((d) => !isBind(d) && !isServer(d) && !STATS_SOCKET_LINE.test(d));
    expect(rest).toEqual(kept);
    expect(directives(derived).filter((d) => STATS_SOCKET_LINE.test(d))).toEqual([
      'stats socket /tmp/x/haproxy.sock mode 600 level admin',
    ]);
  });

  it('keeps the backend’s decisions: the /readyz check, its intervals, the retries and the redispatch', () => {
    for (const line of [
      'option httpchk GET /readyz',
      'http-check expect status 200',
      'default-server inter 2s fall 2 rise 2 resolvers docker init-addr last,libc,none',
      'retry-on conn-failure empty-response 503',
      'retries 2',
      'option redispatch 1',
    ]) {
      expect(directives(shipped)).toContain(line);
      expect(directives(derived)).toContain(line);
    }
  });

  it('binds loopback on the given port and has one checked server per slot, with the shipped server options', () => {
    expect(directives(derived).filter(isBind)).toEqual(['bind 127.0.0.1:18080']);
    expect(directives(derived).filter(isServer)).toEqual([
      'server s1 127.0.0.1:20001 check',
      'server s2 127.0.0.1:20002 check',
      'server s3 127.0.0.1:20003 check',
    ]);
  });

  it('refuses a shipped file it cannot follow', () => {
    const noServers = shipped
      .split('\n')
      .filter((l) => !/^\s*server /.test(l))
      .join('\n');
    expect(() => deriveHaproxyConfig(noServers, { bindPort: 1, servers, statsSocket: 's' })).toThrow(
      /expected one bind line, server lines and a global section/,
    );
  });
});
