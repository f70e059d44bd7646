import { clientAddress, parseAllowList } from '../../../src/domain/cidr';

describe('parseAllowList', () => {
  const list = parseAllowList('10.0.0.0/8, 203.0.113.7, 2001:db8::/32');
  it.each([
    ['10.1.2.3', true],
    ['11.0.0.1', false],
    ['203.0.113.7', true],
    ['203.0.113.8', false],
    ['::ffff:10.9.9.9', true], // IPv4-mapped, as Node reports it on dual-stack sockets
    ['2001:db8::1', true],
    ['2001:db9::1', false],
    ['not-an-ip', false],
    ['', false],
  ])('%s → %s', (ip, expected) => {
    expect(list.allows(ip)).toBe(expected);
  });

  it.each([['10.0.0.0/33'], ['10.0.0.0/8/1'], ['banana'], [' , '], ['::1/129'], ['10.0.0.0/x']])(
    'refuses %p',
    (text) => {
      expect(() => parseAllowList(text)).toThrow(RangeError);
    },
  );
});

describe('clientAddress', () => {
  it.each([
    ['no proxy trusted: the peer, whatever the header says', '10.0.0.1', '1.2.3.4', 0, '10.0.0.1'],
    ['one proxy: the address it reports', '10.0.0.1', '1.2.3.4', 1, '1.2.3.4'],
    ['one proxy: a forged left-most entry is ignored', '10.0.0.1', '6.6.6.6, 1.2.3.4', 1, '1.2.3.4'],
    ['two proxies', '10.0.0.1', '6.6.6.6, 1.2.3.4, 10.0.0.2', 2, '1.2.3.4'],
    ['more hops trusted than present: the left-most', '10.0.0.1', '1.2.3.4', 5, '1.2.3.4'],
    ['no header', '10.0.0.1', undefined, 1, '10.0.0.1'],
  ] as const)('%s', (_name, peer, header, hops, expected) => {
    expect(clientAddress(peer, header, hops)).toBe(expected);
  });
});
