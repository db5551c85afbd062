// Reaching what a relayed connection or UDP session goes to. A relay does not know whether
// that is a rule's targets (dialled here, failing over along the strategy's order) or a
// tunnel to another node: it is handed a dial function and splices what it gets.

import { lookup, type LookupAddress } from 'node:dns';
import { createSocket, type Socket, type SocketOptions } from 'node:dgram';
import { connect, isIP, isIPv6, type LookupFunction, type Socket as NetSocket } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Duplex } from 'node:stream';
import { portAt } from '../domain/ranges.ts';
import { canonicalAddress, isUnroutable, localKind } from '../schema/net.ts';
import { contained } from './faults.ts';
import type { Gate } from './gate.ts';
import { forward, readingSocket } from './reads.ts';
import type { Target, TargetPicker } from './targets.ts';

const CONNECT_TIMEOUT_MS = 5_000;

/** What a relay may dial: read at each dial, so a changed config applies to the next connection. */
export interface DialPolicy {
  /**
   * Targets local to the node (loopback, link-local, its own addresses): the master's allow_local_rule_targets, for
   * rules it does not hold off them (see policyFor).
   */
  allowLocalTargets: boolean;
  /**
   * The master's addresses as the agent reaches it (canonical, see canonicalAddress): no target either, unless local
   * targets are allowed, whatever name a rule reaches them by.
   */
  masterAddresses?: ReadonlySet<string>;
  /** The node's address to dial from (a rule's source_address); absent or null: as routing picks. */
  localAddress?: string | null;
}

/**
 * The node's `policy` for one rule or probe, dialling from `localAddress` where given (its source_address):
 * `localTargets` false keeps it off what is local to the node, whatever the
 * node's policy says (a tenant's rule); absent (a config saved by an agent older than the field) is the node's. The
 * master's addresses are read from the node's at each dial.
 */
export function policyFor(
  policy: DialPolicy,
  localTargets: boolean | undefined,
  localAddress: string | null = null,
): DialPolicy {
  if (localTargets !== false && localAddress === null) return policy;
  return {
    // Read through, as the node's policy changes in place (Forwarder.setLimits).
    get allowLocalTargets() {
      return localTargets !== false && policy.allowLocalTargets;
    },
    get masterAddresses() {
      return policy.masterAddresses;
    },
    localAddress,
  };
}

/**
 * What a connection to a target dials from under `policy`: its source address, and the address family a name is then
 * resolved in (a connection of the other family could not come from it).
 */
function sourceOptions(policy: DialPolicy): { localAddress?: string; family?: number } {
  const from = policy.localAddress;
  return from ? { localAddress: from, family: isIPv6(from) ? 6 : 4 } : {};
}

/** The UDP socket type for `target` under `policy`: the source's family where it has one. */
function datagramType(target: Target, policy: DialPolicy): 'udp4' | 'udp6' {
  const from = policy.localAddress;
  return (from ? isIPv6(from) : isIPv6(target.host)) ? 'udp6' : 'udp4';
}

/** The node's own addresses (canonical, see canonicalAddress), looked up at most once a second. */
let own: { at: number; addresses: Set<string> } = { at: 0, addresses: new Set() };
function ownAddresses(): Set<string> {
  const now = Date.now();
  if (now - own.at > 1000) {
    const addresses = Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address));
    own = { at: now, addresses: new Set(addresses.map((a) => canonicalAddress(a) ?? a)) };
  }
  return own.addresses;
}

/** Why the node may not dial `address` (an IP address in any spelling) as a local target, or null. */
export function localRefusal(address: string): string | null {
  const kind = localKind(address);
  if (kind) return `${address} is a ${kind} address`;
  return ownAddresses().has(canonicalAddress(address) ?? address) ? `${address} is this node's own` : null;
}

/** Why `address` may not be dialled under `policy`: never one that is no host (broadcast...), local ones by policy. */
export function addressRefusal(address: string, policy: DialPolicy): string | null {
  const kind = localKind(address);
  if (isUnroutable(kind)) return `${address} is a ${kind} address, which is no host to forward to`;
  if (policy.allowLocalTargets) return null;
  const refused =
    localRefusal(address) ??
    (policy.masterAddresses?.has(canonicalAddress(address) ?? address) ? `${address} is the master` : null);
  return refused && `${refused}, and local targets are not allowed`;
}

/**
 * Resolves a target's name as the system would, but fails for a name that resolves to an address the policy refuses
 * (a name pointed at 127.0.0.1, at cloud metadata or at a broadcast address): the check happens on what is dialled,
 * after DNS. Only the target's name is checked: a UDP socket looks up its own wildcard address through it too, to bind.
 */
function guardedLookup(name: string, policy: DialPolicy): LookupFunction {
  return (hostname, given, callback) => {
    // dgram asks with the socket's family as a number (4 or 6), net with an options object.
    const options = typeof given === 'number' ? { family: given } : given;
    if (hostname !== name) return lookup(hostname, options, callback);
    lookup(hostname, { ...options, all: true }, (error, found: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      if (found.length === 0)
        return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0);
      const refused = found.map((a) => addressRefusal(a.address, policy)).find((reason) => reason !== null);
      if (refused) {
        const denied = Object.assign(new Error(`${hostname} resolves to ${refused}`), { code: 'ETARGETREFUSED' });
        return callback(denied, '', 0);
      }
      if (options.all) return (callback as unknown as (e: null, all: LookupAddress[]) => void)(null, found);
      callback(null, found[0]!.address, found[0]!.family);
    });
  };
}

/**
 * What dialling `host` under `policy` takes: why it may not be (an address refused), or the lookup that refuses what
 * a name resolves to, for another dialler than the relay's (a tunnel's WebSocket).
 */
export function guardFor(host: string, policy: DialPolicy): { refused: string | null; lookup?: LookupFunction } {
  return isIP(host)
    ? { refused: addressRefusal(host, policy) }
    : { refused: null, lookup: guardedLookup(host, policy) };
}

/** Where `target` may not be dialled under `policy`, why (for an address; a name is checked as it resolves). */
function refusalOf(target: Target, policy: DialPolicy): string | null {
  return isIP(target.host) ? addressRefusal(target.host, policy) : null;
}

/** The socket options that enforce `policy` while a target's name resolves. */
function lookupFor(target: Target, policy: DialPolicy): { lookup?: LookupFunction } {
  return isIP(target.host) ? {} : { lookup: guardedLookup(target.host, policy) };
}

/** Node's UDP connect callback: it is also called, with the error, when the connect fails (and nothing is emitted). */
type ConnectCallback = (error?: Error | null) => void;
function connectDatagrams(socket: Socket, target: Target, policy: DialPolicy, callback: ConnectCallback): void {
  const from = policy.localAddress;
  if (!from) return socket.connect(target.port, target.host, callback as () => void);
  // Bound to the source first: connect would bind the wildcard. A bind that fails is the socket's error event.
  socket.bind({ address: from, port: 0 }, () => socket.connect(target.port, target.host, callback as () => void));
}

/** How long a check that greeted its target (a PROXY header) waits for it to hang up before resetting. */
const GREETED_CLOSE_MS = 1_000;

/**
 * Connects to `target` as a relay would (the same policy, the same guarded lookup) and hangs up: null when it answered
 * within `timeoutMs`, otherwise why not (an error code such as ECONNREFUSED, or timeout). With `greeting` (a rule's
 * PROXY header, which its target expects first), that is sent and the connection ended rather than reset, as
 * HAProxy's `check send-proxy` does, so the target does not log every check as a broken client.
 */
export function probeTarget(
  target: Target,
  policy: DialPolicy,
  timeoutMs: number,
  greeting: Buffer | null = null,
): Promise<string | null> {
  const refused = refusalOf(target, policy);
  if (refused) return Promise.resolve(refused);
  return new Promise((resolve) => {
    let socket: NetSocket | undefined;
    const done = (why: string | null) => {
      if (why === null && greeting && socket) {
        const open = socket;
        open.setTimeout(0);
        open.on('error', () => open.destroy());
        open.end(greeting);
        setTimeout(() => open.destroy(), GREETED_CLOSE_MS).unref();
      } else socket?.destroy();
      resolve(why);
    };
    const fail = (error: unknown) => done(codeOf(error));
    contained(
      'probe',
      () => {
        socket = connect({
          host: target.host,
          port: target.port,
          ...lookupFor(target, policy),
          ...sourceOptions(policy),
        });
        socket.setTimeout(timeoutMs);
        socket.once(
          'connect',
          contained('probe', () => done(null), fail),
        );
        socket.once(
          'timeout',
          contained('probe', () => done('timeout'), fail),
        );
        socket.once('error', contained('probe', fail, fail));
      },
      fail,
    )();
  });
}

/** An error's code (ECONNREFUSED...), or its message. */
function codeOf(error: unknown): string {
  return (error as NodeJS.ErrnoException)?.code ?? (error as Error)?.message ?? String(error);
}

/**
 * Sends `target` one datagram from a socket of its own, as a relay would (the same policy): true when anything comes
 * back within `timeoutMs`, false with the error when the target's host says no one listens (an ICMP port unreachable,
 * ECONNREFUSED) or the datagram cannot go (no route, a name that resolves nowhere), null when nothing comes back (UDP
 * cannot tell a silent service from a lost datagram).
 */
export function probeDatagram(
  target: Target,
  policy: DialPolicy,
  timeoutMs: number,
): Promise<{ reachable: boolean | null; error: string | null }> {
  const refused = refusalOf(target, policy);
  if (refused) return Promise.resolve({ reachable: false, error: refused });
  return new Promise((resolve) => {
    let socket: Socket | undefined;
    let settled = false;
    const timer = setTimeout(() => done({ reachable: null, error: 'no answer' }), timeoutMs);
    const done = (outcome: { reachable: boolean | null; error: string | null }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket?.close();
      resolve(outcome);
    };
    const fail = (error: unknown) => done({ reachable: false, error: codeOf(error) });
    contained(
      'probe',
      () => {
        socket = createSocket({
          type: datagramType(target, policy),
          ...(lookupFor(target, policy) as Pick<SocketOptions, 'lookup'>),
        });
        socket.on(
          'message',
          contained('probe', () => done({ reachable: true, error: null }), fail),
        );
        socket.on('error', contained('probe', fail, fail));
        connectDatagrams(
          socket,
          target,
          policy,
          contained(
            'probe',
            (error?: Error | null) => {
              if (error) return fail(error);
              socket!.send(
                'portplane probe',
                contained('probe', (sent?: Error | null) => sent && fail(sent), fail),
              );
            },
            fail,
          ),
        );
      },
      fail,
    )();
  });
}

/** Lets go of an upstream whose client has gone. A socket is destroyed; a tunnel stream has its own way. */
export type Release = (upstream: Duplex) => void;

/**
 * Opens the far side of one relayed TCP connection: `onOpen` with it (and how to let go of
 * it, when not by destroying it), or `onFail` saying why there is none.
 */
export type TcpDial = (
  onOpen: (upstream: Duplex, release?: Release) => void,
  onFail: (reason: string) => void,
  /** The client's address (what source_hash goes by); empty where it is not known. */
  client: string,
) => void;

/** One client's UDP session: datagrams out with `send`, replies to the `onReply` it was opened with. */
export interface DatagramSession {
  /** False when the datagram was dropped (a full queue), as a network would. */
  send(datagram: Buffer): boolean;
  close(): void;
}

/** Opens a session for one client, or null when there is nowhere to send; `onEnd` when the far side fails. */
export type DatagramDial = (
  onReply: (datagram: Buffer) => void,
  onEnd: () => void,
  /** The client's address, as for TcpDial. */
  client: string,
) => DatagramSession | null;

/**
 * Dials the picker's targets in its order; a refused or unreachable one is skipped for the next, and so is one the
 * policy does not allow.
 */
export function dialTargets(picker: TargetPicker, policy: DialPolicy, offset = 0): TcpDial {
  return (onOpen, onFail, client) =>
    tryTargets(picker, picker.order(client), policy, offset, onOpen, onFail, 'the rule has no target');
}

function tryTargets(
  picker: TargetPicker,
  remaining: Target[],
  policy: DialPolicy,
  /** How far past its listen_port the client's port is: a range target is dialled that far past its first port. */
  offset: number,
  onOpen: (upstream: Duplex) => void,
  onFail: (reason: string) => void,
  lastError: string,
): void {
  const target = remaining[0];
  if (!target) return onFail(lastError);
  const next = (reason: string) => tryTargets(picker, remaining.slice(1), policy, offset, onOpen, onFail, reason);
  const refused = refusalOf(target, policy);
  if (refused) return next(`${target.host}:${target.port}: ${refused}`);
  const upstream = readingSocket({ allowHalfOpen: true });
  let movedOn = false;
  const failover = (error?: unknown) => {
    upstream.destroy();
    if (movedOn) return;
    movedOn = true;
    next(`${target.host}:${target.port}: ${error === undefined ? 'timed out' : codeOf(error)}`);
  };
  // Until it connects, a failure moves on to the next target; once connected, the relay handles what comes.
  const onError = contained('tcp_relay', failover, failover);
  const timedOut = contained('tcp_relay', () => failover(), failover);
  const connected = contained(
    'tcp_relay',
    () => {
      upstream.off('error', onError);
      upstream.off('timeout', timedOut);
      upstream.setTimeout(0);
      upstream.once('close', picker.hold(target));
      onOpen(upstream);
    },
    () => upstream.destroy(),
  );
  contained(
    'tcp_relay',
    () => {
      upstream.setTimeout(CONNECT_TIMEOUT_MS);
      upstream.connect({
        host: target.host,
        port: portAt(target, offset),
        ...lookupFor(target, policy),
        ...sourceOptions(policy),
      });
      upstream.once('error', onError);
      upstream.once('timeout', timedOut);
      upstream.once('connect', connected);
    },
    failover,
  )();
}

/**
 * Relays between a client and its upstream until either ends: half-close passes through (one
 * side's end becomes the other's end), back-pressure pauses the side read, an error on one side ends both. With
 * the rule's `gate`, each way is counted against its quota and waits for its bandwidth.
 */
export function splice(
  client: Duplex,
  upstream: Duplex,
  release: Release = (gone) => gone.destroy(),
  gate: Gate | null = null,
): void {
  if (client.destroyed) return release(upstream);
  upstream.on('error', () => client.destroy());
  client.on('close', () => release(upstream));
  upstream.on('close', () => {
    if (!client.writableEnded) client.destroy();
  });
  // Each side starts reading when forward says: at once, or once its rule's bandwidth has room for it.
  forward(client, upstream, gate && { gate, way: 'in' });
  forward(upstream, client, gate && { gate, way: 'out' });
}

/**
 * The receive buffer a relay asks for on its UDP sockets. The default (208 KiB, a few hundred
 * small datagrams) overflows when the relay pauses for a few milliseconds at 50,000 datagrams
 * a second; this absorbs such pauses (in the bench the relay lost 1.15% at 50k and 2.1% at
 * 75k without it, nothing with it). It only bounds what may queue: the kernel caps it at
 * net.core.rmem_max, and all UDP sockets together at udp_mem.
 */
export const DATAGRAM_BUFFER_BYTES = 2 * 1024 * 1024;

/**
 * Datagrams (and bytes) held for a session whose upstream socket is not connected yet; more are dropped, as a network
 * would.
 */
const MAX_QUEUED_DATAGRAMS = 64;
const MAX_QUEUED_BYTES = 256 * 1024;

/**
 * A UDP session to the first target in the picker's order that the socket can be connected to (a name that resolves
 * nowhere, or an address with no route, is passed over for the next), over a socket of its own so replies find the
 * client; none when the policy allows no target.
 */
export function datagramsTo(picker: TargetPicker, policy: DialPolicy, offset = 0): DatagramDial {
  return (onReply, onEnd, client) => {
    const targets = picker.order(client).filter((target) => !refusalOf(target, policy));
    if (targets.length === 0) return null;
    let queued: Buffer[] | null = [];
    let queuedBytes = 0;
    let closed = false;
    let upstream: Socket | undefined;
    let letGo = () => undefined as void;
    const session: DatagramSession = {
      send(datagram) {
        if (closed) return false;
        if (!queued) {
          upstream!.send(datagram);
          return true;
        }
        if (queued.length >= MAX_QUEUED_DATAGRAMS || queuedBytes + datagram.length > MAX_QUEUED_BYTES) return false;
        queued.push(datagram);
        queuedBytes += datagram.length;
        return true;
      },
      close() {
        if (closed) return;
        closed = true;
        queued = null;
        letGo();
        upstream?.close();
      },
    };
    // The session's end, whatever ended it: a socket error, no target connected, a throw in one of its callbacks.
    const end = () => {
      if (closed) return;
      session.close();
      onEnd();
    };
    const open = (index: number) => {
      const target = targets[index]!;
      letGo();
      letGo = picker.hold(target);
      const socket = createSocket({
        type: datagramType(target, policy),
        recvBufferSize: DATAGRAM_BUFFER_BYTES,
        // The same lookup: asked for one address, it answers with one.
        ...(lookupFor(target, policy) as Pick<SocketOptions, 'lookup'>),
      });
      upstream = socket;
      socket.on('error', contained('udp_relay', end, end));
      socket.on('message', contained('udp_relay', onReply, end));
      const connected = (error?: Error | null) => {
        if (closed) return;
        if (error) {
          if (index + 1 >= targets.length) return end();
          socket.close();
          return open(index + 1);
        }
        for (const datagram of queued ?? []) socket.send(datagram);
        queued = null;
      };
      connectDatagrams(
        socket,
        { host: target.host, port: portAt(target, offset) },
        policy,
        contained('udp_relay', connected, end),
      );
    };
    contained('udp_relay', open, end)(0);
    return closed ? null : session;
  };
}
