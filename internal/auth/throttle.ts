// Failed-login throttling per username and per client address: after too many failures in
// a window, further attempts are refused without checking the password at all.

export interface ThrottleLimits {
  maxPerUser: number;
  maxPerAddress: number;
  windowMs: number;
}

export class LoginThrottle {
  private readonly failures = new Map<string, number[]>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Milliseconds until an attempt may be made, or 0 when it may be made now. */
  retryAfterMs(username: string, address: string, limits: ThrottleLimits): number {
    return Math.max(
      this.wait(`u:${username.toLowerCase()}`, limits.maxPerUser, limits.windowMs),
      this.wait(`a:${address}`, limits.maxPerAddress, limits.windowMs),
    );
  }

  recordFailure(username: string, address: string, limits: ThrottleLimits): void {
    for (const key of [`u:${username.toLowerCase()}`, `a:${address}`]) {
      const times = this.recent(key, limits.windowMs);
      times.push(this.now());
      this.failures.set(key, times);
    }
  }

  /** A success clears the user's failures (not the address's: one good password must not unlock a spray). */
  recordSuccess(username: string): void {
    this.failures.delete(`u:${username.toLowerCase()}`);
  }

  /** Drops keys whose failures have all aged out, so the map cannot grow without bound. */
  sweep(windowMs: number): void {
    for (const key of this.failures.keys()) {
      if (this.recent(key, windowMs).length === 0) this.failures.delete(key);
    }
  }

  private recent(key: string, windowMs: number): number[] {
    const cutoff = this.now() - windowMs;
    return (this.failures.get(key) ?? []).filter((t) => t > cutoff);
  }

  private wait(key: string, max: number, windowMs: number): number {
    const times = this.recent(key, windowMs);
    if (times.length < max) return 0;
    return times[times.length - max]! + windowMs - this.now();
  }
}
