// A TCP listener that relays each connection to what its dial function opens (a rule's
// targets, or a stream through a tunnel), and reads the bytes off the client sockets' own
// counters, so what is counted is what crossed the relay.

import { createServer, type Server, type Socket } from 'node:net';
import type { Limits } from './limits.ts';
import { splice, type TcpDial } from './dial.ts';
import type { ProxyProtocol } from '../domain/rules.ts';
import type { Gate } from './gate.ts';
import { proxyHeader } from './proxy-protocol.ts';
import { adopt } from './reads.ts';
import { contained } from './faults.ts';
import { ListenerCounts } from './listener-counts.ts';

export interface Counter {
  bytes_in: number;
  bytes_out: number;
}

/** A connection the relay carries, where it sits in the list, and what `drain` already counted of it. */
interface Carried {
  socket: Socket;
  slot: number;
  countedIn: number;
  countedOut: number;
}

export class TcpRelay {
  private readonly server: Server;
  /**
   * The connections open, in an array each leaves by swapping the last into its slot. A Set (or a WeakMap) of sockets
   * that come and go thousands of times a second made each of V8's young-generation collections keep tens of
   * megabytes alive and take 12-25 ms rather than 0.3: an eighth of the relay's time at 9,000 connections a second.
   */
  private readonly carried: Carried[] = [];
  /** Bytes of connections that have closed since the last `drain`. */
  private closed: Counter = { bytes_in: 0, bytes_out: 0 };

  constructor(
    /** Replaced in place when the rule changes, so open connections stay. */
    public dial: TcpDial,
    private readonly limits: Pick<Limits, 'maxConnectionsPerRule' | 'maxConnectionsPerSource' | 'tcpIdleMs'>,
    private readonly gate: Gate,
    /** Replaced in place when the rule changes: what the next connection's target is sent first. */
    public proxyProtocol: ProxyProtocol = 'none',
    /** Its connections in all and per client address, alike in every thread listening on the port. */
    readonly counts = new ListenerCounts(limits.maxConnectionsPerRule),
  ) {
    this.server = createServer(
      { allowHalfOpen: true, pauseOnConnect: true },
      contained(
        'tcp_relay',
        (client) => this.accept(adopt(client)),
        (_, client) => client.destroy(),
      ),
    );
  }

  /**
   * Resolves once listening on `port`, or on `inherited`: the listening socket an agent handed over (see
   * agent/supervisor.ts), which the kernel shares between both until the old one stops accepting. `shared`: beside
   * other sockets of this agent's relay threads (reusePort: the kernel spreads new connections over them). Rejects
   * with the bind error (EADDRINUSE, EACCES, ...).
   */
  listen(host: string, port: number, inherited?: object, shared = false): Promise<void> {
    return new Promise((resolve, reject) => {
      const listening = () => {
        this.server.off('error', reject);
        resolve();
      };
      this.server.once('error', reject);
      if (inherited) this.server.listen(inherited, listening);
      else this.server.listen({ host, port, exclusive: true, ...(shared ? { reusePort: true } : {}) }, listening);
    });
  }

  /**
   * The listening socket's handle, to hand to the agent that takes over. The bare handle, not the server: a process
   * that passes a server on listens on it meanwhile, and would take connections it cannot relay.
   */
  get listeningHandle(): object | undefined {
    return (this.server as unknown as { _handle?: object })._handle;
  }

  /** Takes no more connections; those open go on. */
  stopAccepting(): void {
    this.server.close();
  }

  /** How many connections it relays now, in every thread listening on its port. */
  get carrying(): number {
    return this.counts.open;
  }

  /** Bytes relayed since the previous call: in = client to target, out = target to client. */
  drain(): Counter {
    const total = this.closed;
    this.closed = { bytes_in: 0, bytes_out: 0 };
    for (const open of this.carried) {
      total.bytes_in += open.socket.bytesRead - open.countedIn;
      total.bytes_out += open.socket.bytesWritten - open.countedOut;
      open.countedIn = open.socket.bytesRead;
      open.countedOut = open.socket.bytesWritten;
    }
    return total;
  }

  /** Ends every relayed connection; the listener stays. */
  endAll(): void {
    for (const open of [...this.carried]) open.socket.destroy();
  }

  /** Stops listening and ends every relayed connection. */
  close(): Promise<void> {
    this.endAll();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const source = client.remoteAddress ?? '';
    const { maxConnectionsPerRule, maxConnectionsPerSource } = this.limits;
    if (!this.counts.claim(source, maxConnectionsPerRule, maxConnectionsPerSource)) {
      this.gate.refuse();
      return void client.destroy();
    }
    if (!this.gate.admit(source)) {
      this.counts.release(source);
      return void client.destroy();
    }
    const carried: Carried = { socket: client, slot: this.carried.length, countedIn: 0, countedOut: 0 };
    this.carried.push(carried);
    client.on('error', () => client.destroy());
    // Reads and writes on the client both count as activity, so one side's silence alone does not end it.
    client.setTimeout(this.limits.tcpIdleMs, () => client.destroy());
    client.on('close', () => {
      this.closed.bytes_in += client.bytesRead - carried.countedIn;
      this.closed.bytes_out += client.bytesWritten - carried.countedOut;
      const last = this.carried.pop()!;
      if (last !== carried) {
        this.carried[carried.slot] = last;
        last.slot = carried.slot;
      }
      this.counts.release(source);
      this.gate.release();
    });
    const header = this.headerFor(client);
    this.dial(
      (upstream, release) => {
        if (header) upstream.write(header);
        splice(client, upstream, release, this.gate);
      },
      () => client.destroy(),
      source,
    );
  }

  /** The PROXY protocol header the connection's target is sent first, if the rule asks for one. */
  private headerFor(client: Socket): Buffer | null {
    if (this.proxyProtocol === 'none') return null;
    return proxyHeader(
      this.proxyProtocol,
      { address: client.remoteAddress ?? '', port: client.remotePort ?? 0 },
      { address: client.localAddress ?? '', port: client.localPort ?? 0 },
    );
  }
}
