// Choosing a target for a new connection or UDP session: the rule's strategy picks the first, and the caller fails
// over along the rest when a target refuses. A target its health checks found down is left out until it is up again.
// Weights and source hashing are the arithmetic the kernel's maps are filled by (domain/spread.ts), so a rule spreads
// alike on either path.

import type { Strategy } from '../domain/rules.ts';
import { rendezvousOwner, slotOwner, totalWeight } from '../domain/spread.ts';

export interface Target {
  host: string;
  port: number;
  /** A range's last port (see domain/ranges.ts portAt). */
  lastPort?: number;
}

/** What a rule's health checks say of its targets, by index; without checks none is down and none is fastest. */
export interface TargetHealthView {
  isDownAt(index: number): boolean;
  /** The target lowest_latency goes to: the one the checks reached fastest (with hysteresis); null before any. */
  fastest(): number | null;
}

const UNCHECKED: TargetHealthView = { isDownAt: () => false, fastest: () => null };

/**
 * A rule's health verdicts as shared memory, for its pickers in other threads (the checks run in one): which targets
 * are down, and which is fastest. Int32 cells: the fastest's index + 1 (0: none yet), then 1 for each target down.
 */
export class SharedHealth implements TargetHealthView {
  private readonly cells: Int32Array;

  /** New verdicts, none down, for `targets`; or the verdicts of another thread's `buffer`. */
  constructor(targets: number | SharedArrayBuffer) {
    this.cells = new Int32Array(typeof targets === 'number' ? new SharedArrayBuffer(4 * (1 + targets)) : targets);
  }

  get buffer(): SharedArrayBuffer {
    return this.cells.buffer as SharedArrayBuffer;
  }

  isDownAt(index: number): boolean {
    return Atomics.load(this.cells, 1 + index) === 1;
  }

  fastest(): number | null {
    const fastest = Atomics.load(this.cells, 0);
    return fastest === 0 ? null : fastest - 1;
  }

  /** Says what `view` says, target by target. */
  publish(view: TargetHealthView): void {
    for (let index = 0; index + 1 < this.cells.length; index++)
      Atomics.store(this.cells, 1 + index, view.isDownAt(index) ? 1 : 0);
    Atomics.store(this.cells, 0, (view.fastest() ?? -1) + 1);
  }
}

/**
 * Open connections and sessions per target index (least_conn), in shared memory: every thread relaying the rule
 * counts in the same cells. After the thread count, each target's total, then each thread's share of each (thread 0
 * the main one), which the total is kept beside so that a pick reads one cell a target: a thread that ends gives its
 * share back (`reclaim`), or its targets would look busier for as long as they stay the rule's.
 */
function openCounts(targets: number, threads: number): Int32Array {
  const cells = new Int32Array(new SharedArrayBuffer((1 + Math.max(1, targets) * (1 + threads)) * 4));
  cells[0] = threads;
  return cells;
}

/** Whose open counts a picker keeps: its own, for `threads` threads; or the main thread's `buffer`, as `thread`. */
export type PickerShare = { threads: number } | { buffer: SharedArrayBuffer; thread: number };

export class TargetPicker {
  private next = 0;
  private open: Int32Array;
  /** This picker's thread, whose share of each count it keeps. */
  private readonly thread: number;

  constructor(
    private targets: Target[],
    private strategy: Strategy,
    private weights: readonly number[] | null = null,
    /** How its targets stand; null without checks. */
    private readonly health: () => TargetHealthView | null = () => null,
    /**
     * Each target's priority, lowest first (an SRV name's records'); null: all alike. The strategy picks among the
     * targets up of the lowest priority that has any; the others are failed over to after them.
     */
    private tiers: readonly number[] | null = null,
    share: PickerShare = { threads: 1 },
  ) {
    this.open = 'buffer' in share ? new Int32Array(share.buffer) : openCounts(targets.length, share.threads);
    this.thread = 'buffer' in share ? share.thread : 0;
    if (this.thread >= this.open[0]!) throw new RangeError(`thread ${this.thread} of ${this.open[0]} counted`);
  }

  /** The open counts, for another thread's picker of the same targets. */
  get counts(): SharedArrayBuffer {
    return this.open.buffer as SharedArrayBuffer;
  }

  /** The connections and sessions open to each target, by index, in all threads. */
  openTo(): number[] {
    return this.targets.map((_, index) => Atomics.load(this.open, 1 + index));
  }

  /** Gives back the share of an ended `thread` (one of those counted): what its connections held, once. */
  reclaim(thread: number): void {
    for (let index = 0; index < this.width; index++) {
      const held = Atomics.exchange(this.open, this.shareOf(thread, index), 0);
      if (held !== 0) Atomics.sub(this.open, 1 + index, held);
    }
  }

  /** How many targets the cells have room for (one at the least). */
  private get width(): number {
    return (this.open.length - 1) / (1 + this.open[0]!);
  }

  private shareOf(thread: number, index: number): number {
    return 1 + this.width * (1 + thread) + index;
  }

  update(
    targets: Target[],
    strategy: Strategy,
    weights: readonly number[] | null,
    tiers: readonly number[] | null = null,
    /** The counts of the main thread's picker, updated first; without them, its own. */
    counts?: SharedArrayBuffer,
  ): void {
    this.tiers = tiers;
    const same = (a: Target[], b: Target[]) =>
      a.length === b.length && a.every((t, i) => t.host === b[i]!.host && t.port === b[i]!.port);
    // Connections held stay counted while the targets stay the same; other targets start from none.
    if (counts) {
      if (counts !== this.open.buffer) this.open = new Int32Array(counts);
    } else if (!same(targets, this.targets)) this.open = openCounts(targets.length, this.open[0]!);
    this.targets = targets;
    this.strategy = strategy;
    this.weights = weights;
    this.next = 0;
  }

  /** The targets up, each with its weight (1 without weights). */
  private candidates(): { index: number; weight: number }[] {
    const health = this.health() ?? UNCHECKED;
    const up: { index: number; weight: number }[] = [];
    for (let index = 0; index < this.targets.length; index++)
      if (!health.isDownAt(index)) up.push({ index, weight: this.weights?.[index] ?? 1 });
    return up;
  }

  /**
   * Every target not down once, in the order to try them for one connection of `client` (its address): those of the
   * lowest priority up first, from the one the strategy picks, then the rest in their order.
   */
  order(client = ''): Target[] {
    const all = this.candidates();
    if (all.length === 0) return [];
    const tiers = this.tiers;
    const lowest = tiers ? Math.min(...all.map(({ index }) => tiers[index] ?? 0)) : 0;
    const up = tiers ? all.filter(({ index }) => (tiers[index] ?? 0) === lowest) : all;
    const first = this.first(up, client);
    const start = up.findIndex((candidate) => candidate.index === first);
    const ordered = up.map((_, i) => this.targets[up[(start + i) % up.length]!.index]!);
    if (tiers) for (const { index } of all) if ((tiers[index] ?? 0) !== lowest) ordered.push(this.targets[index]!);
    return ordered;
  }

  /** The index of the target the strategy picks first among `up` (none empty). */
  private first(up: { index: number; weight: number }[], client: string): number {
    switch (this.strategy) {
      case 'round_robin':
        return slotOwner(up, this.next++);
      case 'random':
        return slotOwner(up, Math.floor(Math.random() * totalWeight(up)));
      case 'source_hash':
        return rendezvousOwner(client, up)!;
      case 'least_conn': {
        // Among the least loaded, in turn, so that a quiet rule spreads too.
        const open = up.map(({ index }) => Atomics.load(this.open, 1 + index));
        const least = Math.min(...open);
        const tied = up.filter((_, i) => open[i] === least);
        return tied[this.next++ % tied.length]!.index;
      }
      case 'lowest_latency': {
        const fastest = this.health()?.fastest() ?? null;
        return up.some(({ index }) => index === fastest) ? fastest! : up[0]!.index;
      }
      case 'failover':
        return up[0]!.index;
    }
  }

  /** Counts a connection or session open to `target` (one of order's) until the returned function is called. */
  hold(target: Target): () => void {
    // By address, not identity: an apply that keeps the targets hands the picker new objects for them.
    const index = this.targets.findIndex((t) => t.host === target.host && t.port === target.port);
    const counts = this.open;
    if (index < 0) return () => undefined;
    const share = this.shareOf(this.thread, index);
    Atomics.add(counts, 1 + index, 1);
    Atomics.add(counts, share, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      Atomics.sub(counts, share, 1);
      Atomics.sub(counts, 1 + index, 1);
    };
  }
}
