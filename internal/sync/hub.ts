// Where desired-config changes meet agents: writes announce that a node's config changed,
// and sync requests wait, bounded, for the node to acknowledge a version. The agent link
// registers connected nodes and reports what they applied.

import { EventEmitter } from 'node:events';

interface Waiter {
  version: number;
  resolve: (applied: boolean) => void;
}

export class SyncHub {
  /** Emits 'config' with a node id after a committed change to that node's desired config. */
  readonly changes = new EventEmitter();
  private readonly connected = new Set<number>();
  private readonly waiters = new Map<number, Set<Waiter>>();

  configChanged(nodeId: number): void {
    this.changes.emit('config', nodeId);
  }

  /** Announces every connected node's config as changed: for settings every agent receives with it. */
  configChangedEverywhere(): void {
    for (const nodeId of this.connected) this.changes.emit('config', nodeId);
  }

  /** How many nodes have an agent linked now. */
  connectedCount(): number {
    return this.connected.size;
  }

  isConnected(nodeId: number): boolean {
    return this.connected.has(nodeId);
  }

  connect(nodeId: number): void {
    this.connected.add(nodeId);
  }

  /** The node's link dropped: nobody is going to acknowledge, so waiters stop waiting. */
  disconnect(nodeId: number): void {
    this.connected.delete(nodeId);
    for (const waiter of this.waiters.get(nodeId) ?? []) waiter.resolve(false);
    this.waiters.delete(nodeId);
  }

  /** The node acknowledged config `version` (and so every earlier one). */
  applied(nodeId: number, version: number): void {
    const waiting = this.waiters.get(nodeId);
    if (!waiting) return;
    for (const waiter of [...waiting]) {
      if (waiter.version <= version) {
        waiting.delete(waiter);
        waiter.resolve(true);
      }
    }
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
