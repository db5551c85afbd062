// A rule's relays, one a port and transport, made and pointed at its targets alike by the agent's main thread and by
// its relay threads (forward/relay-thread.ts), which carry the same rules beside it.

import { datagramsTo, dialTargets, type DatagramDial, type DialPolicy, type TcpDial } from './dial.ts';
import type { Gate } from './gate.ts';
import type { Limits } from './limits.ts';
import { ListenerCounts } from './listener-counts.ts';
import type { ProxyProtocol, Transport } from '../domain/rules.ts';
import type { TargetPicker } from './targets.ts';
import { TcpRelay } from './tcp.ts';
import { UdpRelay } from './udp.ts';

export type Relay = TcpRelay | UdpRelay;

/** How a rule's relays on the port at `offset` of its range reach its targets, by transport. */
export interface Dials {
  tcp: TcpDial;
  udp: DatagramDial;
}

/** Straight to the targets `picker` chooses among, as `policy` allows. */
export function directDials(picker: TargetPicker, policy: DialPolicy, offset: number): Dials {
  return { tcp: dialTargets(picker, policy, offset), udp: datagramsTo(picker, policy, offset) };
}

/**
 * A relay's connection (or session) counts: thread `thread`'s view of another thread's (`buffer`) for the same port,
 * or new ones kept by `threads` threads, as the main thread uses them.
 */
export type CountsShare = { buffer: SharedArrayBuffer; thread: number } | { threads: number };

/** A relay of `transport` for the rule `gate` guards, its counts as `share` says. */
export function relayOf(
  transport: Transport,
  dials: Dials,
  limits: Limits,
  gate: Gate,
  proxyProtocol: ProxyProtocol,
  share: CountsShare = { threads: 1 },
): Relay {
  const [buffer, thread, threads] = 'buffer' in share ? [share.buffer, share.thread, 1] : [undefined, 0, share.threads];
  if (transport === 'tcp') {
    const counts = new ListenerCounts(limits.maxConnectionsPerRule, buffer, thread, threads);
    return new TcpRelay(dials.tcp, limits, gate, proxyProtocol, counts);
  }
  return new UdpRelay(
    dials.udp,
    limits,
    gate,
    new ListenerCounts(limits.maxUdpSessionsPerRule, buffer, thread, threads),
  );
}

/** Points a rule's relays (each at its port's `offsets[i]`) at `dials` and its PROXY protocol: open ones stay. */
export function retarget(
  relays: readonly Relay[],
  offsets: readonly number[],
  dials: (offset: number) => Dials,
  proxyProtocol: ProxyProtocol,
): void {
  relays.forEach((relay, i) => {
    const dial = dials(offsets[i]!);
    if (relay instanceof TcpRelay) {
      relay.dial = dial.tcp;
      relay.proxyProtocol = proxyProtocol;
    } else relay.dial = dial.udp;
  });
}

export function transportOf(relay: Relay): Transport {
  return relay instanceof TcpRelay ? 'tcp' : 'udp';
}
