// Reading a relayed TCP socket into a buffer and writing from it, the way a relay in C does, instead of through
// Node's stream machinery (a fresh 64 KiB chunk per read, pushed, emitted, piped).
//
// A connection reads into one 16 KiB buffer all connections share, and writes a copy of what it read (the size of
// the read), so that a connection passing requests and answers holds no buffer of its own: a buffer each way per
// connection made the garbage collector 10-15% of a relay's CPU at 8,000 connections a second. Sharing is safe
// because a read is handled before the next one starts (one thread) and nothing keeps the shared bytes past it. A
// read that fills the shared buffer (bulk data) moves the connection to a buffer of its own, written without a copy,
// which doubles up to 256 KiB while its reads fill it; a read that does not fill it moves the connection back to the
// shared one: only a connection moving bulk data holds a buffer, and one gone quiet after a burst does not keep it.
// Bulk reads 256 KiB at a time: a quarter of the reads and wakeups of a pipe, and no chunk allocated per read (on
// loopback 1.15-1.23x HAProxy's rate on one stream where pipe() made 0.75x; docs/performance.md).
//
// A buffer of its own is written without a copy, so nothing is read into it while a write holds it: a write the
// kernel took whole leaves nothing queued on the sink and reading goes on; otherwise the socket stops reading until
// that write's callback (back-pressure, one write in flight per direction).
//
// Each read is told to the rule's gate (gate.ts), which counts it against the rule's quota. Where the rule has a
// bandwidth_limit, a socket reads at most 16 KiB at a time and only what it reserved in the rule's token bucket
// beforehand (what it did not read goes back, and so does what it read for a sink that was gone): without a
// reservation it stays paused until its turn (turns.ts), so connections opening while others use the bandwidth wait
// their turn rather than each taking a read.

import { Socket, type OnReadOpts } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { Duplex, Writable } from 'node:stream';
import { READ_BYTES, type Gate, type Way } from './gate.ts';
import type { Waiter } from './turns.ts';

/** The rule a direction of a relayed connection belongs to, and which direction it is. */
export interface Limit {
  gate: Gate;
  way: Way;
}

const FIRST_BYTES = READ_BYTES;
const MOST_BYTES = 256 * 1024;

/** The buffer every connection reads into until it moves bulk data; its bytes are copied out at each read. */
const shared = Buffer.allocUnsafeSlow(FIRST_BYTES);

/** A connected socket's handle, which reads into the buffer it was last given. */
interface UserBuffered {
  useUserBuffer(buffer: Uint8Array): void;
}

/** Where a socket made by `readingSocket` or `adopt` keeps its reader. */
const READER = Symbol('reader');
type Read = Socket & { [READER]?: Reader };

class Reader implements Waiter {
  /** The shared buffer, or one of its own while the connection moves bulk data. */
  private buffer = shared;
  private sink: Writable | null = null;
  /**
   * A sink that may keep a written chunk after its write returns (a tunnel's stream, TLS) is written a copy, and so
   * is what was read into the shared buffer.
   */
  private copies = false;
  socket: Socket | null = null;

  readonly onread: OnReadOpts = {
    buffer: () => this.window ?? this.buffer,
    callback: (bytes) => this.read(bytes),
  };

  /** Where a throttled socket's next read goes: the part of the shared buffer its turn reserved (null: all of it). */
  private window: Buffer | null = null;

  private limit: Limit | null = null;

  /** What the socket's next read may take. */
  get bufferBytes(): number {
    return this.buffer.length;
  }

  /** Reads into `sink` from now on: at once, or once a read's worth of its rule's bandwidth is reserved. */
  start(sink: Writable, limit: Limit | null): void {
    this.sink = sink;
    this.copies = !(sink instanceof Socket) || sink instanceof TLSSocket;
    this.limit = limit;
    if (this.acquire()) this.socket?.resume();
  }

  /** Whether the socket gives back, when it closes, what it reserved and did not read (from its first reservation). */
  private refunds = false;

  private readonly refund = (): void => {
    if (this.reserved > 0) this.limit?.gate.read(this.limit.way, this.reserved, 0);
    this.reserved = 0;
    this.window = null;
  };

  /** Set while the socket waits for the sink to take what it wrote (a write's callback, or 'drain'). */
  private waiting = false;
  /** Set while the socket waits for its rule's bucket to hold a read's worth. */
  private throttled = false;
  /** What the socket's rule's bucket holds for its next read (a throttled socket reads at most FIRST_BYTES). */
  private reserved = 0;

  /**
   * Where the way is limited, reserves the next read's worth of bandwidth: true when the socket may read now;
   * otherwise false, and it is resumed when its turn comes (see Turns). A new connection waits its turn like the
   * others, so many opening at once cannot each take a read past the rate.
   */
  private acquire(): boolean {
    const limit = this.limit;
    if (!limit || !limit.gate.throttles(limit.way) || this.reserved > 0) return true;
    if (this.gone()) return false;
    const bytes = limit.gate.reserve(limit.way, this);
    if (bytes > 0) {
      this.reserve(bytes);
      return true;
    }
    this.throttled = true;
    return false;
  }

  /** `bytes` of the rule's bandwidth are the socket's: its next read takes no more. */
  private reserve(bytes: number): void {
    this.reserved = bytes;
    this.window = bytes < shared.length ? shared.subarray(0, bytes) : null;
    // Node asks for the next read's buffer right after a read (or when the socket connects), before a turn may come:
    // the turn's own goes to the handle, so that the read takes no more than the turn reserved.
    (this.socket as unknown as { _handle: UserBuffered | null })._handle?.useUserBuffer(this.window ?? this.buffer);
    if (!this.refunds) {
      this.refunds = true;
      // Past its end the socket reads nothing more: what it reserved goes back then, not when its pair closes.
      this.socket?.once('end', this.refund).once('close', this.refund);
    }
  }

  /**
   * A socket gone (its close may not have been told yet) takes nothing: what it would reserve it would never read nor
   * give back.
   */
  gone(): boolean {
    return this.socket?.destroyed ?? true;
  }

  /** Its turn: `bytes` reserved for its next read (0: the limit was lifted). */
  granted(bytes: number): void {
    this.throttled = false;
    if (bytes > 0) this.reserve(bytes);
    if (!this.waiting) this.socket?.resume();
  }

  /** Writes what was read; false pauses the socket until the sink has taken it and the bucket allows more. */
  private read(bytes: number): boolean {
    const sink = this.sink;
    // Reading starts only once there is a sink (sockets are made paused); one that has gone ends the relay elsewhere.
    if (!sink || sink.destroyed || sink.writableEnded) return false;
    const limit = this.limit;
    const window = this.window;
    const read = window ?? this.buffer;
    this.window = null;
    // A throttled socket reads no more than it reserved: it stays on the shared buffer.
    if (bytes === read.length && !limit?.gate.throttles(limit.way)) {
      if (read.length < MOST_BYTES) this.buffer = Buffer.allocUnsafeSlow(read.length * 2);
    } else this.buffer = shared;
    if (limit) {
      limit.gate.read(limit.way, this.reserved, bytes);
      this.reserved = 0;
    }
    if (this.copies || read === shared || window !== null) {
      // As pipe(): the sink buffers up to its high-water mark. Where the way is limited, bytes a gone sink never took
      // go back to the bucket: a client that hung up costs the rule no bandwidth for what was on its way to it.
      const undelivered = limit?.gate.throttles(limit.way) ? this.undelivered(limit, bytes) : undefined;
      if (!sink.write(Buffer.from(read.subarray(0, bytes)), undelivered)) {
        this.waiting = true;
        sink.once('drain', this.written);
      }
    } else {
      sink.write(read.subarray(0, bytes), this.written);
      if (sink.writableLength > 0) this.waiting = true;
    }
    return !this.waiting && !this.throttled && this.acquire();
  }

  /** A write's callback that gives `bytes` back to `limit`'s bucket if the write failed. */
  private undelivered(limit: Limit, bytes: number): (error?: Error | null) => void {
    return (error) => {
      if (error) limit.gate.undelivered(limit.way, bytes);
    };
  }

  /** After a write the socket paused for, or the sink's 'drain'. */
  private readonly written = (): void => {
    if (!this.waiting) return;
    this.waiting = false;
    if (!this.throttled && this.acquire()) this.socket?.resume();
  };
}

/** A paused socket, not connected, whose reads go through a reader: connect it, then `forward` from it. */
export function readingSocket(options: { allowHalfOpen: boolean }): Socket {
  const reader = new Reader();
  const socket = new Socket({ ...options, onread: reader.onread });
  socket.pause();
  reader.socket = socket;
  (socket as Read)[READER] = reader;
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
  (socket as Read)[READER] = reader;
  return socket;
}

/** What the next read of a socket made by `readingSocket` or `adopt` may take, in bytes; undefined for another. */
export function readBufferBytes(socket: Socket): number | undefined {
  return (socket as Read)[READER]?.bufferBytes;
}

/**
 * Sends what `from` reads to `to`, and its end as `to`'s end; back-pressure from `to` pauses `from`, and so does a
 * debt to the bucket of `limit`'s rule, which counts what goes through.
 */
export function forward(from: Duplex, to: Writable, limit: Limit | null = null): void {
  const reader = from instanceof Socket ? (from as Read)[READER] : undefined;
  if (!reader && !limit) return void from.pipe(to);
  from.once('end', () => to.end());
  if (reader) reader.start(to, limit);
  else meteredPipe(from, to, limit!);
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
  from.resume();
  // A stream opened while the bucket is in debt waits it out before its first read.
  const owed = limit.gate.flowed(limit.way, 0);
  if (owed > 0) {
    hold();
    setTimeout(release, owed);
  }
}
