// Who reads next where a rule's bandwidth is spent: its sockets wait their turn in the order they came, and a turn is
// a share of one burst, so that a round of every socket waiting costs one burst's time. Each waiting socket setting a
// timer of its own made them race for each refill, every winner taking a whole read: after a burst of connections
// (whose clients had gone, but whose relays still held what they had sent), a new client waited minutes for a read.
// In turn, a new client reads within a round, one burst's time (1 s at the smallest burst and rate), and a socket gone
// is passed over without taking anything.

import type { TokenBucket } from './bucket.ts';
import { faults } from './faults.ts';

/** The least a turn reserves, however many wait: a read smaller than this costs more than it moves. */
const MIN_TURN_BYTES = 64;

export interface Waiter {
  /** Whether it is gone (its socket closed or destroyed): its turn is passed over. */
  gone(): boolean;
  /** Its turn: `bytes` reserved for its next read (0: the limit was lifted, read at will). */
  granted(bytes: number): void;
}

/** A queue that takes from the front and pushes at the back, each in constant time. */
class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  shift(): T | undefined {
    const item = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

export class Turns {
  private readonly queue = new Fifo<Waiter>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly bucket: TokenBucket,
    /** The most a turn reserves: a whole read. */
    private readonly most: number,
  ) {}

  /** Whether sockets wait their turn now. */
  get waiting(): boolean {
    return this.queue.size > 0;
  }

  /** Reserves a read's worth for `waiter` now (the bytes reserved), or queues it for its turn (0). */
  take(waiter: Waiter): number {
    if (this.queue.size === 0 && this.bucket.reserve(this.most) === 0) return this.most;
    this.queue.push(waiter);
    this.timer ??= setTimeout(this.serve, 0);
    return 0;
  }

  /** The bucket was given back what a turn did not use: the next turn may come now. */
  poke(): void {
    if (this.waiting) this.rescheduled();
  }

  /** The rate changed: the next turn comes when the bucket says. */
  rescheduled(): void {
    clearTimeout(this.timer);
    this.timer = this.waiting ? setTimeout(this.serve, 0) : undefined;
  }

  /** The limit is gone: every waiter reads at once. */
  releaseAll(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (let waiter = this.queue.shift(); waiter; waiter = this.queue.shift()) this.grant(waiter, 0);
  }

  private readonly serve = (): void => {
    this.timer = undefined;
    for (let next = this.queue.peek(); next; next = this.queue.peek()) {
      if (next.gone()) {
        this.queue.shift();
        continue;
      }
      // A share of one burst for each socket waiting: a round of them all is one burst's time.
      const bytes = Math.max(MIN_TURN_BYTES, Math.min(this.most, Math.floor(this.bucket.capacity / this.queue.size)));
      const wait = this.bucket.reserve(bytes);
      if (wait > 0) {
        this.timer = setTimeout(this.serve, wait);
        return;
      }
      this.queue.shift();
      this.grant(next, bytes);
    }
  };

  private grant(waiter: Waiter, bytes: number): void {
    if (waiter.gone()) return;
    // A timer's callback, with nothing above it: a throw ends that socket's turn, not the agent.
    try {
      waiter.granted(bytes);
    } catch (error) {
      faults.record('tcp_relay', error);
    }
  }
}
