// Hostnames, IP addresses and host:port targets. What these accept is also what later
// reaches ssh and the agent, so they admit no spaces, quotes or shell metacharacters.

import { isIPv4, isIPv6 } from 'node:net';
import { string, type Schema } from './schema.ts';

const LABEL = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$/;

export function isHostname(value: string): boolean {
  if (value.length > 253 || value.endsWith('.')) return false;
  const labels = value.split('.');
  // An all-numeric last label would be a malformed IPv4 address, not a name.
  return labels.every((label) => LABEL.test(label)) && !/^\d+$/.test(labels[labels.length - 1]!);
}

/** True for addresses only this machine can reach: there, plain HTTP exposes nothing. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

export function isHost(value: string): boolean {
  return isIPv4(value) || isIPv6(value) || isHostname(value);
}

export function host(description: string): Schema<string> {
  return string({
    min: 1,
    max: 253,
    description,
    documented: { anyOf: ['hostname', 'ipv4', 'ipv6'].map((format) => ({ type: 'string', format })) },
    refine: (value) => (isHost(value) ? null : 'must be a hostname, an IPv4 address or an IPv6 address'),
  });
}

/** Splits `host:port` or `[v6]:port`; null when it is not one. */
const TARGET = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/;

export function parseTarget(value: string): { host: string; port: number } | null {
  return targetProblem(value) === null ? splitTarget(value) : null;
}

function splitTarget(value: string): { host: string; port: number } {
  const match = TARGET.exec(value)!;
  return { host: match[1] ?? match[2]!, port: Number(match[3]) };
}

/** What is wrong with a target, naming its part (the host or the port); null when it is a target. */
function targetProblem(value: string): string | null {
  const match = TARGET.exec(value);
  if (!match) {
    if (!/:\d{1,5}$/.test(value)) return 'must end in :PORT, a port from 1 to 65535 (host:port)';
    if (/^[^[].*:.*:/.test(value)) return 'must put an IPv6 address in brackets ([2001:db8::1]:443)';
    return 'must be host:port with a hostname or an IP address (IPv6 in brackets)';
  }
  const { host, port } = splitTarget(value);
  if (port < 1 || port > 65535) return `has port ${match[3]}, which is not from 1 to 65535`;
  if (match[1] !== undefined ? !isIPv6(host) : !(isIPv4(host) || isHostname(host)))
    return `has host ${JSON.stringify(host)}, which is not a hostname or an IP address`;
  return null;
}

export function target(): Schema<string> {
  return string({
    min: 3,
    max: 261,
    description: 'host:port, with an IPv6 address in brackets ([2001:db8::1]:443).',
    example: 'backend.internal:8080',
    documented: { pattern: TARGET.source },
    refine: targetProblem,
  });
}

const MASTER_URL = /^(https?):\/\/(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253})(?::(\d{1,5}))?\/?$/;

/**
 * The origin of a master URL: http(s), a hostname or IP address, an optional port, nothing
 * else. Null for anything more: this value ends up in files on nodes, so it admits no
 * character a shell, systemd or an env-file parser would read as syntax.
 */
export function masterOrigin(value: string): string | null {
  const match = MASTER_URL.exec(value);
  if (!match) return null;
  const [, scheme, hostPart, port] = match;
  const bracketed = hostPart!.startsWith('[');
  const name = bracketed ? hostPart!.slice(1, -1) : hostPart!;
  if (bracketed ? !isIPv6(name) : !(isIPv4(name) || isHostname(name))) return null;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return null;
  return new URL(`${scheme}://${hostPart}${port === undefined ? '' : `:${port}`}`).origin;
}

export function masterUrl(options: { description: string; allowEmpty?: boolean }): Schema<string> {
  return string({
    min: options.allowEmpty ? 0 : 1,
    max: 300,
    description: options.description,
    example: 'https://192.0.2.1:8080',
    // An empty value (none configured) is no URI: documented apart, so that strict validators accept it.
    documented: options.allowEmpty
      ? { anyOf: [{ const: '' }, { format: 'uri', pattern: MASTER_URL.source }] }
      : { format: 'uri', pattern: MASTER_URL.source },
    refine: (value) =>
      (options.allowEmpty && value === '') || masterOrigin(value) !== null
        ? null
        : `must be ${options.allowEmpty ? 'empty or ' : ''}http(s)://HOST[:PORT] with a hostname or IP address ` +
          'and nothing else, e.g. https://192.0.2.1:8080',
  });
}

/**
 * Who a peer address counts as, for limits kept per source: an IPv4 address itself (also when it comes IPv4-mapped),
 * an IPv6 address by its /64, the smallest block a host is given: one host may use every address in it.
 */
export function sourceOf(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped) return mapped[1]!;
  const groups = ipv6Groups(address.replace(/%.*$/, ''));
  if (!groups) return address;
  return `${groups
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(':')}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (an IPv4 tail as two), or null when it is not one. */
function ipv6Groups(address: string): number[] | null {
  if (!isIPv6(address)) return null;
  const groups = (part: string) =>
    part === ''
      ? []
      : part.split(':').flatMap((g) => {
          if (!g.includes('.')) return [parseInt(g, 16)];
          const [a, b, c, d] = g.split('.').map(Number) as [number, number, number, number];
          return [(a << 8) | b, (c << 8) | d];
        });
  const [head = '', tail] = address.split('::');
  const front = groups(head);
  const back = tail === undefined ? [] : groups(tail);
  return [...front, ...Array<number>(Math.max(0, 8 - front.length - back.length)).fill(0), ...back];
}

/** The bytes of an IP address: 4 for IPv4 (also IPv4-mapped IPv6), 16 for IPv6; null for anything else. */
export function addressBytes(address: string): Buffer | null {
  const bare = address.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
  if (isIPv4(bare)) return Buffer.from(bare.split('.').map(Number));
  const groups = ipv6Groups(bare.replace(/%.*$/, ''));
  if (!groups) return null;
  const bytes = Buffer.alloc(16);
  groups.forEach((group, i) => bytes.writeUInt16BE(group, i * 2));
  return bytes;
}

/** The bits of an IP address, most significant first: 32 for IPv4, 128 for IPv6; null for anything else. */
function addressBits(address: string): string | null {
  if (isIPv4(address))
    return address
      .split('.')
      .map((octet) => Number(octet).toString(2).padStart(8, '0'))
      .join('');
  return (
    ipv6Groups(address)
      ?.map((group) => group.toString(2).padStart(16, '0'))
      .join('') ?? null
  );
}

/** An address block, `address/prefix` (a bare address is one host), split; null when it is not one. */
export function parseCidr(value: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  return cidrProblem(value) === null ? splitCidr(value) : null;
}

function splitCidr(value: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } {
  const [address = '', prefix] = value.split('/');
  const family = isIPv4(address) ? 'ipv4' : 'ipv6';
  return { address, prefix: prefix === undefined ? (family === 'ipv4' ? 32 : 128) : Number(prefix), family };
}

function cidrProblem(value: string): string | null {
  const [address = '', prefix, ...rest] = value.split('/');
  // A zone (fe80::1%eth0) names an interface, not addresses a client can come from.
  const bits = address.includes('%') ? null : addressBits(address);
  if (bits === null || rest.length > 0) return 'must be an IPv4 or IPv6 address, or a block such as 192.0.2.0/24';
  if (prefix === undefined) return null;
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > bits.length)
    return `has prefix /${prefix}, which is not from 0 to ${bits.length}`;
  if (/1/.test(bits.slice(Number(prefix))))
    return `has bits set past its /${prefix} prefix: name the block by its first address`;
  return null;
}

/** An IPv4 or IPv6 address block (or one address), as a client's address is matched against it. */
export function cidr(): Schema<string> {
  return string({
    min: 2,
    max: 49,
    description: 'An IPv4 or IPv6 address block (192.0.2.0/24, 2001:db8::/32) or one address.',
    example: '192.0.2.0/24',
    refine: cidrProblem,
  });
}

/**
 * What kind of address only the host itself, its link or nothing at all answers on, for a literal IPv4 or IPv6
 * address (IPv4-mapped ones as IPv4): loopback, link-local (where clouds serve instance metadata), unspecified,
 * multicast. Null for any other address, and for a name.
 */
export function localKind(address: string): string | null {
  const v4 = /^(?:::ffff:)?(\d{1,3})\.(\d{1,3})\.\d{1,3}\.\d{1,3}$/i.exec(address);
  if (v4 && isIPv4(address.replace(/^::ffff:/i, ''))) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    if (a === 127) return 'loopback';
    if (a === 169 && b === 254) return 'link-local';
    if (a === 0) return 'unspecified';
    if (a >= 224 && a <= 239) return 'multicast';
    return null;
  }
  const bare = address.replace(/%.*$/, '').toLowerCase();
  if (!isIPv6(bare)) return null;
  const first = sourceOf(bare).split(':')[0]!;
  if (bare === '::1' || /^(0:){7}1$/.test(bare)) return 'loopback';
  if (bare === '::' || /^(0:){7}0$/.test(bare)) return 'unspecified';
  const head = parseInt(first, 16);
  if ((head & 0xffc0) === 0xfe80) return 'link-local';
  // A cloud's instance metadata over IPv6 (AWS): link-local in all but its prefix.
  if (sourceOf(bare) === 'fd00:ec2:0:0::/64' && /:254$/.test(bare)) return 'metadata';
  if ((head & 0xff00) === 0xff00) return 'multicast';
  return null;
}
