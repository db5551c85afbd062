// What a relay listener holds open, as shared memory, so that every thread listening on the port (reusePort) counts
// against one cap: its connections (or UDP sessions) in all, and those of each client address, which the node's
// max_connections_per_source holds per port. One table a listener, of client addresses and their counts, open
// addressing under one lock (a claim or a release holds it for a hash and a few probes). It starts small and grows in
// place (a growable SharedArrayBuffer: every thread's view follows) up to what the listener's cap can hold, so a quiet
// port of a wide range costs a few hundred bytes. Each address's count is kept per thread too, so that a thread that
// ends gives back the places its connections held (they closed with it).
//
// An address is kept as two 32-bit hashes of its text (Node gives one address one text): two addresses alike in both
// would count as one, a chance of about 1 in 10^11 among the 10,000 a listener may hold at most.

import { locked } from './cells.ts';

/** Int32 cells before the slots. */
const LOCK = 0;
const OPEN = 1;
const LIVE = 2;
const DEAD = 3;
const SLOTS = 4;
/** How many threads count in the table. */
const THREADS = 5;
const HEADER = 8;

/** A slot's Int32 cells: its state, the address's two hashes, its count, then each thread's share of the count. */
const STATE = 0;
const HASH_A = 1;
const HASH_B = 2;
const COUNT = 3;
const BY_THREAD = 4;

const EMPTY = 0;
const USED = 1;
/** Once used: a probe goes on past it. */
const FREED = 2;

const FIRST_SLOTS = 16;

const bytesFor = (slots: number, threads: number) => (HEADER + slots * (BY_THREAD + threads)) * 4;

/** The fewest slots (a power of two) that keep `addresses` at most half full. */
function slotsFor(addresses: number): number {
  let slots = FIRST_SLOTS;
  while (slots < addresses * 2) slots *= 2;
  return slots;
}

/** FNV-1a over the text's UTF-16 units, from `basis`. */
function hash(text: string, basis: number): number {
  let h = basis;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h | 0;
}

export class ListenerCounts {
  readonly buffer: SharedArrayBuffer;
  private readonly ints: Int32Array;
  /** A slot's Int32 cells. */
  private readonly slot: number;
  private readonly thread: number;

  /**
   * The counts of `buffer` (another thread's, of the same listener) as thread `thread` (0: the agent's main thread)
   * uses them; without a buffer, new counts for at most `maxOpen` open, kept by `threads` threads.
   */
  constructor(maxOpen: number, buffer?: SharedArrayBuffer, thread = 0, threads = 1) {
    this.buffer =
      buffer ??
      new SharedArrayBuffer(bytesFor(FIRST_SLOTS, threads), { maxByteLength: bytesFor(slotsFor(maxOpen), threads) });
    if (!this.buffer.growable) throw new Error("a listener's counts are a growable SharedArrayBuffer");
    // Without a length, the view follows the buffer as another thread grows it.
    this.ints = new Int32Array(this.buffer);
    if (!buffer) {
      this.ints[SLOTS] = FIRST_SLOTS;
      this.ints[THREADS] = threads;
    }
    const counted = this.ints[THREADS]!;
    if (thread >= counted) throw new Error(`thread ${thread} of a listener's counts kept by ${counted} threads`);
    this.slot = BY_THREAD + counted;
    this.thread = thread;
  }

  /** Connections or sessions open on the listener, in every thread. */
  get open(): number {
    return Atomics.load(this.ints, OPEN);
  }

  /**
   * Takes a place for one more of `source`'s, if the listener holds fewer than `maxOpen` and `source` fewer than
   * `perSource`; false when either is full.
   */
  claim(source: string, maxOpen: number, perSource: number): boolean {
    const a = hash(source, 0x811c9dc5);
    const b = hash(source, 0x050c5d1f);
    return locked(this.ints, LOCK, () => {
      const ints = this.ints;
      if (ints[OPEN]! >= maxOpen) return false;
      let slot = this.find(a, b);
      if (slot >= 0) {
        if (ints[slot + COUNT]! >= perSource) return false;
      } else {
        if (perSource < 1) return false;
        // Kept at most three quarters taken (freed slots included), laid out again at most half.
        if ((ints[LIVE]! + ints[DEAD]! + 1) * 4 > ints[SLOTS]! * 3) this.rehash(ints[LIVE]! + 1);
        slot = this.place(a, b);
      }
      ints[slot + COUNT]!++;
      ints[slot + BY_THREAD + this.thread]!++;
      Atomics.add(ints, OPEN, 1);
      return true;
    });
  }

  /** Gives back a place `source` took in this thread. */
  release(source: string): void {
    const a = hash(source, 0x811c9dc5);
    const b = hash(source, 0x050c5d1f);
    locked(this.ints, LOCK, () => {
      const slot = this.find(a, b);
      if (slot >= 0) this.give(slot, this.thread, 1);
    });
  }

  /**
   * Gives back every place thread `thread` holds, once it ended (its connections closed with it): how many. Only a
   * thread stopped inside the table's lock (its own `terminate()`: a fault ends a thread past its `finally`) could
   * leave the table in between; the agent stops its threads that way only as it closes.
   */
  reclaim(thread: number): number {
    return locked(this.ints, LOCK, () => {
      let given = 0;
      for (let i = 0; i < this.ints[SLOTS]!; i++) {
        const slot = HEADER + i * this.slot;
        const held = this.ints[slot + STATE] === USED ? this.ints[slot + BY_THREAD + thread]! : 0;
        if (held > 0) given += this.give(slot, thread, held);
      }
      return given;
    });
  }

  /** Takes `count` places of thread `thread` off the slot at `slot`, freeing it at none; under the lock. */
  private give(slot: number, thread: number, count: number): number {
    const ints = this.ints;
    Atomics.sub(ints, OPEN, count);
    ints[slot + BY_THREAD + thread]! -= count;
    if ((ints[slot + COUNT]! -= count) > 0) return count;
    ints[slot + STATE] = FREED;
    ints[LIVE]!--;
    ints[DEAD]!++;
    return count;
  }

  /** The index of the slot of the address hashed `a`, `b`; -1 when it holds none. */
  private find(a: number, b: number): number {
    const ints = this.ints;
    const mask = ints[SLOTS]! - 1;
    for (let i = a & mask, probes = 0; probes <= mask; i = (i + 1) & mask, probes++) {
      const slot = HEADER + i * this.slot;
      const state = ints[slot + STATE];
      if (state === EMPTY) return -1;
      if (state === USED && ints[slot + HASH_A] === a && ints[slot + HASH_B] === b) return slot;
    }
    return -1;
  }

  /** A slot for an address not held, taken: the first free one of its probe. */
  private place(a: number, b: number): number {
    const ints = this.ints;
    const mask = ints[SLOTS]! - 1;
    for (let i = a & mask; ; i = (i + 1) & mask) {
      const slot = HEADER + i * this.slot;
      const state = ints[slot + STATE];
      if (state === USED) continue;
      if (state === FREED) ints[DEAD]!--;
      ints.fill(0, slot, slot + this.slot);
      ints[slot + STATE] = USED;
      ints[slot + HASH_A] = a;
      ints[slot + HASH_B] = b;
      ints[LIVE]!++;
      return slot;
    }
  }

  /**
   * Lays the addresses held out again, without the freed slots, in a table that keeps `addresses` at most half full
   * (grown in place when it must be, and as far as the buffer may grow: past that the freed slots alone make room).
   */
  private rehash(addresses: number): void {
    const ints = this.ints;
    const size = this.slot;
    // Each slot held, whole: its hashes, count and each thread's share.
    const held: Int32Array[] = [];
    for (let i = 0; i < ints[SLOTS]!; i++) {
      const slot = HEADER + i * size;
      if (ints[slot + STATE] === USED) held.push(ints.slice(slot, slot + size));
    }
    const most = (this.buffer.maxByteLength / 4 - HEADER) / size;
    const wanted = Math.max(ints[SLOTS]!, Math.min(slotsFor(addresses), most));
    const bytes = (HEADER + wanted * size) * 4;
    if (bytes > this.buffer.byteLength) this.buffer.grow(bytes);
    ints.fill(0, HEADER, HEADER + wanted * size);
    ints[SLOTS] = wanted;
    ints[LIVE] = 0;
    ints[DEAD] = 0;
    for (const cells of held) ints.set(cells, this.place(cells[HASH_A]!, cells[HASH_B]!));
  }
}
