// Hostnames, IP addresses and host:port targets. What these accept is also what later
// reaches ssh and the agent, so they admit no spaces, quotes or shell metacharacters.

import { isIPv4, isIPv6 } from 'node:net';
import { string, type Schema } from './schema.ts';

const LABEL = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$/;
/**
 * A number as the system's resolver reads an IPv4 address's parts (inet_aton): decimal, 0x hex or 0-led octal. A
 * "name" of one to four such labels is an address to it (0x7f000001 and 0x7f.1 are 127.0.0.1), so it is no name here.
 */
const NUMERIC_LABEL = /^(?:0x[0-9a-f]*|\d+)$/i;

export function isHostname(value: string): boolean {
  if (value.length > 253 || value.endsWith('.')) return false;
  const labels = value.split('.');
  // An all-numeric last label would be a malformed IPv4 address, not a name.
  return (
    labels.every((label) => LABEL.test(label)) &&
    !/^\d+$/.test(labels[labels.length - 1]!) &&
    !(labels.length <= 4 && labels.every((label) => NUMERIC_LABEL.test(label)))
  );
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

/** Splits `host:port` or `[v6]:port`, the port possibly a range (`host:lo-hi`); null when it is not one. */
const TARGET = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})(?:-(\d{1,5}))?$/;

/**
 * A target: where a rule sends its clients. `lastPort` only for a range (`host:lo-hi`, a rule covering as many ports
 * sends each of its ports to the one at the same place in it).
 */
export interface TargetAddress {
  host: string;
  port: number;
  lastPort?: number;
}

export function parseTarget(value: string): TargetAddress | null {
  return targetProblem(value, true) === null ? splitTarget(value) : null;
}

function splitTarget(value: string): TargetAddress {
  const match = TARGET.exec(value)!;
  const target: TargetAddress = { host: match[1] ?? match[2]!, port: Number(match[3]) };
  if (match[4] !== undefined) target.lastPort = Number(match[4]);
  return target;
}

/** What is wrong with a target, naming its part (the host or the port); null when it is a target. */
function targetProblem(value: string, ranges: boolean): string | null {
  const match = TARGET.exec(value);
  if (!match) {
    if (!/:\d{1,5}(-\d{1,5})?$/.test(value)) return 'must end in :PORT, a port from 1 to 65535 (host:port)';
    if (/^[^[].*:.*:/.test(value)) return 'must put an IPv6 address in brackets ([2001:db8::1]:443)';
    return 'must be host:port with a hostname or an IP address (IPv6 in brackets)';
  }
  const { host, port, lastPort } = splitTarget(value);
  if (lastPort !== undefined && !ranges) return 'must be one port (host:port), not a range';
  for (const [given, number] of [
    [match[3], port],
    [match[4], lastPort],
  ] as const)
    if (number !== undefined && (number < 1 || number > 65535))
      return `has port ${given}, which is not from 1 to 65535`;
  if (lastPort !== undefined && lastPort <= port) return `has the range ${port}-${lastPort}, which does not go up`;
  if (match[1] !== undefined ? !isIPv6(host) : !(isIPv4(host) || isHostname(host)))
    return `has host ${JSON.stringify(host)}, which is not a hostname or an IP address`;
  return null;
}

const SRV_NAME = /^_[A-Za-z0-9][A-Za-z0-9-]{0,61}\._[A-Za-z0-9][A-Za-z0-9-]{0,61}\.(.+)$/;

/**
 * Whether `value` names DNS SRV records (RFC 2782), `_service._proto.name`: a target whose records say the hosts and
 * ports. No hostname starts with an underscore, so such a target is never read as `host:port`.
 */
export function isSrvName(value: string): boolean {
  const match = SRV_NAME.exec(value);
  return match !== null && value.length <= 253 && isHostname(match[1]!);
}

/**
 * A target, `host:port`; with `ranges`, also `host:lo-hi` (the ports of a rule's range, see TargetAddress); with
 * `srv`, also an SRV name (see isSrvName). `what`: what it is for, in words that start its description.
 */
export function target({ ranges = false, srv = false, what = '' } = {}): Schema<string> {
  const forms = ranges
    ? 'host:port, with an IPv6 address in brackets ([2001:db8::1]:443); for a rule with listen_port_end, also ' +
      'host:lo-hi, as many ports as the rule covers (each port to the one at the same place).'
    : 'host:port, with an IPv6 address in brackets ([2001:db8::1]:443).';
  return string({
    min: 3,
    max: 267,
    description:
      what +
      (srv
        ? `${forms} Or _service._proto.name, DNS SRV records whose hosts and ports are the targets (the rule's only ` +
          'target; see "Paths" in the API reference).'
        : forms),
    example: 'backend.internal:8080',
    documented: { pattern: srv ? `${TARGET.source}|${SRV_NAME.source}` : TARGET.source },
    refine: (value) => (srv && isSrvName(value) ? null : targetProblem(value, ranges)),
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

/** A WebSocket URL as a tunnel's `via`: ws or wss, a hostname or IP address, a port, a path and a query, no more. */
const WS_URL = /^wss?:\/\/[^\s/?#@]+(?:\/[^\s#]*)?$/;

/**
 * The WebSocket URL `value` names, or null: `ws://` or `wss://`, a host (a hostname or an IP address), an optional
 * port, path and query; no user, no fragment, nothing a URL parser would have to fix (spaces, backslashes).
 */
export function parseWebSocketUrl(value: string): URL | null {
  if (value.length > 2048 || !WS_URL.test(value) || value.includes('\\')) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  const name = url.hostname.replace(/^\[|\]$/g, '');
  if (url.username || url.password || !(isIPv4(name) || isIPv6(name) || isHostname(name))) return null;
  return url;
}

export function webSocketUrl(description: string): Schema<string> {
  return string({
    min: 1,
    max: 2048,
    description,
    example: 'wss://tunnels.example.com/portplane/7',
    documented: { format: 'uri', pattern: WS_URL.source },
    refine: (value) =>
      parseWebSocketUrl(value)
        ? null
        : 'must be ws://HOST[:PORT][/PATH] or wss://..., with a hostname or IP address, no user and no fragment',
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

/** Why `value` is not an address a node can have and dial from, or null: IPv4, or IPv6 without a zone or a mapping. */
function ownAddressProblem(value: string): string | null {
  if (!isIPv4(value) && !(isIPv6(value) && !value.includes('%') && !value.includes('.')))
    return 'must be an IPv4 or IPv6 address (no zone, no block)';
  const kind = localKind(value);
  if (isUnroutable(kind) || kind === 'link-local') return `is a ${kind} address, which a node does not dial from`;
  return null;
}

/** An IP address of a node's own (see ownAddressProblem). */
export function ipAddress(description: string): Schema<string> {
  return string({ min: 2, max: 39, description, example: '192.0.2.10', refine: ownAddressProblem });
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
 * An IP address in one spelling per address, for comparing: an IPv4 address as a.b.c.d, also where it comes inside an
 * IPv6 one the way hosts and networks carry it (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64's well-known prefix
 * 64:ff9b::/96, which a NAT64 gateway turns back into that IPv4 address); any other IPv6 address as its eight groups in
 * lower-case hex, zeros compressed nowhere. Null for anything that is not an address (a name).
 */
export function canonicalAddress(address: string): string | null {
  if (isIPv4(address)) return address.split('.').map(Number).join('.');
  const groups = ipv6Groups(address.replace(/%.*$/, ''));
  if (!groups) return null;
  const zeros = (from: number, to: number) => groups.slice(from, to).every((g) => g === 0);
  const embedsIPv4 =
    (zeros(0, 5) && groups[5] === 0xffff) ||
    (zeros(0, 6) && groups[6]! !== 0) ||
    (groups[0] === 0x64 && groups[1] === 0xff9b && zeros(2, 6));
  if (embedsIPv4) return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.');
  return groups.map((g) => g.toString(16)).join(':');
}

/**
 * Kinds of address that are no host to forward to, anywhere: no address at all (unspecified), a group (multicast),
 * everyone on a link (broadcast), space IANA reserves (240.0.0.0/4). Neither the master nor an agent takes one as a
 * target, whatever the settings.
 */
const unroutableKinds = ['unspecified', 'multicast', 'broadcast', 'reserved'] as const;

/**
 * What kind of address only the host itself, its link or nothing at all answers on, for a literal IPv4 or IPv6
 * address in any of its spellings (see canonicalAddress): loopback, link-local (where clouds serve instance metadata),
 * metadata, or one of the unroutable kinds. Null for any other address, and for a name.
 */
export function localKind(address: string): string | null {
  // A relay asks for each connection it dials, of the few addresses its rules name: the answer is kept.
  let kind = kinds.get(address);
  if (kind === undefined) {
    kind = kindOf(address);
    if (kinds.size >= KINDS_KEPT) kinds.clear();
    kinds.set(address, kind);
  }
  return kind;
}

const KINDS_KEPT = 4096;
const kinds = new Map<string, string | null>();

function kindOf(address: string): string | null {
  const canonical = canonicalAddress(address);
  if (canonical === null) return null;
  if (isIPv4(canonical)) {
    const [a, b] = canonical.split('.').map(Number) as [number, number];
    if (canonical === '255.255.255.255') return 'broadcast';
    if (a === 127) return 'loopback';
    if (a === 169 && b === 254) return 'link-local';
    if (a === 0) return 'unspecified';
    if (a >= 224 && a <= 239) return 'multicast';
    if (a >= 240) return 'reserved';
    return null;
  }
  const groups = canonical.split(':').map((g) => parseInt(g, 16));
  const head = groups[0]!;
  if (canonical === '0:0:0:0:0:0:0:1') return 'loopback';
  if (canonical === '0:0:0:0:0:0:0:0') return 'unspecified';
  if ((head & 0xffc0) === 0xfe80) return 'link-local';
  // A cloud's instance metadata over IPv6 (AWS): link-local in all but its prefix.
  if (canonical === 'fd00:ec2:0:0:0:0:0:254') return 'metadata';
  if ((head & 0xff00) === 0xff00) return 'multicast';
  return null;
}

/** Whether `kind` (of localKind) is one no setting allows as a target. */
export function isUnroutable(kind: string | null): boolean {
  return (unroutableKinds as readonly string[]).includes(kind ?? '');
}
