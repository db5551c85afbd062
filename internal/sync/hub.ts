// Where desired-config changes meet agents: writes announce that a node's config changed,
// and sync requests wait, bounded, for the node to acknowledge a version. The agent link
// registers connected nodes, when each was last heard, and what they applied: the one
// record of which nodes are online, which the store renders nodes' status from.

import { EventEmitter } from 'node:events';
import type { ProbeMessage, ProbeResult, UpgradeStatusMessage } from '../domain/link.ts';
import type { Presence } from '../store/nodes.ts';
import { LiveNumbers } from './live.ts';

interface PendingProbe {
  nodeId: number;
  targets: string[];
  resolve: (results: ProbeResult[] | null) => void;
}

interface Waiter {
  version: number;
  resolve: (applied: boolean) => void;
}

export class SyncHub implements Presence {
  /** Emits 'config' with a node id after a committed change to that node's desired config. */
  readonly changes = new EventEmitter();
  /** When each linked node's agent was last heard, as an RFC 3339 time. */
  private readonly connected = new Map<number, string>();
  /** Each connected node's link, as a number no other link of this master or of one before it had. */
  private readonly links = new Map<number, number>();
  /** When each connected node's link was made, in ms. */
  private readonly linkedAt = new Map<number, number>();
  /** When each node's agent last lost its link (ms), for as long as it has none. */
  private readonly lostAt = new Map<number, number>();
  /** The last link's number: microseconds since the epoch at the start, so a master started again never reuses one. */
  private lastLink = Date.now() * 1000;
  /** The nodes whose agent has linked since this master started. */
  private readonly linkedThisRun = new Set<number>();
  private readonly waiters = new Map<number, Set<Waiter>>();
  private readonly presenceListeners: ((nodeId: number) => void)[] = [];
  /**
   * Emits 'traffic' with a node id and its report's counts per rule once they are committed, and 'vitals' with a node
   * id and its agent's vitals: for live event streams.
   */
  readonly reports = new EventEmitter();
  /** What each node's rules carry at this moment, as its agent last said (see live.ts). */
  readonly live = new LiveNumbers();
  /** Emits 'probe' with a node id and the message for its agent (the agent link sends it). */
  readonly probes = new EventEmitter();
  /** Emits 'upgrade' with a node id and a rollout's order for its agent (the agent link sends it). */
  readonly upgrades = new EventEmitter();
  /** The config version each node's agent acknowledged on the link it has now. */
  private readonly appliedOnLink = new Map<number, number>();
  /** What agents said of an upgrade they were told to make, until the rollouts read it (one per node, the last). */
  private readonly upgradeReports = new Map<number, UpgradeStatusMessage>();
  private readonly pendingProbes = new Map<number, PendingProbe>();
  private nextProbe = 1;

  configChanged(nodeId: number): void {
    this.changes.emit('config', nodeId);
  }

  /** Announces every connected node's config as changed: for settings every agent receives with it. */
  configChangedEverywhere(): void {
    for (const nodeId of this.connected.keys()) this.changes.emit('config', nodeId);
  }

  /** How many nodes have an agent linked now. */
  connectedCount(): number {
    return this.connected.size;
  }

  isConnected(nodeId: number): boolean {
    return this.connected.has(nodeId);
  }

  heardAt(nodeId: number): string | undefined {
    return this.connected.get(nodeId);
  }

  onPresenceChange(fn: (nodeId: number) => void): void {
    this.presenceListeners.push(fn);
  }

  /** The node's current link (a number no other link had); undefined while it has none. */
  linkOf(nodeId: number): number | undefined {
    return this.links.get(nodeId);
  }

  /** Whether the node's agent has linked since this master started (one offline since then has been seen to go). */
  linkedSinceStart(nodeId: number): boolean {
    return this.linkedThisRun.has(nodeId);
  }

  /** When the node's current link was made (ms), as the clock stamped it; undefined while it has none. */
  linkedAtMs(nodeId: number): number | undefined {
    return this.linkedAt.get(nodeId);
  }

  /** The node's agent linked, heard at `at`. */
  connect(nodeId: number, at: string): void {
    this.connected.set(nodeId, at);
    this.lostAt.delete(nodeId);
    this.linkedAt.set(nodeId, Date.parse(at));
    this.links.set(nodeId, ++this.lastLink);
    this.appliedOnLink.delete(nodeId);
    this.linkedThisRun.add(nodeId);
    this.presenceChanged(nodeId);
  }

  /** When node `nodeId`'s agent lost its link (ms), while it has none; undefined while linked, or never linked. */
  lostAtMs(nodeId: number): number | undefined {
    return this.lostAt.get(nodeId);
  }

  /** The linked node's agent was heard at `at` (any message). */
  heard(nodeId: number, at: string): void {
    if (this.connected.get(nodeId) === undefined || this.connected.get(nodeId) === at) return;
    this.connected.set(nodeId, at);
    this.presenceChanged(nodeId);
  }

  /** The node's link dropped: nobody is going to acknowledge, so waiters stop waiting. */
  disconnect(nodeId: number, atMs: number): void {
    this.lostAt.set(nodeId, atMs);
    this.connected.delete(nodeId);
    this.linkedAt.delete(nodeId);
    this.links.delete(nodeId);
    this.appliedOnLink.delete(nodeId);
    this.live.forget(nodeId);
    this.presenceChanged(nodeId);
    for (const waiter of this.waiters.get(nodeId) ?? []) waiter.resolve(false);
    this.waiters.delete(nodeId);
  }

  private presenceChanged(nodeId: number): void {
    for (const listener of this.presenceListeners) listener(nodeId);
  }

  /** The node acknowledged config `version` (and so every earlier one). */
  applied(nodeId: number, version: number): void {
    if (this.connected.has(nodeId)) this.appliedOnLink.set(nodeId, version);
    const waiting = this.waiters.get(nodeId);
    if (!waiting) return;
    for (const waiter of [...waiting]) {
      if (waiter.version <= version) {
        waiting.delete(waiter);
        waiter.resolve(true);
      }
    }
  }

  /** The config version the node's agent acknowledged since it linked last; undefined: none yet, or not linked. */
  appliedSinceLink(nodeId: number): number | undefined {
    return this.appliedOnLink.get(nodeId);
  }

  /** What the node's agent said of the upgrade it was told to make (the agent link checked it was told). */
  upgradeReported(nodeId: number, report: UpgradeStatusMessage): void {
    this.upgradeReports.set(nodeId, report);
  }

  /** What the node's agent said of its upgrade since this was last asked, if anything. */
  takeUpgradeReport(nodeId: number): UpgradeStatusMessage | undefined {
    const report = this.upgradeReports.get(nodeId);
    this.upgradeReports.delete(nodeId);
    return report;
  }

  /**
   * Asks the node's agent to try `targets` and resolves with a result per target, in order; null when the node is not
   * linked or its agent did not answer within `waitMs`.
   */
  probe(nodeId: number, request: Omit<ProbeMessage, 'type' | 'id'>, waitMs: number): Promise<ProbeResult[] | null> {
    if (!this.connected.has(nodeId)) return Promise.resolve(null);
    const id = this.nextProbe++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(null), waitMs);
      const done = (results: ProbeResult[] | null) => {
        clearTimeout(timer);
        this.pendingProbes.delete(id);
        resolve(results);
      };
      this.pendingProbes.set(id, { nodeId, targets: request.targets, resolve: done });
      this.probes.emit('probe', nodeId, { type: 'probe', id, ...request } satisfies ProbeMessage);
    });
  }

  /**
   * The node's agent answered probe `id`: `taken`, or `unknown` when the master waits for no such answer from this node
   * (none asked, or no longer waited for), or `mismatched` when the results are not one per target asked, in order.
   */
  probed(nodeId: number, id: number, results: ProbeResult[]): 'taken' | 'unknown' | 'mismatched' {
    const pending = this.pendingProbes.get(id);
    if (!pending || pending.nodeId !== nodeId) return 'unknown';
    if (results.length !== pending.targets.length || results.some((r, i) => r.target !== pending.targets[i]))
      return 'mismatched';
    pending.resolve(results);
    return 'taken';
  }

  /**
   * Resolves true once the node acknowledges `version`, false after `timeoutMs` or at once when it is not connected.
   */
  waitApplied(nodeId: number, version: number, timeoutMs: number): Promise<boolean> {
    if (!this.connected.has(nodeId) || timeoutMs <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const set = this.waiters.get(nodeId) ?? new Set<Waiter>();
      this.waiters.set(nodeId, set);
      const waiter: Waiter = {
        version,
        resolve: (applied) => {
          clearTimeout(timer);
          set.delete(waiter);
          resolve(applied);
        },
      };
      const timer = setTimeout(() => waiter.resolve(false), timeoutMs);
      set.add(waiter);
    });
  }
}
