// A token bucket: how fast a rule's connections together may move bytes one way. It fills at `rate` bytes a second up
// to `burst`; a read takes what it read, and may leave the bucket in debt (a read cannot be made smaller after the
// fact), which the reader then waits out before its next read. Over any span the bytes taken are at most
// burst + rate x span + one read of each reader sharing it.

/** How many seconds of the rate a bucket holds when full: the burst a rule may send after a quiet spell. */
const BURST_SECONDS = 0.125;
/** The smallest burst: one read of a reader, so that a slow rate still moves whole reads. */
const MIN_BURST_BYTES = 16 * 1024;

function burstOf(rate: number): number {
  return Math.max(MIN_BURST_BYTES, rate * BURST_SECONDS);
}

export class TokenBucket {
  private at = performance.now();
  private burst: number;
  private tokens: number;

  constructor(private rate: number) {
    this.burst = burstOf(rate);
    this.tokens = this.burst;
  }

  /** A new rate applies from now; what the bucket holds is kept (within the new burst). */
  setRate(rate: number): void {
    this.refill();
    this.rate = rate;
    this.burst = burstOf(rate);
    this.tokens = Math.min(this.tokens, this.burst);
  }

  /** Takes `bytes`, already moved; returns how many milliseconds to wait before moving more (0: none). */
  take(bytes: number): number {
    this.refill();
    this.tokens -= bytes;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens * 1000) / this.rate);
  }

  /** Takes `bytes` if the bucket holds them (a datagram is sent whole or dropped); false when it does not. */
  tryTake(bytes: number): boolean {
    this.refill();
    if (this.tokens < bytes) return false;
    this.tokens -= bytes;
    return true;
  }

  private refill(): void {
    const now = performance.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.rate) / 1000);
    this.at = now;
  }
}
