// A UDP listener that relays datagrams per client: each client address gets its own
// upstream socket (so replies find their way back), expired after a quiet spell, with a
// cap on sessions so a flood of source addresses cannot exhaust the node.

import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import type { Strategy } from '../domain/rules.ts';
import type { Counter } from './tcp.ts';
import { TargetPicker, type Target } from './targets.ts';

/**
 * Datagrams (and bytes) held for a session whose upstream socket is not connected yet; more are dropped, as a network
 * would.
 */
const MAX_QUEUED_DATAGRAMS = 64;
const MAX_QUEUED_BYTES = 256 * 1024;

interface Session {
  upstream: Socket;
  lastActive: number;
  /** Datagrams that arrived before the upstream socket finished connecting; null once it has. */
  queued: Buffer[] | null;
  queuedBytes: number;
}

export class UdpRelay {
  private socket: Socket | null = null;
  private readonly picker: TargetPicker;
  private readonly sessions = new Map<string, Session>();
  private counter: Counter = { bytes_in: 0, bytes_out: 0 };
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    targets: Target[],
    strategy: Strategy,
    private readonly maxSessions: number,
    private readonly idleMs = 60_000,
  ) {
    this.picker = new TargetPicker(targets, strategy);
    this.sweeper = setInterval(() => this.expire(), Math.min(idleMs, 10_000)).unref();
  }

  /** Resolves once bound; rejects with the bind error (EADDRINUSE, EACCES, ...). */
  listen(host: string, port: number): Promise<void> {
    const socket = createSocket({ type: isIPv6(host) ? 'udp6' : 'udp4', reuseAddr: false });
    this.socket = socket;
    return new Promise((resolve, reject) => {
      socket.once('error', reject);
      socket.bind({ address: host, port, exclusive: true }, () => {
        socket.off('error', reject);
        socket.on('error', () => {});
        socket.on('message', (message, from) => this.forward(message, from));
        resolve();
      });
    });
  }

  update(targets: Target[], strategy: Strategy): void {
    this.picker.update(targets, strategy);
  }

  drain(): Counter {
    const out = this.counter;
    this.counter = { bytes_in: 0, bytes_out: 0 };
    return out;
  }

  close(): Promise<void> {
    clearInterval(this.sweeper);
    for (const key of [...this.sessions.keys()]) this.end(key);
    return new Promise((resolve) => (this.socket ? this.socket.close(() => resolve()) : resolve()));
  }

  private forward(message: Buffer, from: RemoteInfo): void {
    const key = `${from.address}|${from.port}`;
    let session = this.sessions.get(key);
    if (!session) {
      if (this.sessions.size >= this.maxSessions) return;
      const target = this.picker.order()[0];
      if (!target) return;
      session = this.open(key, target, from);
    }
    session.lastActive = Date.now();
    if (session.queued) {
      if (session.queued.length >= MAX_QUEUED_DATAGRAMS || session.queuedBytes + message.length > MAX_QUEUED_BYTES)
        return;
      session.queued.push(message);
      session.queuedBytes += message.length;
    } else {
      session.upstream.send(message);
    }
    this.counter.bytes_in += message.length;
  }

  private open(key: string, target: Target, from: RemoteInfo): Session {
    const upstream = createSocket(isIPv6(target.host) ? 'udp6' : 'udp4');
    const session: Session = { upstream, lastActive: Date.now(), queued: [], queuedBytes: 0 };
    this.sessions.set(key, session);
    upstream.on('error', () => this.end(key));
    upstream.on('message', (reply) => {
      session.lastActive = Date.now();
      this.counter.bytes_out += reply.length;
      this.socket?.send(reply, from.port, from.address);
    });
    upstream.connect(target.port, target.host, () => {
      for (const message of session.queued ?? []) upstream.send(message);
      session.queued = null;
    });
    return session;
  }

  private end(key: string): void {
    const session = this.sessions.get(key);
    if (!session) return;
    this.sessions.delete(key);
    session.upstream.close();
  }

  private expire(): void {
    const cutoff = Date.now() - this.idleMs;
    for (const [key, session] of this.sessions) if (session.lastActive < cutoff) this.end(key);
  }
}
