// The tunnel's wire format, shared by both ends (docs/agent-protocol.md, "Tunnels"): TLS 1.3
// with a key pair for each end issued by the master and each end pinning the other's key;
// inside it HTTP/2, one stream per relayed TCP connection or UDP session, named by its rule.
// HTTP/2 gives each stream its own flow control, so one stalled connection holds only itself.

import { X509Certificate } from 'node:crypto';
import type { Writable } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { pinOf } from '../tls/pin.ts';

export const ALPN = ['h2'];
export const MIN_TLS = 'TLSv1.3';

/** A stream's path names what it carries and for which rule; the exit dials only that rule's targets. */
/** The header a stream carries the client's address in, from the entry to the exit (which checks it is one). */
export const CLIENT_HEADER = 'portplane-client';

/**
 * The path of a probe: the exit connects to its tunnel's probe target (which the entry does not name) and answers 200
 * with the microseconds it took in PROBE_HEADER, 502 when it reached none, 204 when it has none.
 */
export const PROBE_PATH = '/v1/probe';
export const PROBE_HEADER = 'portplane-probe-us';

export function streamPath(kind: 'tcp' | 'udp', ruleId: number): string {
  return `/v1/${kind}/${ruleId}`;
}

export function parseStreamPath(path: unknown): { kind: 'tcp' | 'udp'; ruleId: number } | null {
  const match = typeof path === 'string' ? /^\/v1\/(tcp|udp)\/([1-9][0-9]{0,14})$/.exec(path) : null;
  return match ? { kind: match[1] as 'tcp' | 'udp', ruleId: Number(match[2]) } : null;
}

/**
 * Per-stream receive window: what one stalled connection can have in flight. The session's
 * window is larger, and Node returns session credit as data arrives, so a stream that stops
 * reading closes only its own window.
 */
export const STREAM_WINDOW = 1024 * 1024;
export const SESSION_WINDOW = 32 * 1024 * 1024;
export const h2Settings = { initialWindowSize: STREAM_WINDOW, maxConcurrentStreams: 10_000 };
/**
 * What a session may hold in memory, in MB, before Node refuses new streams: room for a full
 * session window and then some. At Node's default (10 MB) a busy tunnel whose exit lags
 * refused new connections while data in flight was within the windows it had granted.
 */
export const SESSION_MEMORY_MB = 2 * (SESSION_WINDOW / (1024 * 1024));

/** Why the peer on `socket` is not the one pinned, or null when it is. */
export function peerRefusal(socket: TLSSocket, pin: string): string | null {
  let cert: X509Certificate | undefined;
  try {
    cert = socket.getPeerX509Certificate();
  } catch {
    cert = undefined;
  }
  if (!cert) return 'it presented no certificate';
  const presented = pinOf(cert);
  return presented === pin ? null : `it presented the key ${presented}, not the tunnel's`;
}

/**
 * Writes datagrams to a UDP stream, each as a 2-byte big-endian length and that many bytes, and those of one
 * event-loop turn in one write: a write per datagram (an HTTP/2 DATA frame and a TLS record each) kept both ends'
 * one CPU busy at 50,000 datagrams a second.
 */
export class Framer {
  private queued: Buffer[] = [];
  private queuedBytes = 0;

  constructor(private readonly stream: Writable) {}

  /** Queues `datagram` for this turn's write; false (dropped) when the stream has MAX_UDP_BACKLOG bytes waiting. */
  send(datagram: Buffer): boolean {
    if (!this.stream.writable || this.stream.writableLength + this.queuedBytes > MAX_UDP_BACKLOG) return false;
    if (this.queuedBytes === 0) setImmediate(this.flush);
    const head = Buffer.allocUnsafe(2);
    head.writeUInt16BE(datagram.length);
    this.queued.push(head, datagram);
    this.queuedBytes += 2 + datagram.length;
    return true;
  }

  private readonly flush = () => {
    const chunk = Buffer.concat(this.queued, this.queuedBytes);
    this.queued = [];
    this.queuedBytes = 0;
    // A stream ended or reset within the turn takes nothing more.
    if (this.stream.writable) this.stream.write(chunk);
  };
}

const NOTHING = Buffer.alloc(0);

/** Cuts a UDP stream back into datagrams, whatever chunks it arrives in. */
export class Deframer {
  private pending: Buffer = NOTHING;

  push(chunk: Buffer, onDatagram: (datagram: Buffer) => void): void {
    let data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    while (data.length >= 2) {
      const size = data.readUInt16BE(0);
      if (data.length < 2 + size) break;
      onDatagram(data.subarray(2, 2 + size));
      data = data.subarray(2 + size);
    }
    // What is left of the chunk is copied: the chunk's memory is the stream's, not ours to keep.
    this.pending = data.length === 0 ? NOTHING : Buffer.from(data);
  }
}

/** A stream that has this many bytes waiting to be sent drops further datagrams instead of queueing them. */
/**
 * What an exit reports when it cannot listen on its tunnel's port, in words the master reads back (see exitPortTaken):
 * a port another program holds on the node is one the master did not know of.
 */
export function exitCannotListen(port: number, code: string): string {
  return `cannot listen on port ${port}/tcp: ${code}`;
}

/** The port an exit's error says is held by something else on its node (EADDRINUSE), or null. */
export function exitPortTaken(error: string | null): number | null {
  const match = error === null ? null : /^cannot listen on port (\d{1,5})\/tcp: EADDRINUSE$/.exec(error);
  return match ? Number(match[1]) : null;
}

export const MAX_UDP_BACKLOG = 256 * 1024;

/** What an end of a tunnel sees, reported to the master. */
export interface TunnelView {
  state: 'up' | 'down';
  /** The last thing that went wrong at this end (a refused peer, a failed connect), if any. */
  error: string | null;
  /** Round-trip time of the tunnel's session in microseconds, measured by the entry; null at the exit. */
  rtt_us: number | null;
  /** The share of the entry's last PINGs (a minute's) that got no answer, in percent; null at the exit, or before. */
  loss_percent: number | null;
}
