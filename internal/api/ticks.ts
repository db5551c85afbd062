// Traffic ticks: the bytes each node's rules moved since the last tick, as their committed reports said, sent to event
// streams every tickMs. Live only: never stored, never replayed.

import type { Store } from '../store/store.ts';
import { TICK_RULES } from './events.ts';

/** Bytes moved by a node's rules since the last tick. */
export interface NodeTick {
  bytes_in: number;
  bytes_out: number;
  rules: Map<number, { bytes_in: number; bytes_out: number; refused: number }>;
}

export interface RuleCounts {
  id: number;
  bytes_in: number;
  bytes_out: number;
  refused: number;
}

/** What the nodes' reports counted since the last `take`. */
export class TrafficTicks {
  private ticks = new Map<number, NodeTick>();

  /** Counts a committed traffic report of a node, for the next tick. */
  add(nodeId: number, rules: readonly RuleCounts[]): void {
    let tick = this.ticks.get(nodeId);
    if (!tick) this.ticks.set(nodeId, (tick = { bytes_in: 0, bytes_out: 0, rules: new Map() }));
    for (const rule of rules) {
      if (rule.bytes_in + rule.bytes_out + rule.refused === 0) continue;
      tick.bytes_in += rule.bytes_in;
      tick.bytes_out += rule.bytes_out;
      const counts = tick.rules.get(rule.id);
      if (counts) {
        counts.bytes_in += rule.bytes_in;
        counts.bytes_out += rule.bytes_out;
        counts.refused += rule.refused;
      } else tick.rules.set(rule.id, { bytes_in: rule.bytes_in, bytes_out: rule.bytes_out, refused: rule.refused });
    }
  }

  /** Forgets what was counted: no stream is left to be told. */
  clear(): void {
    this.ticks.clear();
  }

  /** What was counted since the last take, by node, or null for nothing; counting starts over. */
  take(): Map<number, NodeTick> | null {
    if (this.ticks.size === 0) return null;
    const ticks = this.ticks;
    this.ticks = new Map();
    return ticks;
  }
}

/**
 * The ticks split by the rules' owners, for tenants' streams: each user's rules alone, and as a node's bytes only what
 * their rules moved there (the node's own total carries others' traffic). One read for all the ticks' rules.
 */
export function ownedTicks(store: Store, ticks: ReadonlyMap<number, NodeTick>): Map<number, Map<number, NodeTick>> {
  const owners = store.rules.ownersOf([...ticks.values()].flatMap((tick) => [...tick.rules.keys()]));
  const byOwner = new Map<number, Map<number, NodeTick>>();
  for (const [nodeId, tick] of ticks)
    for (const [ruleId, counts] of tick.rules) {
      const owner = owners.get(ruleId);
      if (owner === undefined) continue;
      const nodes = byOwner.get(owner) ?? byOwner.set(owner, new Map()).get(owner)!;
      const theirs =
        nodes.get(nodeId) ?? nodes.set(nodeId, { bytes_in: 0, bytes_out: 0, rules: new Map() }).get(nodeId)!;
      theirs.bytes_in += counts.bytes_in;
      theirs.bytes_out += counts.bytes_out;
      theirs.rules.set(ruleId, counts);
    }
  return byOwner;
}

/** The traffic event for `nodes`' ticks at `at`: each node's bytes, and its busiest rules' (TICK_RULES at most). */
export function tickJson(nodes: readonly (readonly [number, NodeTick])[], at: string): string {
  const rules = nodes
    .flatMap(([nodeId, tick]) => [...tick.rules].map(([id, counts]) => ({ id, node_id: nodeId, ...counts })))
    .sort((a, b) => b.bytes_in + b.bytes_out - (a.bytes_in + a.bytes_out));
  const data = {
    nodes: nodes.map(([id, tick]) => ({ id, bytes_in: tick.bytes_in, bytes_out: tick.bytes_out })),
    rules: rules.slice(0, TICK_RULES),
    rules_left: Math.max(0, rules.length - TICK_RULES),
  };
  return JSON.stringify({ type: 'traffic', at, node_ids: nodes.map(([id]) => id), data });
}
