// What an agent reports as state (a target's health, a tunnel end's status, its node's paths) is written at most once
// per key per window: the first change of a key at once, later ones held and written at the window's end, the last
// one winning. A value that flaps as fast as a link can carry it writes (and journals) a row per window, not per
// message; a steady agent sees no delay. Keys held are bounded too: past MAX_KEYS a link's new keys are dropped and
// counted, never held.

export const MAX_KEYS = 200_000;

export class Coalescer<V> {
  /** When each key was last written, for keys written within the window. */
  private readonly written = new Map<number, number>();
  private readonly held = new Map<number, V>();
  private timer: NodeJS.Timeout | null = null;
  /** Values dropped since the last call of `takeDropped`, past MAX_KEYS. */
  private dropped = 0;

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number,
    /** Writes changes, each key once; a throw is the caller's (it is called from a timer: it must not throw). */
    private readonly write: (changes: [number, V][]) => void,
  ) {}

  /** Takes reported values: written now where their key's window has passed, else held for its end. */
  offer(values: Iterable<[number, V]>): void {
    const now = this.now();
    const due: [number, V][] = [];
    for (const [key, value] of values) {
      const at = this.written.get(key);
      if (at === undefined || now - at >= this.windowMs) {
        if (at === undefined && this.written.size >= MAX_KEYS) this.forget(now);
        if (at === undefined && this.written.size >= MAX_KEYS) {
          this.dropped++;
          continue;
        }
        this.written.set(key, now);
        this.held.delete(key);
        due.push([key, value]);
      } else {
        this.held.set(key, value);
        this.timer ??= setTimeout(() => this.flush(), this.windowMs - (now - at));
      }
    }
    if (due.length > 0) this.write(due);
  }

  /** How many values were dropped past MAX_KEYS since the previous call. */
  takeDropped(): number {
    const dropped = this.dropped;
    this.dropped = 0;
    return dropped;
  }

  /** Forgets keys whose window has passed with nothing held: they write at once when next reported. */
  private forget(now: number): void {
    for (const [key, at] of this.written)
      if (now - at >= this.windowMs && !this.held.has(key)) this.written.delete(key);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.held.clear();
  }

  /** Writes what is held whose window has passed; forgets keys written long enough ago; comes back for the rest. */
  private flush(): void {
    this.timer = null;
    const now = this.now();
    const due: [number, V][] = [];
    let next = Infinity;
    for (const [key, value] of this.held) {
      const at = this.written.get(key) ?? -Infinity;
      if (now - at >= this.windowMs) {
        due.push([key, value]);
        this.held.delete(key);
        this.written.set(key, now);
      } else next = Math.min(next, this.windowMs - (now - at));
    }
    this.forget(now);
    if (next !== Infinity) this.timer = setTimeout(() => this.flush(), next);
    if (due.length > 0) this.write(due);
  }
}
