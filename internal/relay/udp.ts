// A UDP listener that relays datagrams per client: each client address and port gets its own
// session from the dial function (a socket to a target, or a stream through a tunnel), so
// replies find their way back; sessions expire after a quiet spell, and caps on them (per rule,
// and per source address as for TCP connections) keep a flood of sources, or one source
// walking through its ports, from exhausting the node.

import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';
import { DATAGRAM_BUFFER_BYTES, type DatagramDial, type DatagramSession } from './dial.ts';
import type { Gate } from './gate.ts';
import type { Limits } from './limits.ts';
import type { Counter } from './tcp.ts';
import { contained } from './faults.ts';
import { ListenerCounts } from './listener-counts.ts';

/** A dgram socket's bare handle, which dgram keeps in its state (its `_handle` getter warns as deprecated). */
function handleOf(socket: Socket): object | undefined {
  const state = Object.getOwnPropertySymbols(socket).find((symbol) => symbol.description === 'state symbol');
  if (!state) return undefined;
  return (socket as unknown as Record<symbol, { handle?: object | null }>)[state]?.handle ?? undefined;
}

interface Session {
  upstream: DatagramSession;
  lastActive: number;
}

export class UdpRelay {
  private socket: Socket | null = null;
  private readonly sessions = new Map<string, Session>();
  private counter: Counter = { bytes_in: 0, bytes_out: 0 };
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    /** Replaced in place when the rule changes; sessions already open keep theirs. */
    public dial: DatagramDial,
    /** Shared with the forwarder: a change applies to the next session. */
    private readonly limits: Pick<Limits, 'maxUdpSessionsPerRule' | 'maxConnectionsPerSource' | 'udpIdleMs'>,
    /** The rule's allow and deny lists, max_connections and expiry, met by each new session. */
    private readonly gate: Gate,
    /** Its sessions in all and per client address, alike in every thread bound to the port. */
    readonly counts = new ListenerCounts(limits.maxUdpSessionsPerRule),
  ) {
    this.sweeper = setInterval(
      contained(
        'udp_relay',
        () => this.expire(),
        () => undefined,
      ),
      Math.min(limits.udpIdleMs, 10_000),
    ).unref();
  }

  /**
   * Resolves once bound to `port`, or at once with `inherited`: the bound socket's handle an agent handed over (see
   * TcpRelay.listen), and `shared` as there. Rejects with the bind error (EADDRINUSE, EACCES, ...).
   */
  listen(host: string, port: number, inherited?: object, shared = false): Promise<void> {
    const socket = createSocket({
      type: isIPv6(host) ? 'udp6' : 'udp4',
      reuseAddr: false,
      ...(shared ? { reusePort: true } : {}),
      recvBufferSize: DATAGRAM_BUFFER_BYTES,
    });
    if (inherited) {
      // dgram takes a bound handle in place of a port (undocumented, as is the handle it hands out: see
      // listeningHandle).
      socket.bind(inherited as never);
      this.receive(socket);
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const failed = (error: Error) => {
        socket.close();
        reject(error);
      };
      socket.once('error', failed);
      socket.bind({ address: host, port, exclusive: true }, () => {
        socket.off('error', failed);
        this.receive(socket);
        resolve();
      });
    });
  }

  private receive(socket: Socket): void {
    this.socket = socket;
    socket.on('error', () => {});
    // A fault in one client's datagram ends that client's session, not the listener.
    socket.on(
      'message',
      contained(
        'udp_relay',
        (message, from) => this.forward(message, from),
        (_, _message, from) => this.end(`${from.address}|${from.port}`),
      ),
    );
  }

  /**
   * The bound socket's handle, to hand to the agent that takes over (see TcpRelay.listeningHandle): the bare handle, as
   * a process handed a dgram socket reads from it, taking datagrams it cannot relay.
   */
  get listeningHandle(): object | undefined {
    return this.socket ? handleOf(this.socket) : undefined;
  }

  /**
   * Takes no more datagrams, and ends its sessions: UDP has no connection to wait for, and a socket shared with the
   * agent taking over would hand that one part of a session's datagrams.
   */
  stopAccepting(): void {
    this.endAll();
    this.socket?.close();
    this.socket = null;
  }

  /** Sessions are not waited for (see stopAccepting). */
  get carrying(): number {
    return 0;
  }

  drain(): Counter {
    const out = this.counter;
    this.counter = { bytes_in: 0, bytes_out: 0 };
    return out;
  }

  /** Ends every session; the socket stays bound. */
  endAll(): void {
    for (const key of [...this.sessions.keys()]) this.end(key);
  }

  close(): Promise<void> {
    clearInterval(this.sweeper);
    this.endAll();
    return new Promise((resolve) => (this.socket ? this.socket.close(() => resolve()) : resolve()));
  }

  private forward(message: Buffer, from: RemoteInfo): void {
    const key = `${from.address}|${from.port}`;
    let session = this.sessions.get(key);
    if (!session) {
      const { maxUdpSessionsPerRule, maxConnectionsPerSource } = this.limits;
      if (!this.counts.claim(from.address, maxUdpSessionsPerRule, maxConnectionsPerSource)) return this.gate.refuse();
      if (!this.gate.admit(from.address)) return this.counts.release(from.address);
      const opened = this.open(key, from);
      if (!opened) {
        this.counts.release(from.address);
        return this.gate.release();
      }
      session = opened;
    }
    session.lastActive = Date.now();
    // Beyond the rule's bandwidth or quota a datagram is dropped, as a policer would.
    if (!this.gate.datagram('in', message.length)) return;
    if (session.upstream.send(message)) this.counter.bytes_in += message.length;
  }

  private open(key: string, from: RemoteInfo): Session | null {
    const session: Session = { upstream: null!, lastActive: Date.now() };
    const upstream = this.dial(
      (reply) => {
        session.lastActive = Date.now();
        if (!this.gate.datagram('out', reply.length)) return;
        this.counter.bytes_out += reply.length;
        this.socket?.send(reply, from.port, from.address);
      },
      // Called from the session's own callbacks, which contain what it throws.
      () => this.end(key),
      from.address,
    );
    if (!upstream) return null;
    session.upstream = upstream;
    this.sessions.set(key, session);
    return session;
  }

  private end(key: string): void {
    const session = this.sessions.get(key);
    if (!session) return;
    this.sessions.delete(key);
    this.counts.release(key.slice(0, key.lastIndexOf('|')));
    this.gate.release();
    session.upstream.close();
  }

  private expire(): void {
    const cutoff = Date.now() - this.limits.udpIdleMs;
    for (const [key, session] of this.sessions) if (session.lastActive < cutoff) this.end(key);
  }
}
