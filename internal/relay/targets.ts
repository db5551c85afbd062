// Choosing a target for a new connection or UDP session: the rule's strategy decides the
// order, and the caller fails over along it when a target refuses. A target its health checks
// found down is left out until it is up again.

import type { Strategy } from '../domain/rules.ts';

export interface Target {
  host: string;
  port: number;
}

export class TargetPicker {
  private next = 0;

  constructor(
    private targets: Target[],
    private strategy: Strategy,
    /** Whether the target at an index is down (health_check); none is, without checks. */
    private readonly isDown: (index: number) => boolean = () => false,
  ) {}

  update(targets: Target[], strategy: Strategy): void {
    this.targets = targets;
    this.strategy = strategy;
    this.next = 0;
  }

  /** Every target not down once, in the order to try them for one connection. */
  order(): Target[] {
    const n = this.targets.length;
    if (n === 0) return [];
    let first = 0;
    if (this.strategy === 'round_robin') first = this.next++ % n;
    else if (this.strategy === 'random') first = Math.floor(Math.random() * n);
    const order: Target[] = [];
    for (let i = 0; i < n; i++) {
      const index = (first + i) % n;
      if (!this.isDown(index)) order.push(this.targets[index]!);
    }
    return order;
  }
}
