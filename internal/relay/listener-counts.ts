// What a relay listener holds open, as shared memory, so that every thread listening on the port (reusePort) counts
// against one cap: its connections (or UDP sessions) in all, and those of each client address, which the node's
// max_connections_per_source holds per port. One table a listener, of client addresses and their counts, open
// addressing under one lock (a claim or a release holds it for a hash and a few probes). It starts small and grows in
// place (a growable SharedArrayBuffer: every thread's view follows) up to what the listener's cap can hold, so a quiet
// port of a wide range costs a few hundred bytes.
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
const HEADER = 8;

/** A slot's Int32 cells: its state, the address's two hashes, its count. */
const STATE = 0;
const HASH_A = 1;
const HASH_B = 2;
const COUNT = 3;
const SLOT = 4;

const EMPTY = 0;
const USED = 1;
/** Once used: a probe goes on past it. */
const FREED = 2;

const FIRST_SLOTS = 16;

const bytesFor = (slots: number) => (HEADER + slots * SLOT) * 4;

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

  /** `buffer`: another thread's counts of the same listener; without one, new counts for at most `maxOpen`. */
  constructor(maxOpen: number, buffer?: SharedArrayBuffer) {
    this.buffer =
      buffer ?? new SharedArrayBuffer(bytesFor(FIRST_SLOTS), { maxByteLength: bytesFor(slotsFor(maxOpen)) });
    if (!this.buffer.growable) throw new Error("a listener's counts are a growable SharedArrayBuffer");
    // Without a length, the view follows the buffer as another thread grows it.
    this.ints = new Int32Array(this.buffer);
    if (!buffer) this.ints[SLOTS] = FIRST_SLOTS;
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
      Atomics.add(ints, OPEN, 1);
      return true;
    });
  }

  /** Gives back a place `source` took. */
  release(source: string): void {
    const a = hash(source, 0x811c9dc5);
    const b = hash(source, 0x050c5d1f);
    locked(this.ints, LOCK, () => {
      const ints = this.ints;
      const slot = this.find(a, b);
      if (slot < 0) return;
      Atomics.sub(ints, OPEN, 1);
      if (--ints[slot + COUNT]! > 0) return;
      ints[slot + STATE] = FREED;
      ints[LIVE]!--;
      ints[DEAD]!++;
    });
  }

  /** The index of the slot of the address hashed `a`, `b`; -1 when it holds none. */
  private find(a: number, b: number): number {
    const ints = this.ints;
    const mask = ints[SLOTS]! - 1;
    for (let i = a & mask, probes = 0; probes <= mask; i = (i + 1) & mask, probes++) {
      const slot = HEADER + i * SLOT;
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
      const slot = HEADER + i * SLOT;
      const state = ints[slot + STATE];
      if (state === USED) continue;
      if (state === FREED) ints[DEAD]!--;
      ints[slot + STATE] = USED;
      ints[slot + HASH_A] = a;
      ints[slot + HASH_B] = b;
      ints[slot + COUNT] = 0;
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
    const held: number[] = [];
    for (let i = 0; i < ints[SLOTS]!; i++) {
      const slot = HEADER + i * SLOT;
      if (ints[slot + STATE] === USED) held.push(ints[slot + HASH_A]!, ints[slot + HASH_B]!, ints[slot + COUNT]!);
    }
    const most = (this.buffer.maxByteLength / 4 - HEADER) / SLOT;
    const wanted = Math.max(ints[SLOTS]!, Math.min(slotsFor(addresses), most));
    if (bytesFor(wanted) > this.buffer.byteLength) this.buffer.grow(bytesFor(wanted));
    ints.fill(0, HEADER, HEADER + wanted * SLOT);
    ints[SLOTS] = wanted;
    ints[LIVE] = 0;
    ints[DEAD] = 0;
    for (let i = 0; i < held.length; i += 3) this.ints[this.place(held[i]!, held[i + 1]!) + COUNT] = held[i + 2]!;
  }
}
