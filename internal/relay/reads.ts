// Reading a relayed TCP socket into a buffer of its own and writing straight from it, the way a relay in C does,
// instead of through Node's stream machinery (a fresh 64 KiB chunk per read, pushed, emitted, piped). A connection's
// buffer doubles, from 16 KiB up to 256 KiB, while its reads fill it, and goes back to 16 KiB after a read that does
// not: only a connection moving bulk data holds a large buffer, and one gone quiet after a burst does not keep it (so
// many idle connections cost what small ones do). Bulk reads 256 KiB at a time: a quarter of the reads and wakeups of
// a pipe, and no chunk allocated per read (on loopback 1.15-1.23x HAProxy's rate on one stream where pipe() made
// 0.75x; docs/performance.md).
//
// The buffer is written without a copy, so nothing is read into it while a write holds it: a write the kernel took
// whole leaves nothing queued on the sink and reading goes on; otherwise the socket stops reading until that write's
// callback (back-pressure, one write in flight per direction).
//
// Each read is told to the rule's gate (gate.ts), which counts it against the rule's quota and takes it from the
// token bucket of its bandwidth_limit: a read that leaves the bucket in debt stops the socket until the debt is paid,
// and such a socket reads no more than 16 KiB at a time, which bounds by how much one read can run ahead of the rate.

import { Socket, type OnReadOpts } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { Duplex, Writable } from 'node:stream';
import type { Gate, Way } from './gate.ts';

/** The rule a direction of a relayed connection belongs to, and which direction it is. */
export interface Limit {
  gate: Gate;
  way: Way;
}

const FIRST_BYTES = 16 * 1024;
const MOST_BYTES = 256 * 1024;

/** The reader of each socket made by `readingSocket` or `adopt`. */
const readers = new WeakMap<Socket, Reader>();

class Reader {
  private buffer = Buffer.allocUnsafeSlow(FIRST_BYTES);
  private sink: Writable | null = null;
  /** A sink that may keep a written chunk after its write returns (a tunnel's stream, TLS) is written a copy. */
  private copies = false;
  socket: Socket | null = null;

  readonly onread: OnReadOpts = {
    buffer: () => this.buffer,
    callback: (bytes) => this.read(bytes),
  };

  private limit: Limit | null = null;

  /** What the socket's next read may take. */
  get bufferBytes(): number {
    return this.buffer.length;
  }

  sendTo(sink: Writable, limit: Limit | null): void {
    this.sink = sink;
    this.copies = !(sink instanceof Socket) || sink instanceof TLSSocket;
    this.limit = limit;
  }

  /** Set while the socket waits for the sink to take what it wrote (a write's callback, or 'drain'). */
  private waiting = false;
  /** Set while the socket waits for its rule's bucket to pay a debt. */
  private throttled = false;

  /** Writes what was read; false pauses the socket until the sink has taken it and the bucket allows more. */
  private read(bytes: number): boolean {
    const sink = this.sink;
    // Reading starts only once there is a sink (sockets are made paused); one that has gone ends the relay elsewhere.
    if (!sink || sink.destroyed || sink.writableEnded) return false;
    const limit = this.limit;
    const read = this.buffer;
    if (bytes === read.length && !limit?.gate.throttles(limit.way)) {
      if (read.length < MOST_BYTES) this.buffer = Buffer.allocUnsafeSlow(read.length * 2);
    } else if (read.length > FIRST_BYTES) this.buffer = Buffer.allocUnsafeSlow(FIRST_BYTES);
    if (limit) this.throttle(limit.gate.flowed(limit.way, bytes));
    if (this.copies) {
      // As pipe(): the sink buffers up to its high-water mark.
      if (!sink.write(Buffer.from(read.subarray(0, bytes)))) {
        this.waiting = true;
        sink.once('drain', this.written);
      }
    } else {
      sink.write(read.subarray(0, bytes), this.written);
      if (sink.writableLength > 0) this.waiting = true;
    }
    return !this.waiting && !this.throttled;
  }

  /** Makes the socket wait `wait` ms (a debt to its rule's bucket) before it reads again. */
  private throttle(wait: number): void {
    if (wait === 0) return;
    this.throttled = true;
    setTimeout(this.paid, wait);
  }

  /** After a write the socket paused for, or the sink's 'drain'. */
  private readonly written = (): void => {
    if (!this.waiting) return;
    this.waiting = false;
    if (!this.throttled) this.socket?.resume();
  };

  private readonly paid = (): void => {
    this.throttled = false;
    if (!this.waiting) this.socket?.resume();
  };
}

/** A paused socket, not connected, whose reads go through a reader: connect it, then `forward` from it. */
export function readingSocket(options: { allowHalfOpen: boolean }): Socket {
  const reader = new Reader();
  const socket = new Socket({ ...options, onread: reader.onread });
  socket.pause();
  reader.socket = socket;
  readers.set(socket, reader);
  return socket;
}

/**
 * The connection of a socket a server accepted paused, in a socket whose reads go through a reader, or the socket
 * itself where it cannot be moved. A server makes its sockets without a way to read into a buffer of one's own, so
 * the connection's handle goes into a new socket, as the server itself makes them; the accepted one is destroyed
 * without it (which a server counts as that connection closing, so its maxConnections no longer holds).
 */
export function adopt(accepted: Socket): Socket {
  const internal = accepted as unknown as { _handle: object | null };
  const handle = internal._handle;
  if (!handle || accepted.readableLength > 0) return accepted;
  const reader = new Reader();
  const socket = new Socket({
    handle,
    allowHalfOpen: accepted.allowHalfOpen,
    pauseOnCreate: true,
    onread: reader.onread,
  } as ConstructorParameters<typeof Socket>[0]);
  internal._handle = null;
  accepted.destroy();
  reader.socket = socket;
  readers.set(socket, reader);
  return socket;
}

/** What the next read of a socket made by `readingSocket` or `adopt` may take, in bytes; undefined for another. */
export function readBufferBytes(socket: Socket): number | undefined {
  return readers.get(socket)?.bufferBytes;
}

/**
 * Sends what `from` reads to `to`, and its end as `to`'s end; back-pressure from `to` pauses `from`, and so does a
 * debt to the bucket of `limit`'s rule, which counts what goes through.
 */
export function forward(from: Duplex, to: Writable, limit: Limit | null = null): void {
  const reader = from instanceof Socket ? readers.get(from) : undefined;
  if (reader) reader.sendTo(to, limit);
  else if (!limit) return void from.pipe(to);
  else meteredPipe(from, to, limit);
  from.once('end', () => to.end());
  from.resume();
}

/** pipe(), for a stream (a tunnel's) the gate counts: paused while `to` is full or the rule's bucket in debt. */
function meteredPipe(from: Duplex, to: Writable, limit: Limit): void {
  let holds = 0;
  const hold = () => {
    if (holds++ === 0) from.pause();
  };
  const release = () => {
    if (--holds === 0) from.resume();
  };
  from.on('data', (chunk: Buffer) => {
    if (!to.write(chunk)) {
      hold();
      to.once('drain', release);
    }
    const wait = limit.gate.flowed(limit.way, chunk.length);
    if (wait > 0) {
      hold();
      setTimeout(release, wait);
    }
  });
}
