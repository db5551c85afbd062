// The WAL's durability and size, kept off the event loop. Commits run with
// synchronous=NORMAL (no fsync inside COMMIT, which is synchronous and would hold every
// request meanwhile); `WalSync.sync()` then fdatasyncs the WAL on libuv's thread pool and
// resolves once everything committed before the call is on disk, so writes are still
// acknowledged only when durable. Concurrent calls share one fdatasync (group commit for
// the sync itself). The checkpointer copies the WAL into the database file on a worker
// thread with a connection of its own, so the event loop never pays for that either.

import { closeSync, fdatasync, fdatasyncSync, fstatSync, openSync } from 'node:fs';
import type { Worker as WorkerThread } from 'node:worker_threads';

export class WalSync {
  private fd: number | null = null;
  private closed = false;
  /** The fdatasync in flight, and the one that waits for it (covering commits made meanwhile). */
  private running: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  constructor(private readonly path: string) {}

  /** Resolves once every commit made before this call is durable. */
  sync(): Promise<void> {
    if (!this.running) return (this.running = this.syncOnce());
    // What is in flight may have started before the latest commit: one more sync follows it, for everyone waiting.
    this.queued ??= this.running.then(
      () => this.next(),
      () => this.next(),
    );
    return this.queued;
  }

  /** The WAL's size in bytes (0 before the first commit). */
  size(): number {
    const fd = this.open();
    return fd === null ? 0 : fstatSync(fd).size;
  }

  /** Syncs at once, blocking: for closing, when nothing else runs. */
  syncNow(): void {
    const fd = this.open();
    if (fd !== null) fdatasyncSync(fd);
  }

  /** Closes the WAL's descriptor once no fdatasync is using it. */
  close(): void {
    const fd = this.fd;
    this.fd = null;
    this.closed = true;
    if (fd === null) return;
    const pending = this.queued ?? this.running;
    if (!pending) return closeSync(fd);
    const closeAfter = () => closeSync(fd);
    pending.then(closeAfter, closeAfter);
  }

  private next(): Promise<void> {
    this.queued = null;
    return (this.running = this.syncOnce());
  }

  private syncOnce(): Promise<void> {
    const fd = this.open();
    const done = new Promise<void>((resolve, reject) => {
      if (fd === null) return resolve();
      fdatasync(fd, (error) => (error ? reject(error) : resolve()));
    });
    const settle = () => {
      if (this.running === done) this.running = null;
    };
    done.then(settle, settle);
    return done;
  }

  /** The WAL exists from the first commit on, and SQLite keeps its inode while a connection is open. */
  private open(): number | null {
    if (this.fd === null && !this.closed) {
      try {
        this.fd = openSync(`${this.path}-wal`, 'r');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    return this.fd;
  }
}

// Runs in the worker: plain JavaScript, as the bundle ships no second file.
const CHECKPOINTER = `
const { parentPort, workerData } = require('node:worker_threads');
const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
const db = new DatabaseSync(workerData.path, { timeout: 5000 });
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
parentPort.on('message', (message) => {
  if (message === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    parentPort.postMessage({ done: checkpoint.get() });
  } catch (error) {
    parentPort.postMessage({ failed: String(error && error.message) });
  }
});
`;

/**
 * Copies the WAL into the database file on a worker thread when asked, one checkpoint at
 * a time. PASSIVE: it waits for no reader or writer, and the writer starts the WAL over
 * once it is all copied.
 */
export class Checkpointer {
  private worker: WorkerThread | null = null;
  private busy = false;
  private failed: (message: string) => void = () => undefined;

  constructor(private readonly path: string) {}

  /** Starts a checkpoint unless one is running. */
  request(): void {
    if (this.busy) return;
    this.busy = true;
    this.thread().postMessage('checkpoint');
  }

  /** Called with the reason when a checkpoint fails (the WAL only grows until the next one succeeds). */
  onFailure(fn: (message: string) => void): void {
    this.failed = fn;
  }

  close(): void {
    this.worker?.postMessage('close');
    this.worker = null;
  }

  private thread(): WorkerThread {
    if (!this.worker) {
      const { Worker } = process.getBuiltinModule('node:worker_threads') as typeof import('node:worker_threads');
      const worker = new Worker(CHECKPOINTER, { eval: true, workerData: { path: this.path } });
      worker.unref();
      worker.on('message', (message: { failed?: string }) => {
        this.busy = false;
        if (message.failed !== undefined) this.failed(message.failed);
      });
      worker.on('error', (error) => {
        this.busy = false;
        if (this.worker === worker) this.worker = null;
        this.failed(error.message);
      });
      this.worker = worker;
    }
    return this.worker;
  }
}
