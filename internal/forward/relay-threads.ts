// The relay's other threads, as the main thread drives them: each is told every message, one at a time and in order
// (relay-thread.ts), and a message is done once every thread answered. A thread that ends (it should not: its faults
// are contained) is dropped from the pool, and said in the log; its sockets closed with it, the kernel sends new
// clients to the port's other sockets, and the forwarder gives back the places its connections held.

import { readFileSync, writeFileSync } from 'node:fs';
import type { Worker } from 'node:worker_threads';
import { faults } from '../relay/faults.ts';
import type { Limits } from '../relay/limits.ts';
import { startRelayThread, type Alone, type FromThread, type ToThread } from './relay-thread.ts';

interface Pending {
  resolve: (alone: Alone[]) => void;
}

class RelayThread {
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  readonly ended: Promise<void>;

  constructor(
    private readonly worker: Worker,
    onEnd: (error: Error | null) => void,
  ) {
    worker.on('message', (message: FromThread) => {
      if (message.type === 'fault') return faults.record(message.site, new Error(message.message));
      const pending = this.pending.get(message.seq);
      this.pending.delete(message.seq);
      pending?.resolve(message.alone);
    });
    let failure: Error | null = null;
    worker.on('error', (error) => (failure = error));
    this.ended = new Promise((resolve) =>
      worker.once('exit', () => {
        for (const { resolve: settle } of this.pending.values()) settle([]);
        this.pending.clear();
        onEnd(failure);
        resolve();
      }),
    );
  }

  tell(message: ToThread): Promise<Alone[]> {
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.pending.set(seq, { resolve });
      this.worker.postMessage({ seq, message });
    });
  }
}

export class RelayThreads {
  private readonly threads = new Set<RelayThread>();

  /**
   * `count` threads beside the main one (the shared counts' threads 1 to `count`), told `limits`; `onEnd` hears of one
   * that ended while it should not, and which.
   */
  constructor(count: number, limits: Limits, onEnd: (error: Error | null, index: number) => void = () => undefined) {
    for (let index = 1; index <= count; index++) {
      const thread = new RelayThread(startRelayThread(limits, index), (error) => {
        if (!this.threads.delete(thread)) return;
        onEnd(error, index);
      });
      this.threads.add(thread);
    }
  }

  /** How many relay threads run beside the main one. */
  get size(): number {
    return this.threads.size;
  }

  /** Tells every thread `message`; resolves once each has done it, with the ports one could not listen on. */
  async tell(message: ToThread): Promise<Alone[]> {
    return (await Promise.all([...this.threads].map((thread) => thread.tell(message)))).flat();
  }

  /** Closes every thread's listeners and connections; resolves once they have ended. */
  async close(): Promise<void> {
    const threads = [...this.threads];
    this.threads.clear();
    await Promise.all(threads.map((thread) => thread.tell({ type: 'close' })));
    await Promise.all(threads.map((thread) => thread.ended));
  }
}

/** Why the relay runs in one thread on this runtime whatever is asked (reusePort is missing); null: it may not. */
export function oneThreadOnly(): string | null {
  const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
  if (major < 22 || (major === 22 && minor < 12))
    return `Node.js ${process.versions.node} has no reusePort, which the relay's threads listen with (22.12 has)`;
  if (process.platform !== 'linux' && process.platform !== 'freebsd')
    return `reusePort spreads connections over threads on Linux and FreeBSD, not ${process.platform}`;
  return null;
}

const MIGRATE_REQ = '/proc/sys/net/ipv4/tcp_migrate_req';

/**
 * Has the kernel move the connections queued on a closing listener to another socket of its port (Linux 5.14 and
 * later, for the node's network namespace): without it, a relay thread's socket that closes (the old agent's, once an
 * upgrade's new one listens beside it) resets the connections it had not accepted yet. Null once on; otherwise why not.
 */
export function migrateQueued(): string | null {
  try {
    if (readFileSync(MIGRATE_REQ, 'utf8').trim() !== '1') writeFileSync(MIGRATE_REQ, '1');
    return null;
  } catch (error) {
    return `net.ipv4.tcp_migrate_req could not be turned on (${(error as NodeJS.ErrnoException).code ?? error})`;
  }
}
