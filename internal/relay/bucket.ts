// A token bucket: how fast a rule's connections together may move bytes one way (and, in tokens of one, how often an
// agent link may write: agentlink/). It fills at `rate` a second up to `burst`. A relayed socket reserves a read's
// worth before it reads, in its turn (turns.ts), and gets back what it did not read, so however many connections share
// the bucket, new ones included, over any span the bytes read are at most burst + rate x span.
// A stream read in chunks it does not choose (a tunnel's) takes what it got and may leave the bucket in debt, which it
// waits out before reading on.

/** How many seconds of the rate a bucket holds when full: the burst a rule may send after a quiet spell. */
const BURST_SECONDS = 0.125;
/** The smallest burst: one read of a reader, so that a slow rate still moves whole reads. */
const MIN_BURST_BYTES = 16 * 1024;

/** The burst of a bandwidth of `rate` bytes a second. */
export function burstOf(rate: number): number {
  return Math.max(MIN_BURST_BYTES, rate * BURST_SECONDS);
}

export class TokenBucket {
  private at: number;
  private tokens: number;

  constructor(
    private rate: number,
    /** What it holds when full: by default, a bandwidth's (see burstOf). */
    private burst = burstOf(rate),
    /** Milliseconds, monotonic: the master's clock for what tests move in time. */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.at = now();
    this.tokens = burst;
  }

  /** What it holds when full. */
  get capacity(): number {
    return this.burst;
  }

  /** Whether it is full again: nothing taken that the rate has not given back. */
  full(): boolean {
    this.refill();
    return this.tokens >= this.burst;
  }

  /** A new bandwidth applies from now; what the bucket holds is kept (within the new burst). */
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

  /**
   * Reserves `bytes` (at most the burst) for a read about to be made: 0 when reserved, otherwise how many milliseconds
   * to wait before asking again (nothing is taken then).
   */
  reserve(bytes: number): number {
    this.refill();
    if (this.tokens >= bytes) {
      this.tokens -= bytes;
      return 0;
    }
    return Math.max(1, Math.ceil(((bytes - this.tokens) * 1000) / this.rate));
  }

  /** Gives back `bytes` reserved and not used. */
  refund(bytes: number): void {
    this.refill();
    this.tokens = Math.min(this.burst, this.tokens + bytes);
  }

  /** Takes `bytes` if the bucket holds them (a datagram is sent whole or dropped); false when it does not. */
  tryTake(bytes: number): boolean {
    this.refill();
    if (this.tokens < bytes) return false;
    this.tokens -= bytes;
    return true;
  }

  private refill(): void {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.rate) / 1000);
    this.at = now;
  }
}
