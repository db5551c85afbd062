// A rule's controls as shared memory, so that every thread relaying the rule holds one count of them: its open
// connections, what it refused, its quota's count, and the token buckets of its bandwidth (a way each) and of its new
// clients a second; and the bytes the relay's other threads carried since the agent last counted them. A gate
// (gate.ts) works on these cells; another thread's gate on the same buffer works on the same counts, exactly: a count
// changes by one atomic operation, a bucket under its own lock (a few reads and writes of numbers, held for well under
// a microsecond). Each thread's share of the open connections is kept too, so that a thread that ends gives back the
// places its connections held (they closed with it) rather than keep them taken until the agent restarts.

import { BUCKET_CELLS, TokenBucket, type Lock } from './bucket.ts';

/** Int32 cells. */
const OPEN = 0;
const REFUSED = 1;
const SPENT = 2;
/** The lock of the quota's period, and of each bucket (BUCKETS order). */
const QUOTA_LOCK = 3;
const BUCKET_LOCK = 4;
const INTS = 8;

/** Float64 cells: the quota's count and period, then a bucket's (bucket.ts) each. */
const QUOTA_COUNT = 0;
const QUOTA_PERIOD = 1;

/** The buckets of a rule, in their order in the cells. */
export const BUCKETS = ['in', 'out', 'new_clients'] as const;
export type BucketName = (typeof BUCKETS)[number];

const FLOATS = 2 + BUCKETS.length * BUCKET_CELLS;
/** BigInt64 cells: the bytes carried in and out, not yet drained. */
const BYTES_IN = 0;
const BYTES_OUT = 1;
const BIGS = 2;
/** The bytes of a rule's cells before the Int32 cells of each thread's open connections. */
const SHARED_BYTES = INTS * 4 + FLOATS * 8 + BIGS * 8;

/** The bytes of a rule's cells for `threads` relay threads. */
const cellBytes = (threads: number) => SHARED_BYTES + threads * 4;

/** Milliseconds, alike in every thread (each thread's `performance.now()` counts from its own start). */
const now = () => performance.timeOrigin + performance.now();

/** How often a thread tries a lock held by another before it sleeps until it is let go. */
const SPINS = 64;

/**
 * Runs `fn` holding the lock at `ints[lock]` (0 free, 1 held, 2 held and waited for), shared by every thread viewing
 * `ints`. A lock is held for a few reads and writes, so a thread that finds it held spins a little; past that, the
 * holder was likely taken off its CPU (more threads than CPUs), and spinning on would burn the rest of the waiter's
 * time slice: it sleeps (Atomics.wait) until the holder lets go, and wakes one sleeper.
 */
export function locked<T>(ints: Int32Array, lock: number, fn: () => T): T {
  if (Atomics.compareExchange(ints, lock, 0, 1) !== 0) acquire(ints, lock);
  try {
    return fn();
  } finally {
    if (Atomics.exchange(ints, lock, 0) === 2) Atomics.notify(ints, lock, 1);
  }
}

function acquire(ints: Int32Array, lock: number): void {
  for (let spin = 0; spin < SPINS; spin++) if (Atomics.compareExchange(ints, lock, 0, 1) === 0) return;
  // Held as waited for from here on: whoever lets it go wakes a sleeper, this one or another.
  while (Atomics.exchange(ints, lock, 2) !== 0) Atomics.wait(ints, lock, 2);
}

/** A rule's controls in shared memory (see the top of this file). */
export class RuleCells {
  private readonly ints: Int32Array;
  private readonly floats: Float64Array;
  private readonly bytes: BigInt64Array;
  /** Each thread's open connections. */
  private readonly held: Int32Array;

  /**
   * The cells of `buffer` (another thread's, of the same rule) as thread `thread` (0: the agent's main thread) uses
   * them; without a buffer, new cells for `threads` threads.
   */
  constructor(
    readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(cellBytes(1)),
    private readonly thread = 0,
  ) {
    const threads = (buffer.byteLength - SHARED_BYTES) / 4;
    if (!Number.isInteger(threads) || threads < 1) throw new Error("a rule's cells are cellBytes(threads) bytes");
    if (thread >= threads) throw new Error(`thread ${thread} of a rule's cells for ${threads}`);
    this.ints = new Int32Array(buffer, 0, INTS);
    this.floats = new Float64Array(buffer, INTS * 4, FLOATS);
    this.bytes = new BigInt64Array(buffer, INTS * 4 + FLOATS * 8, BIGS);
    this.held = new Int32Array(buffer, SHARED_BYTES, threads);
  }

  /** New cells for `threads` relay threads, as the main thread uses them. */
  static forThreads(threads: number): RuleCells {
    return new RuleCells(new SharedArrayBuffer(cellBytes(threads)));
  }

  /** Adds bytes a thread carried for the rule, to be drained by the thread that reports them. */
  carried(bytesIn: number, bytesOut: number): void {
    if (bytesIn > 0) Atomics.add(this.bytes, BYTES_IN, BigInt(bytesIn));
    if (bytesOut > 0) Atomics.add(this.bytes, BYTES_OUT, BigInt(bytesOut));
  }

  /** The bytes added by `carried` since the previous call. */
  drainCarried(): { bytes_in: number; bytes_out: number } {
    return {
      bytes_in: Number(Atomics.exchange(this.bytes, BYTES_IN, 0n)),
      bytes_out: Number(Atomics.exchange(this.bytes, BYTES_OUT, 0n)),
    };
  }

  /** Connections and sessions open, in every thread. */
  get open(): number {
    return Atomics.load(this.ints, OPEN);
  }

  /** Takes a place if fewer than `max` are open; false when none is left. */
  claim(max: number): boolean {
    for (;;) {
      const open = Atomics.load(this.ints, OPEN);
      if (open >= max) return false;
      if (Atomics.compareExchange(this.ints, OPEN, open, open + 1) === open) {
        Atomics.add(this.held, this.thread, 1);
        return true;
      }
    }
  }

  /** Gives a place back (one this thread took). */
  leave(): void {
    Atomics.sub(this.held, this.thread, 1);
    Atomics.sub(this.ints, OPEN, 1);
  }

  /**
   * Gives back every place thread `thread` holds, once it ended (its connections closed with it): how many. A thread
   * stopped between the two steps of a claim or a leave keeps at most one place taken.
   */
  reclaim(thread: number): number {
    const held = Atomics.exchange(this.held, thread, 0);
    Atomics.sub(this.ints, OPEN, held);
    return held;
  }

  refuse(): void {
    Atomics.add(this.ints, REFUSED, 1);
  }

  /** Clients turned away since the previous call, in every thread. */
  drainRefused(): number {
    return Atomics.exchange(this.ints, REFUSED, 0);
  }

  /** Starts the quota's count again if `period` (its start, ms) is another than the one counted; once whoever asks. */
  quotaPeriod(period: number): void {
    locked(this.ints, QUOTA_LOCK, () => {
      if (this.floats[QUOTA_PERIOD] === period) return;
      this.floats[QUOTA_PERIOD] = period;
      this.floats[QUOTA_COUNT] = 0;
      Atomics.store(this.ints, SPENT, 0);
    });
  }

  /** Adds `bytes` to the quota's count; returns the count. */
  countQuota(bytes: number): number {
    return locked(this.ints, QUOTA_LOCK, () => (this.floats[QUOTA_COUNT] = this.floats[QUOTA_COUNT]! + bytes));
  }

  /** Marks the quota spent; true for the one caller that marked it. */
  markSpent(): boolean {
    return Atomics.compareExchange(this.ints, SPENT, 0, 1) === 0;
  }

  /** The quota is no longer spent (raised past the count). */
  clearSpent(): void {
    Atomics.store(this.ints, SPENT, 0);
  }

  get spent(): boolean {
    return Atomics.load(this.ints, SPENT) === 1;
  }

  /** The bucket `name` of the rule, over these cells. */
  bucket(name: BucketName): TokenBucket {
    const index = BUCKETS.indexOf(name);
    const lock: Lock = (fn) => locked(this.ints, BUCKET_LOCK + index, fn);
    return TokenBucket.over(this.floats, 2 + index * BUCKET_CELLS, lock, now);
  }
}
