// Failures counted per key (a username, a source address) over a sliding window: how many there
// were, and how long until one more may be tried. Every event costs O(1) whatever the number of
// keys: keys are kept in the order they last failed, at most `maxKeys` of them (past that the
// one that failed longest ago is forgotten), and each keeps at most MAX_TIMES failures.

/** More failures of one key than any limit counts. */
const MAX_TIMES = 1024;
/** Keys kept; a key among them is about 200 bytes. */
export const MAX_KEYS = 100_000;

export class FailureWindow {
  private readonly failures = new Map<string, number[]>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly maxKeys = MAX_KEYS,
  ) {}

  get size(): number {
    return this.failures.size;
  }

  /** Failures of `key` within the last `windowMs`. */
  count(key: string, windowMs: number): number {
    return this.recent(key, windowMs).length;
  }

  /** Milliseconds until `key` is below `max` failures in the window again; 0 when it is now. */
  retryAfterMs(key: string, max: number, windowMs: number): number {
    const times = this.recent(key, windowMs);
    if (times.length < max) return 0;
    return times[times.length - max]! + windowMs - this.now();
  }

  record(key: string, windowMs: number): void {
    const times = this.recent(key, windowMs);
    times.push(this.now());
    if (times.length > MAX_TIMES) times.splice(0, times.length - MAX_TIMES);
    // Last in the map's order: the map is ordered by when each key last failed.
    this.failures.delete(key);
    this.failures.set(key, times);
    if (this.failures.size > this.maxKeys) this.failures.delete(this.failures.keys().next().value!);
    this.sweep(windowMs, 2);
  }

  /** Forgets one failure of `key` (the most recent), e.g. a reserved attempt that succeeded. */
  forgetOne(key: string): void {
    const times = this.failures.get(key);
    if (!times) return;
    times.pop();
    if (times.length === 0) this.failures.delete(key);
  }

  clear(key: string): void {
    this.failures.delete(key);
  }

  /**
   * Drops keys whose failures have all aged out, oldest first, looking at `most` of them (all by default): the rest
   * failed more recently. Each `record` drops a couple, so the map holds little that has aged out.
   */
  sweep(windowMs: number, most = Infinity): void {
    const cutoff = this.now() - windowMs;
    let looked = 0;
    for (const [key, times] of this.failures) {
      if (looked++ >= most || times[times.length - 1]! > cutoff) return;
      this.failures.delete(key);
    }
  }

  private recent(key: string, windowMs: number): number[] {
    const cutoff = this.now() - windowMs;
    const times = this.failures.get(key);
    if (!times) return [];
    const first = times.findIndex((t) => t > cutoff);
    return first === -1 ? [] : first === 0 ? times : times.slice(first);
  }
}
