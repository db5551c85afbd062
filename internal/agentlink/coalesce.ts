// What an agent reports as state (a target's health, a tunnel end's status, its node's paths) is written through a
// budget per key, a token bucket: a few changes in a row go at once (an agent says "not checked yet" then "available"
// within a second of linking), past that one change per refill interval, the rest held and the last one written when
// the budget allows. A value that flaps as fast as a link can carry it writes (and journals) a row per interval, not
// per message; a steady agent sees no delay. Keys held are bounded too: past MAX_KEYS a link's new keys are dropped,
// never held.

import { TokenBucket } from '../relay/bucket.ts';

const MAX_KEYS = 200_000;

interface Key<V> {
  budget: TokenBucket;
  /** The latest value not yet written, if any. */
  held?: { value: V };
}

export class Coalescer<V> {
  private readonly keys = new Map<number, Key<V>>();
  private timer: NodeJS.Timeout | null = null;
  /** When keys were last looked through to forget: at most once a refill interval (it walks them all). */
  private forgotAt = -Infinity;

  constructor(
    private readonly burst: number,
    private readonly refillMs: number,
    private readonly now: () => number,
    /** Writes changes, each key once. It is called from a timer too: it must not throw. */
    private readonly write: (changes: [number, V][]) => void,
  ) {}

  /** Takes reported values: written now where their key's budget allows, else held (the last one wins). */
  offer(values: Iterable<[number, V]>): void {
    const due: [number, V][] = [];
    for (const [key, value] of values) {
      let entry = this.keys.get(key);
      if (!entry) {
        if (this.keys.size >= MAX_KEYS) this.forget();
        if (this.keys.size >= MAX_KEYS) continue;
        entry = { budget: TokenBucket.of(1000 / this.refillMs, this.burst, this.now) };
        this.keys.set(key, entry);
      }
      const wait = entry.budget.reserve(1);
      if (wait === 0) {
        delete entry.held;
        due.push([key, value]);
      } else {
        entry.held = { value };
        this.schedule(wait);
      }
    }
    if (due.length > 0) this.write(due);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.keys.clear();
  }

  /** Flushes at most four times a refill interval: each flush walks every key. */
  private schedule(waitMs: number): void {
    this.timer ??= setTimeout(() => this.flush(), Math.ceil(Math.max(this.refillMs / 4, waitMs)));
  }

  /** Writes what is held where the budget allows now; comes back for the rest. */
  private flush(): void {
    this.timer = null;
    const due: [number, V][] = [];
    let next = Infinity;
    for (const [key, entry] of this.keys) {
      if (!entry.held) continue;
      const wait = entry.budget.reserve(1);
      if (wait === 0) {
        due.push([key, entry.held.value]);
        delete entry.held;
      } else next = Math.min(next, wait);
    }
    this.forget();
    if (next !== Infinity) this.schedule(next);
    if (due.length > 0) this.write(due);
  }

  /** Forgets keys with nothing held whose budget is full again: they start afresh when next reported. */
  private forget(): void {
    const now = this.now();
    if (now - this.forgotAt < this.refillMs) return;
    this.forgotAt = now;
    for (const [key, entry] of this.keys) if (!entry.held && entry.budget.full()) this.keys.delete(key);
  }
}
