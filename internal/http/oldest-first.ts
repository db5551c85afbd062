// Connections counted oldest first, which come and go thousands of times a second: kept in an array each is passed
// over in once gone, compacted when the gone outnumber the live. (A Map or a WeakMap by socket kept V8's young
// collections long: the master took 17% fewer new connections a second.)

export class OldestFirst<T extends { gone: boolean }> {
  private items: T[] = [];
  /** Every item before it is gone. */
  private oldest = 0;

  /** Adds `item`, the newest; `live` is how many are not gone, with it. */
  push(item: T, live: number): void {
    this.items.push(item);
    // The whole array counts: those before `oldest`, passed over by `first`, are gone too, and held until compacted.
    if (this.items.length > 2 * live + 1024) {
      this.items = this.items.filter((kept, at) => at >= this.oldest && !kept.gone);
      this.oldest = 0;
    }
  }

  /** The oldest not gone; undefined when every one is. */
  first(): T | undefined {
    while (this.oldest < this.items.length && this.items[this.oldest]!.gone) this.oldest++;
    return this.items[this.oldest];
  }

  /** How many it holds, gone ones included (at most twice the live ones, and 1,025). */
  get held(): number {
    return this.items.length;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (const item of this.items) if (!item.gone) yield item;
  }
}
