// A token bucket: how fast a rule's connections together may move bytes one way (and, in tokens of one, how often an
// agent link may write: agentlink/). It fills at `rate` a second up to `burst`. A relayed socket reserves a read's
// worth before it reads, in its turn (turns.ts), and gets back what it did not read, so however many connections share
// the bucket, new ones included, over any span the bytes read are at most burst + rate x span.
// A stream read in chunks it does not choose (a tunnel's) takes what it got and may leave the bucket in debt, which it
// waits out before reading on.
// Its four numbers are its own, or a rule's cells in shared memory under a lock (cells.ts), which the buckets of the
// same rule in several threads hold one count of.

/** How many seconds of the rate a bucket holds when full: the burst a rule may send after a quiet spell. */
const BURST_SECONDS = 0.125;
/** The smallest burst: one read of a reader, so that a slow rate still moves whole reads. */
const MIN_BURST_BYTES = 16 * 1024;

/** The burst of a bandwidth of `rate` bytes a second. */
export function burstOf(rate: number): number {
  return Math.max(MIN_BURST_BYTES, rate * BURST_SECONDS);
}

/** A bucket's numbers in its cells, from its first: tokens, when they were counted, rate, burst. */
const [TOKENS, AT, RATE, BURST] = [0, 1, 2, 3];
/** The numbers a bucket takes. */
export const BUCKET_CELLS = 4;

/** Runs `fn` while no other thread works on the same cells. */
export type Lock = <T>(fn: () => T) => T;

const unshared: Lock = (fn) => fn();

export class TokenBucket {
  /** A bucket over `cells` from `first`, worked on under `lock`, as it stands (a rate of 0: none set yet). */
  static over(cells: Float64Array, first: number, lock: Lock, now: () => number): TokenBucket {
    return new TokenBucket(cells, first, lock, now);
  }

  /** A bucket of its own, full. */
  static of(
    rate: number,
    /** What it holds when full: by default, a bandwidth's (see burstOf). */
    burst = burstOf(rate),
    /** Milliseconds, monotonic: the master's clock for what tests move in time. */
    now: () => number = () => performance.now(),
  ): TokenBucket {
    const bucket = new TokenBucket(new Float64Array(BUCKET_CELLS), 0, unshared, now);
    bucket.configure(rate, burst);
    return bucket;
  }

  private constructor(
    private readonly cells: Float64Array,
    private readonly first: number,
    private readonly lock: Lock,
    private readonly now: () => number,
  ) {}

  /** What it holds when full. */
  get capacity(): number {
    return this.cells[this.first + BURST]!;
  }

  /** Whether it is full again: nothing taken that the rate has not given back. */
  full(): boolean {
    return this.with((cells, i) => {
      this.refill();
      return cells[i + TOKENS]! >= cells[i + BURST]!;
    });
  }

  /**
   * Sets the rate and burst (the same from every thread sharing it: only a change changes anything). A bucket whose
   * rate was 0 starts full, and with `fullOnChange` one whose rate changes; otherwise it keeps what it holds, within
   * the new burst.
   */
  configure(rate: number, burst: number, fullOnChange = false): void {
    this.with((cells, i) => {
      if (cells[i + RATE] === rate && cells[i + BURST] === burst) return;
      const full = fullOnChange || cells[i + RATE] === 0;
      this.refill();
      cells[i + RATE] = rate;
      cells[i + BURST] = burst;
      cells[i + TOKENS] = full ? burst : Math.min(cells[i + TOKENS]!, burst);
      cells[i + AT] = this.now();
    });
  }

  /** A new bandwidth applies from now; what the bucket holds is kept (within the new burst). */
  setRate(rate: number): void {
    this.configure(rate, burstOf(rate));
  }

  /** Takes `bytes`, already moved; returns how many milliseconds to wait before moving more (0: none). */
  take(bytes: number): number {
    return this.with((cells, i) => {
      this.refill();
      const tokens = (cells[i + TOKENS] = cells[i + TOKENS]! - bytes);
      return tokens >= 0 ? 0 : Math.ceil((-tokens * 1000) / cells[i + RATE]!);
    });
  }

  /**
   * Reserves `bytes` (at most the burst) for a read about to be made: 0 when reserved, otherwise how many milliseconds
   * to wait before asking again (nothing is taken then).
   */
  reserve(bytes: number): number {
    return this.with((cells, i) => {
      this.refill();
      const tokens = cells[i + TOKENS]!;
      if (tokens >= bytes) {
        cells[i + TOKENS] = tokens - bytes;
        return 0;
      }
      return Math.max(1, Math.ceil(((bytes - tokens) * 1000) / cells[i + RATE]!));
    });
  }

  /** Gives back `bytes` reserved and not used. */
  refund(bytes: number): void {
    this.with((cells, i) => {
      this.refill();
      cells[i + TOKENS] = Math.min(cells[i + BURST]!, cells[i + TOKENS]! + bytes);
    });
  }

  /** Takes `bytes` if the bucket holds them (a datagram is sent whole or dropped); false when it does not. */
  tryTake(bytes: number): boolean {
    return this.with((cells, i) => {
      this.refill();
      if (cells[i + TOKENS]! < bytes) return false;
      cells[i + TOKENS] = cells[i + TOKENS]! - bytes;
      return true;
    });
  }

  /** Under the lock. */
  private refill(): void {
    const [cells, i] = [this.cells, this.first];
    const now = this.now();
    cells[i + TOKENS] = Math.min(
      cells[i + BURST]!,
      cells[i + TOKENS]! + ((now - cells[i + AT]!) * cells[i + RATE]!) / 1000,
    );
    cells[i + AT] = now;
  }

  private with<T>(fn: (cells: Float64Array, i: number) => T): T {
    return this.lock(() => fn(this.cells, this.first));
  }
}
