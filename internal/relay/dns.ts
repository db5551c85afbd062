// A DNS client for one question, SRV records (RFC 2782), with their TTL: Node's resolver answers SRV questions but
// drops the TTL, and a rule's SRV target is to be read again when its records expire. It asks the nameservers of
// /etc/resolv.conf in turn (in a network namespace, `ip netns exec` puts the namespace's own there) over UDP, and over
// TCP when the answer was truncated. Every byte of an answer is checked against its bounds before it is read.

import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { connect, isIP } from 'node:net';

export interface SrvRecord {
  priority: number;
  weight: number;
  port: number;
  /** The host the record points at, without the final dot. */
  target: string;
}

export interface SrvAnswer {
  records: SrvRecord[];
  /** The least TTL of the records, in seconds; for no records, the negative answer's (the zone's SOA minimum). */
  ttl: number;
}

const TYPE_SRV = 33;
const TYPE_SOA = 6;
const CLASS_IN = 1;
const TIMEOUT_MS = 2_000;
/** What a negative answer without an SOA is kept for, in seconds. */
const NEGATIVE_TTL = 30;

/** The nameservers the system resolver asks (`nameserver` lines of resolv.conf, at most 3), loopback without any. */
export function systemNameservers(path = '/etc/resolv.conf'): string[] {
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    // No resolv.conf: the resolver's own default.
  }
  const servers = [...text.matchAll(/^\s*nameserver\s+(\S+)/gm)]
    .map((match) => match[1]!.replace(/%.*$/, ''))
    .filter((address) => isIP(address) !== 0);
  return servers.length > 0 ? servers.slice(0, 3) : ['127.0.0.1'];
}

/** Why a DNS answer could not be had or read. */
export class DnsError extends Error {}

/**
 * The SRV records of `name` (`_service._proto.host`), asking `servers` in turn (each at port 53, or `host:port` for an
 * IPv4 address). NXDOMAIN and an empty answer are an answer of no records; a failure of every server throws.
 */
export async function resolveSrv(name: string, servers = systemNameservers()): Promise<SrvAnswer> {
  const query = question(name);
  let last: Error = new DnsError('no nameserver');
  for (const server of servers) {
    const [host, port] = server.includes('.') && server.includes(':') ? server.split(':') : [server, '53'];
    try {
      let answer = await overUdp(query, host!, Number(port));
      if ((answer.readUInt16BE(2) & 0x0200) !== 0) answer = await overTcp(query, host!, Number(port));
      return parseAnswer(answer, query);
    } catch (error) {
      last = error as Error;
    }
  }
  throw last;
}

function question(name: string): Buffer {
  const labels = name.split('.').filter(Boolean);
  const parts = [Buffer.alloc(12)];
  parts[0]!.writeUInt16BE(randomBytes(2).readUInt16BE(0), 0);
  parts[0]!.writeUInt16BE(0x0100, 2); // recursion desired
  parts[0]!.writeUInt16BE(1, 4);
  for (const label of labels) parts.push(Buffer.from([label.length]), Buffer.from(label, 'ascii'));
  const tail = Buffer.alloc(5);
  tail.writeUInt16BE(TYPE_SRV, 1);
  tail.writeUInt16BE(CLASS_IN, 3);
  parts.push(tail);
  return Buffer.concat(parts);
}

function overUdp(query: Buffer, host: string, port: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = createSocket(isIP(host) === 6 ? 'udp6' : 'udp4');
    const timer = setTimeout(() => done(new DnsError(`${host} did not answer in ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    let settled = false;
    // Once only, whatever comes after (an error after the answer, a connect after an error): a socket closed twice
    // throws, and in an event handler that would end the agent.
    const done = (error: Error | null, answer?: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.close();
      if (error) reject(error);
      else resolve(answer!);
    };
    socket.on('error', (error) => done(error));
    socket.on('message', (message, from) => {
      // Only the server asked, with the question's id: anything else is someone else's, or forged.
      if (from.port !== port || message.length < 12 || message.readUInt16BE(0) !== query.readUInt16BE(0)) return;
      done(null, message);
    });
    socket.connect(port, host, (error?: Error) => {
      if (error) return done(error);
      if (!settled) socket.send(query, (sent) => sent && done(sent));
    });
  });
}

function overTcp(query: Buffer, host: string, port: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    const chunks: Buffer[] = [];
    let size = 0;
    socket.setTimeout(TIMEOUT_MS, () => socket.destroy(new DnsError(`${host} did not answer over TCP`)));
    socket.on('error', reject);
    socket.on('data', (chunk) => {
      chunks.push(chunk);
      size += chunk.length;
      const all = Buffer.concat(chunks);
      if (all.length >= 2 && all.length >= 2 + all.readUInt16BE(0)) {
        socket.destroy();
        resolve(all.subarray(2, 2 + all.readUInt16BE(0)));
      } else if (size > 65_537) socket.destroy(new DnsError('an answer longer than DNS allows'));
    });
    socket.on('close', () => reject(new DnsError(`${host} closed the connection before answering`)));
    const length = Buffer.alloc(2);
    length.writeUInt16BE(query.length);
    socket.end(Buffer.concat([length, query]));
  });
}

/**
 * Reads a name at `at`, following compression pointers (at most 64, each backwards and past the header); its text and
 * where it ends.
 */
function readName(message: Buffer, at: number): { name: string; next: number } {
  const labels: string[] = [];
  let next = -1;
  let position = at;
  for (let jumps = 0; ;) {
    if (position >= message.length) throw new DnsError('a name runs past the answer');
    const length = message[position]!;
    if (length === 0) {
      if (next < 0) next = position + 1;
      break;
    }
    if ((length & 0xc0) === 0xc0) {
      if (position + 1 >= message.length) throw new DnsError('a name runs past the answer');
      const pointer = ((length & 0x3f) << 8) | message[position + 1]!;
      // Backwards only, and past the header, where no name is.
      if (pointer >= position || pointer < 12 || ++jumps > 64)
        throw new DnsError('a name points forwards, into the header or in a loop');
      if (next < 0) next = position + 2;
      position = pointer;
      continue;
    }
    if ((length & 0xc0) !== 0 || position + 1 + length > message.length) throw new DnsError('a malformed label');
    labels.push(message.toString('latin1', position + 1, position + 1 + length));
    position += 1 + length;
    if (labels.join('.').length > 253) throw new DnsError('a name longer than 253 characters');
  }
  return { name: labels.join('.'), next };
}

function parseAnswer(message: Buffer, query: Buffer): SrvAnswer {
  if (message.length < 12) throw new DnsError('an answer shorter than its header');
  const flags = message.readUInt16BE(2);
  if ((flags & 0x8000) === 0) throw new DnsError('a query, not an answer');
  const code = flags & 0x000f;
  if (code !== 0 && code !== 3) throw new DnsError(`the nameserver answered with error ${code}`);
  const questions = message.readUInt16BE(4);
  const answers = message.readUInt16BE(6);
  const authorities = message.readUInt16BE(8);
  let at = 12;
  for (let i = 0; i < questions; i++) {
    const asked = readName(message, at);
    at = asked.next + 4;
    if (i === 0 && asked.name.toLowerCase() !== readName(query, 12).name.toLowerCase())
      throw new DnsError('an answer to another question');
  }
  const records: SrvRecord[] = [];
  let ttl = Infinity;
  let negativeTtl = NEGATIVE_TTL;
  for (let i = 0; i < answers + authorities; i++) {
    const owner = readName(message, at);
    at = owner.next;
    if (at + 10 > message.length) throw new DnsError('a record runs past the answer');
    const type = message.readUInt16BE(at);
    const recordTtl = message.readUInt32BE(at + 4) & 0x7fffffff;
    const length = message.readUInt16BE(at + 8);
    const data = at + 10;
    if (data + length > message.length) throw new DnsError('a record runs past the answer');
    if (i < answers && type === TYPE_SRV) {
      if (length < 7) throw new DnsError('an SRV record too short');
      const target = readName(message, data + 6).name;
      // "." is the service saying it is not offered at this name (RFC 2782).
      if (target !== '')
        records.push({
          priority: message.readUInt16BE(data),
          weight: message.readUInt16BE(data + 2),
          port: message.readUInt16BE(data + 4),
          target,
        });
      ttl = Math.min(ttl, recordTtl);
    } else if (i >= answers && type === TYPE_SOA && length >= 22) {
      negativeTtl = Math.min(recordTtl, message.readUInt32BE(data + length - 4));
    }
    at = data + length;
  }
  return { records, ttl: records.length > 0 ? ttl : negativeTtl };
}
