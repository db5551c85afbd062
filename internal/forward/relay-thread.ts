// A relay thread: it listens beside the agent's main thread on the ports of the rules the relay carries straight to
// their targets (reusePort: the kernel spreads new clients over every socket on the port), and carries the clients
// it accepts under the rule's controls as the main thread holds them, in shared memory: its gate's cells, its
// listeners' counts, least_conn's counts, the health checks' verdicts. The main thread tells it of rules, limits and
// stops by message (see relay-threads.ts); it adds the bytes it carried to the rule's cells on a timer and at a stop,
// where the agent's report takes them, and tells the main thread of each fault it contained.
//
// A thread is started from this module's own file: the agent's bundle, where this module is one of many (its
// entry, cmd/agent/main.ts, runs nothing in a thread), or this file from the sources.

import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import type { FaultSite } from '../domain/link.ts';
import type { ForwardRule, Transport } from '../domain/rules.ts';
import { policyFor } from '../relay/dial.ts';
import { contained, faults } from '../relay/faults.ts';
import { RuleCells } from '../relay/cells.ts';
import { Gate } from '../relay/gate.ts';
import { DEFAULT_LIMITS, type Limits } from '../relay/limits.ts';
import { SharedHealth, TargetPicker, type Target } from '../relay/targets.ts';
import { directDials, relayOf, retarget, type Relay } from '../relay/relays.ts';
import type { Tiered } from './srv.ts';

/** What marks a worker as a relay thread, in its workerData. */
const RELAY_THREAD = 'portplaneRelayThread';

/** How often a thread adds what it carried to its rules' cells, and looks whether a quota was spent elsewhere. */
export const FLUSH_MS = 250;

/** One listening socket of a rule: its transport and port, and its counts, shared with the main thread's. */
export interface ThreadListener {
  transport: Transport;
  port: number;
  /** Its distance from the rule's listen_port. */
  offset: number;
  counts: SharedArrayBuffer;
}

/** A port a thread does not listen on beside the main thread (`tcp:port`), and why: its bind's error code. */
export interface Alone {
  key: string;
  code: string;
}

/** A rule as a thread carries it, with the shared memory of its controls. */
export interface ThreadRule {
  rule: ForwardRule & Tiered;
  targets: Target[];
  host: string;
  cells: SharedArrayBuffer;
  picker: SharedArrayBuffer;
  health: SharedArrayBuffer | null;
  listeners: ThreadListener[];
}

export type ToThread =
  | { type: 'limits'; limits: Limits }
  /** Starts carrying a rule, or takes its changes (same listeners). */
  | { type: 'rule'; rule: ThreadRule }
  | { type: 'stop'; id: number }
  /** Takes no more clients (an agent taking over listens beside); those open go on. */
  | { type: 'stop_accepting' }
  | { type: 'close' };

export type FromThread =
  /**
   * Done, with the ports it could not listen on: the main thread carries their clients alone (a socket handed over
   * by an older agent, a thread out of file descriptors, ...). The rule is carried all the same.
   */
  { type: 'done'; seq: number; alone: Alone[] } | { type: 'fault'; site: FaultSite; message: string };

/**
 * A relay thread running this module, told `limits` first; `index` (from 1: 0 is the main thread) is its place in the
 * shared counts, each of which keeps each thread's share.
 */
export function startRelayThread(limits: Limits, index: number): Worker {
  return new Worker(new URL(import.meta.url), { workerData: { [RELAY_THREAD]: true, limits, index } });
}

interface Carried {
  gate: Gate;
  picker: TargetPicker;
  health: SharedHealth | null;
  relays: Relay[];
  /** Each relay's distance from the rule's listen_port. */
  offsets: number[];
}

/** The thread's side: carries rules as told until told to close; `index`: its place in the shared counts. */
function serve(port: NonNullable<typeof parentPort>, limits: Limits, index: number): void {
  const rules = new Map<number, Carried>();
  const reply = (message: FromThread) => port.postMessage(message);
  faults.onFault = (site, error) => reply({ type: 'fault', site, message: error.message });

  const flush = (carried: Carried) => {
    for (const relay of carried.relays) {
      const { bytes_in, bytes_out } = relay.drain();
      carried.gate.cells.carried(bytes_in, bytes_out);
    }
    carried.gate.watchQuota();
  };
  const timer = setInterval(
    contained(
      'tcp_relay',
      () => rules.forEach(flush),
      () => undefined,
    ),
    FLUSH_MS,
  );

  const stop = async (id: number) => {
    const carried = rules.get(id);
    if (!carried) return;
    rules.delete(id);
    await Promise.all(carried.relays.map((relay) => relay.close()));
    flush(carried);
  };

  const start = async ({ rule, targets, host, cells, picker, health, listeners }: ThreadRule) => {
    const existing = rules.get(rule.id);
    const policy = policyFor(limits, rule.local_targets, rule.source_address);
    if (existing) {
      existing.health = health ? new SharedHealth(health) : null;
      existing.picker.update(targets, rule.strategy, rule.weights, rule.tiers ?? null, picker);
      existing.gate.update(rule);
      const dials = (offset: number) => directDials(existing.picker, policy, offset);
      retarget(existing.relays, existing.offsets, dials, rule.proxy_protocol);
      return [];
    }
    const gate = new Gate(rule, new RuleCells(cells, index));
    const carried: Carried = {
      ...{ gate, picker: null!, health: health ? new SharedHealth(health) : null },
      ...{ relays: [], offsets: [] },
    };
    const view = () => carried.health;
    const share = { buffer: picker, thread: index };
    carried.picker = new TargetPicker(targets, rule.strategy, rule.weights, view, rule.tiers ?? null, share);
    gate.onSpent = () => carried.relays.forEach((relay) => relay.endAll());
    rules.set(rule.id, carried);
    const alone: Alone[] = [];
    for (const { transport, port: at, offset, counts } of listeners) {
      const dials = directDials(carried.picker, policy, offset);
      const relay = relayOf(transport, dials, limits, gate, rule.proxy_protocol, { buffer: counts, thread: index });
      try {
        await relay.listen(host, at, undefined, true);
      } catch (error) {
        await relay.close();
        alone.push({ key: `${transport}:${at}`, code: (error as NodeJS.ErrnoException).code ?? 'error' });
        continue;
      }
      carried.relays.push(relay);
      carried.offsets.push(offset);
    }
    return alone;
  };

  /** Does what `message` says; the ports it could not listen on. */
  const handle = async (message: ToThread): Promise<Alone[]> => {
    switch (message.type) {
      case 'limits':
        Object.assign(limits, message.limits);
        return [];
      case 'rule':
        try {
          return await start(message.rule);
        } catch (error) {
          // Carried by the main thread alone, as a port the thread could not listen on.
          await stop(message.rule.rule.id);
          const code = (error as NodeJS.ErrnoException).code ?? 'error';
          return message.rule.listeners.map(({ transport, port: at }) => ({ key: `${transport}:${at}`, code }));
        }
      case 'stop':
        await stop(message.id);
        return [];
      case 'stop_accepting':
        for (const carried of rules.values()) for (const relay of carried.relays) relay.stopAccepting();
        return [];
      case 'close':
        clearInterval(timer);
        await Promise.all([...rules.keys()].map(stop));
        return [];
    }
  };

  // One message at a time, in order: a rule's stop never overtakes its start.
  let queue = Promise.resolve();
  port.on('message', ({ seq, message }: { seq: number; message: ToThread }) => {
    queue = queue.then(async () => {
      let alone: Alone[] = [];
      try {
        alone = await handle(message);
      } catch {
        // A stop or a close that met a socket's error is done all the same.
      }
      reply({ type: 'done', seq, alone });
      // Closed once it has said so: nothing is left for the thread to do, and it ends.
      if (message.type === 'close') port.close();
    });
  });
}

if (!isMainThread && parentPort && (workerData as Record<string, unknown> | null)?.[RELAY_THREAD] === true) {
  const { limits, index } = workerData as { limits: Limits; index: number };
  serve(parentPort, { ...DEFAULT_LIMITS, ...limits }, index);
}
