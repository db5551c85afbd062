// What an agent reports as state (a target's health, a tunnel end's status, its node's paths) is written through a
// budget per key: a few changes in a row go at once (an agent says "not checked yet" then "available" within a second
// of linking), past that one change per refill interval, the rest held and the last one written when the budget
// allows. A value that flaps as fast as a link can carry it writes (and journals) a row per interval, not per
// message; a steady agent sees no delay. Keys held are bounded too: past MAX_KEYS a link's new keys are dropped,
// never held.

const MAX_KEYS = 200_000;

interface Budget<V> {
  /** Writes the key may make now; refills by one each refill interval, up to the burst. */
  tokens: number;
  at: number;
  /** The latest value not yet written, if any. */
  held?: { value: V };
}

export class Coalescer<V> {
  private readonly keys = new Map<number, Budget<V>>();
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
    const now = this.now();
    const due: [number, V][] = [];
    for (const [key, value] of values) {
      let budget = this.keys.get(key);
      if (!budget) {
        if (this.keys.size >= MAX_KEYS) this.forget(now);
        if (this.keys.size >= MAX_KEYS) continue;
        budget = { tokens: this.burst, at: now };
        this.keys.set(key, budget);
      }
      this.refill(budget, now);
      if (budget.tokens >= 1) {
        budget.tokens -= 1;
        delete budget.held;
        due.push([key, value]);
      } else {
        budget.held = { value };
        this.schedule((1 - budget.tokens) * this.refillMs);
      }
    }
    if (due.length > 0) this.write(due);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.keys.clear();
  }

  private refill(budget: Budget<V>, now: number): void {
    budget.tokens = Math.min(this.burst, budget.tokens + (now - budget.at) / this.refillMs);
    budget.at = now;
  }

  /** Flushes at most four times a refill interval: each flush walks every key. */
  private schedule(waitMs: number): void {
    this.timer ??= setTimeout(() => this.flush(), Math.ceil(Math.max(this.refillMs / 4, waitMs)));
  }

  /** Writes what is held where the budget allows now; comes back for the rest. */
  private flush(): void {
    this.timer = null;
    const now = this.now();
    const due: [number, V][] = [];
    let next = Infinity;
    for (const [key, budget] of this.keys) {
      if (!budget.held) continue;
      this.refill(budget, now);
      if (budget.tokens >= 1) {
        budget.tokens -= 1;
        due.push([key, budget.held.value]);
        delete budget.held;
      } else next = Math.min(next, (1 - budget.tokens) * this.refillMs);
    }
    this.forget(now);
    if (next !== Infinity) this.schedule(next);
    if (due.length > 0) this.write(due);
  }

  /** Forgets keys with nothing held whose budget is full again: they start afresh when next reported. */
  private forget(now: number): void {
    if (now - this.forgotAt < this.refillMs) return;
    this.forgotAt = now;
    for (const [key, budget] of this.keys) {
      if (budget.held) continue;
      this.refill(budget, now);
      if (budget.tokens >= this.burst) this.keys.delete(key);
    }
  }
}
