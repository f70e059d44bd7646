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
  internalPorts: { 8081: 18081 },
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
      'default-server inter 500ms fastinter 250ms downinter 250ms fall 1 rise 2 observe layer7 error-limit 1 on-error mark-down resolvers docker init-addr last,libc,none',
      'retry-on conn-failure empty-response 503',
      'retries 6',
      'option redispatch 1',
      'server last-resort 127.0.0.1:8081 backup',
      'listen last-resort',
      'option httpchk GET /healthz',
    ]) {
      expect(directives(shipped)).toContain(line);
      expect(directives(derived).map((d) => d.replace(':18081', ':8081'))).toContain(line);
    }
  });

  it('binds loopback on the given ports and has one checked server per slot in each section, with the shipped server options', () => {
    expect(directives(derived).filter(isBind)).toEqual(['bind 127.0.0.1:18080', 'bind 127.0.0.1:18081']);
    const slots = [
      'server s1 127.0.0.1:20001 check',
      'server s2 127.0.0.1:20002 check',
      'server s3 127.0.0.1:20003 check',
    ];
    // The readiness-checked backend's slots and its last resort, then the last-resort listener's slots.
    expect(directives(derived).filter(isServer)).toEqual([
      ...slots,
      'server last-resort 127.0.0.1:18081 backup',
      ...slots,
    ]);
  });

  it('refuses a loopback listener it has no test port for', () => {
    expect(() =>
      deriveHaproxyConfig(shipped, { bindPort: 1, internalPorts: {}, servers, statsSocket: 's' }),
    ).toThrow(/127\.0\.0\.1:8081 has no test port/);
  });

  it('refuses a shipped file it cannot follow', () => {
    const noServers = shipped
      .split('\n')
      .filter((l) => !/^\s*server /.test(l))
      .join('\n');
    expect(() =>
      deriveHaproxyConfig(noServers, { bindPort: 1, internalPorts: { 8081: 2 }, servers, statsSocket: 's' }),
    ).toThrow(/expected one public bind line, server lines and a global section/);
  });
});
