// eslint-disable-next-line no-restricted-imports -- BlockList and isIP only parse addresses: no socket is opened
import { BlockList, isIP } from 'node:net';

/**
 * IP allow-lists for the webhook routes (`ALLOWED_CIDRS`), and the client address behind trusted
 * proxies (`TRUST_PROXY`). Pure: no I/O.
 */

export interface IpAllowList {
  readonly entries: readonly string[];
  allows(ip: string): boolean;
}

/** Parses `10.0.0.0/8, 2001:db8::/32, 203.0.113.7`; throws a RangeError naming the bad entry. */
export function parseAllowList(text: string): IpAllowList {
  const list = new BlockList();
  const entries = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (entries.length === 0) throw new RangeError('expected at least one address or CIDR');
  for (const entry of entries) {
    // split() returns one element at least.
    const [address, prefixText, extra] = entry.split('/') as [string, ...(string | undefined)[]];
    const family = isIP(address);
    if (family === 0 || extra !== undefined) throw new RangeError(`"${entry}" is not an IP address or CIDR`);
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (prefixText === undefined) {
      list.addAddress(address, type);
      continue;
    }
    if (!/^\d{1,3}$/.test(prefixText) || Number(prefixText) > (family === 4 ? 32 : 128))
      throw new RangeError(`"${entry}" has an invalid prefix length`);
    list.addSubnet(address, Number(prefixText), type);
  }
  return {
    entries,
    // BlockList matches an IPv4-mapped IPv6 address (::ffff:10.1.2.3) against IPv4 rules itself, and
    // answers false for what is not an address (Node's own rule: "not valid, not blocked").
    allows(ip: string) {
      return list.check(ip, isIP(ip) === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

/**
 * The client's address: the socket's peer, or — behind `trustedHops` proxies that each append to
 * `X-Forwarded-For` — the address the nearest untrusted hop reported. Entries a client forged
 * further left are ignored.
 */
export function clientAddress(
  socketAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trustedHops: number,
): string {
  const peer = socketAddress ?? '';
  // With no trusted hop the chain's last entry, the peer, is picked below.
  if (forwardedFor === undefined) return peer;
  const header = Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor;
  const chain = [
    ...header
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== ''),
    peer,
  ];
  const index = Math.max(0, chain.length - 1 - trustedHops);
  return chain[index] ?? peer;
}
