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

  it.each<[string, string]>([
    ['10.0.0.0/33', '"10.0.0.0/33" has an invalid prefix length'],
    ['::1/129', '"::1/129" has an invalid prefix length'],
    ['10.0.0.0/x', '"10.0.0.0/x" has an invalid prefix length'],
    ['10.0.0.0/', '"10.0.0.0/" has an invalid prefix length'],
    ['10.0.0.0/-1', '"10.0.0.0/-1" has an invalid prefix length'],
    // Forms Number() would read as a length: the whole text must be 1 to 3 digits.
    ['10.0.0.0/ 24', '"10.0.0.0/ 24" has an invalid prefix length'],
    ['10.0.0.0/0x10', '"10.0.0.0/0x10" has an invalid prefix length'],
    ['10.0.0.0/1e1', '"10.0.0.0/1e1" has an invalid prefix length'],
    ['10.0.0.0/8x', '"10.0.0.0/8x" has an invalid prefix length'],
    ['10.0.0.0/x8', '"10.0.0.0/x8" has an invalid prefix length'],
    ['10.0.0.0/1000', '"10.0.0.0/1000" has an invalid prefix length'],
    ['10.0.0.0/8/1', '"10.0.0.0/8/1" is not an IP address or CIDR'],
    ['banana', '"banana" is not an IP address or CIDR'],
    ['10.0.0.0/8, banana', '"banana" is not an IP address or CIDR'],
    [' , ', 'expected at least one address or CIDR'],
    ['', 'expected at least one address or CIDR'],
  ])('refuses %p: %s', (text, message) => {
    expect(() => parseAllowList(text)).toThrow(new RangeError(message));
  });

  it.each<[string, string[], [string, boolean][]]>([
    // Prefix lengths at their bounds: /0 takes every address of its family, /32 and /128 one.
    [
      '0.0.0.0/0',
      ['0.0.0.0/0'],
      [
        ['198.51.100.1', true],
        ['2001:db8::1', false],
      ],
    ],
    [
      '203.0.113.7/32',
      ['203.0.113.7/32'],
      [
        ['203.0.113.7', true],
        ['203.0.113.6', false],
      ],
    ],
    [
      '::/0',
      ['::/0'],
      [
        ['2001:db8::1', true],
        ['::1', true],
      ],
    ],
    [
      '2001:db8::1/128',
      ['2001:db8::1/128'],
      [
        ['2001:db8::1', true],
        ['2001:db8::2', false],
      ],
    ],
    // Empty entries between commas are skipped; entries are trimmed.
    [
      ' 10.0.0.0/8 ,, 192.0.2.1 ,',
      ['10.0.0.0/8', '192.0.2.1'],
      [
        ['192.0.2.1', true],
        ['10.2.3.4', true],
      ],
    ],
    // An IPv4-mapped address is checked as IPv4 (Node's BlockList matches it against IPv4-mapped
    // subnets too); other ::ffff: text is checked as the IPv6 it is.
    [
      '10.0.0.0/8',
      ['10.0.0.0/8'],
      [
        ['::ffff:10.1.1.1', true],
        ['::ffff:11.1.1.1', false],
        ['::ffff:1', false],
      ],
    ],
    [
      '::ffff:0:0/96',
      ['::ffff:0:0/96'],
      [
        ['::ffff:a00:101', true],
        ['::ffff:10.1.1.1', true],
      ],
    ],
  ])('%p: entries %j', (text, entries, checks) => {
    const parsed = parseAllowList(text);
    expect(parsed.entries).toEqual(entries);
    for (const [ip, allowed] of checks) expect({ ip, allowed: parsed.allows(ip) }).toEqual({ ip, allowed });
  });
});

describe('clientAddress', () => {
  it.each([
    ['no proxy trusted: the peer, whatever the header says', '10.0.0.1', '1.2.3.4', 0, '10.0.0.1'],
    ['one proxy: the address it reports', '10.0.0.1', '1.2.3.4', 1, '1.2.3.4'],
    ['one proxy: a forged left-most entry is ignored', '10.0.0.1', '6.6.6.6, 1.2.3.4', 1, '1.2.3.4'],
    ['two proxies', '10.0.0.1', '6.6.6.6, 1.2.3.4, 10.0.0.2', 2, '1.2.3.4'],
    ['more hops trusted than present: the left-most', '10.0.0.1', '1.2.3.4', 5, '1.2.3.4'],
    ['no header', '10.0.0.1', undefined, 1, '10.0.0.1'],
    ['a negative count trusts no proxy', '10.0.0.1', '1.2.3.4', -1, '10.0.0.1'],
    ['empty entries are skipped', '10.0.0.1', '1.2.3.4, , ', 1, '1.2.3.4'],
    ['entries are trimmed', '10.0.0.1', ' 6.6.6.6 ,  1.2.3.4 ', 2, '6.6.6.6'],
    ['several headers are one list', '10.0.0.1', Array.from(['6.6.6.6', '1.2.3.4']), 2, '6.6.6.6'],
    ['no socket address', undefined, undefined, 1, ''],
  ] as const)('%s', (_name, peer, header, hops, expected) => {
    expect(clientAddress(peer, header, hops)).toBe(expected);
  });
});
