// Failures counted per key (a username, an address) over a sliding window: how many there
// were, and how long until one more may be tried. Memory is bounded by sweeping.

export class FailureWindow {
  private readonly failures = new Map<string, number[]>();

  constructor(private readonly now: () => number = Date.now) {}

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
    this.failures.set(key, times);
    if (this.failures.size > 100_000) this.sweep(windowMs);
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

  /** Drops keys whose failures have all aged out, so the map cannot grow without bound. */
  sweep(windowMs: number): void {
    for (const key of this.failures.keys()) {
      if (this.recent(key, windowMs).length === 0) this.failures.delete(key);
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
