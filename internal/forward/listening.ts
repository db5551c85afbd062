// The ports programs of this node listen on, as the kernel lists its sockets (/proc/net/tcp, tcp6, udp, udp6, of the
// agent's network namespace): what a range the kernel alone carries must leave to them, and what a listener bound
// with SO_REUSEPORT must not share.

import { readFile } from 'node:fs/promises';
import { isIPv4, isIPv6 } from 'node:net';

/** A listening TCP socket's state in /proc/net/tcp; a bound UDP socket's (unconnected). */
const LISTENING = { tcp: '0A', udp: '07' } as const;

/** A socket listening, as the kernel lists it: its port, and its address as the list writes it (hex). */
interface Listening {
  port: number;
  address: string;
}

async function listeningSockets(transport: 'tcp' | 'udp'): Promise<Listening[]> {
  const found: Listening[] = [];
  for (const file of [`/proc/net/${transport}`, `/proc/net/${transport}6`]) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st ...: the local address is ADDRESS:PORT, both hex.
      const [, local, , state] = line.trim().split(/\s+/);
      if (state !== LISTENING[transport] || !local) continue;
      const colon = local.lastIndexOf(':');
      found.push({ port: Number.parseInt(local.slice(colon + 1), 16), address: local.slice(0, colon) });
    }
  }
  return found;
}

/** The ports listened on for `transport`, sorted; none where the lists cannot be read. */
export async function listeningPorts(transport: 'tcp' | 'udp'): Promise<number[]> {
  return [...new Set((await listeningSockets(transport)).map(({ port }) => port))].sort((a, b) => a - b);
}

/** Bytes as /proc/net lists them: each 32-bit word in the machine's (little-endian) order, in hex. */
function listed(bytes: number[]): string {
  const words: string[] = [];
  for (let at = 0; at < bytes.length; at += 4)
    words.push(
      bytes
        .slice(at, at + 4)
        .reverse()
        .map((byte) => byte.toString(16).padStart(2, '0'))
        .join(''),
    );
  return words.join('').toUpperCase();
}

/** `host` as /proc/net lists an address; null for one it does not read (an IPv4-mapped form: taken as any). */
function listedAs(host: string): string | null {
  if (isIPv4(host)) return listed(host.split('.').map(Number));
  if (!isIPv6(host) || host.includes('.')) return null;
  const [head = '', tail] = host.split('::');
  const groups = (part: string) => (part === '' ? [] : part.split(':'));
  const [left, right] = [groups(head), tail === undefined ? [] : groups(tail)];
  const all = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return listed(all.flatMap((group) => [Number.parseInt(group, 16) >> 8, Number.parseInt(group, 16) & 255]));
}

const isWildcard = (address: string) => /^0+$/.test(address);

/**
 * Whether sockets on these two addresses (as listed) share a port: of one family, where they are the same or either is
 * the wildcard; of two, where the IPv6 one is the wildcard (dual-stack, it holds the port for IPv4 too).
 */
function overlap(a: string, b: string): boolean {
  if (a.length === b.length) return isWildcard(a) || isWildcard(b) || a === b;
  return isWildcard(a.length === 32 ? a : b);
}

/** The ports of `transport` some socket listens on that a listener on `host` would share (see overlap). */
export async function portsListenedBeside(host: string, transport: 'tcp' | 'udp'): Promise<Set<number>> {
  const ours = listedAs(host);
  return new Set(
    (await listeningSockets(transport))
      .filter(({ address }) => ours === null || overlap(ours, address.toUpperCase()))
      .map(({ port }) => port),
  );
}
